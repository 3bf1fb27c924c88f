//===- ExplainRedistributions.cpp - --dtensor-explain-redistributions ----===//
//
// Says why every redistribute of a function exists and what it costs, in the
// mesh's own dim names: the op and operand that needed it (or the declared
// result it produces), placements before and after, the collective steps of
// its plan and the bytes each rank sends. The same explanation feeds
// dtorch.explain() through the compiler.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "mlir/IR/Diagnostics.h"

namespace dtorch::dtensor {
#define GEN_PASS_DEF_EXPLAINREDISTRIBUTIONS
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;
using namespace dtorch;
using namespace dtorch::dtensor;

namespace {

std::string typeString(Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return s;
}

/// The reason propagation recorded in the redistribute's location, if any.
StringRef recordedReason(RedistributeOp op) {
  if (auto fused = dyn_cast<FusedLoc>(op.getLoc()))
    if (auto s = dyn_cast_or_null<StringAttr>(fused.getMetadata()))
      return s.getValue();
  return {};
}

/// Every operand that reads `v`, in program order.
SmallVector<OpOperand *> usesInOrder(Value v) {
  SmallVector<OpOperand *> uses;
  for (OpOperand &u : v.getUses())
    uses.push_back(&u);
  llvm::sort(uses, [](OpOperand *a, OpOperand *b) {
    Operation *x = a->getOwner(), *y = b->getOwner();
    if (x != y && x->getBlock() == y->getBlock())
      return x->isBeforeInBlock(y);
    return x == y && a->getOperandNumber() < b->getOperandNumber();
  });
  return uses;
}

ExplainedRedistribute explain(RedistributeOp op) {
  using Reason = RedistributionExplanation::Reason;
  DTensorType src = op.getInput().getType();
  DTensorType dst = op.getResult().getType();
  MeshAttr mesh = src.getMesh();
  ExplainedRedistribute out{op, {}};
  RedistributionExplanation &e = out.info;
  Operation *producer = op.getInput().getDefiningOp();
  if (producer)
    e.source = producer->getName().getStringRef().str();
  SmallVector<OpOperand *> uses = usesInOrder(op.getResult());
  for (OpOperand *u : uses)
    e.uses.push_back({u->getOwner()->getName().getStringRef().str(),
                      (int64_t)u->getOperandNumber()});
  StringRef reason = recordedReason(op);
  if (reason == kNeededByOperandReason && !uses.empty()) {
    e.reason = Reason::Operand;
    out.anchor = uses.front()->getOwner();
  } else if (reason == kDeclaredResultReason && producer) {
    e.reason = Reason::Result;
    out.anchor = producer;
  }
  e.shape.assign(src.getShape().begin(), src.getShape().end());
  e.elementType = typeString(src.getElementType());
  e.elementBytes = elementBytes(src.getElementType());
  e.meshShape.assign(mesh.getShape().begin(), mesh.getShape().end());
  for (StringAttr n : mesh.getDimNames())
    e.meshDimNames.push_back(n.getValue().str());
  e.before = src.getLayout();
  e.after = dst.getLayout();
  e.regather = op->hasAttr(kRegatherAttrName);
  planTraffic(e);
  return out;
}

struct ExplainRedistributionsPass
    : public dtorch::dtensor::impl::ExplainRedistributionsBase<
          ExplainRedistributionsPass> {
  void runOnOperation() override {
    for (const ExplainedRedistribute &r :
         explainRedistributions(getOperation()))
      emitRemark(r.anchor->getLoc()) << explanationText(r.info);
    markAllAnalysesPreserved();
  }
};

} // namespace

std::vector<ExplainedRedistribute>
dtorch::dtensor::explainRedistributions(func::FuncOp fn) {
  std::vector<ExplainedRedistribute> out;
  fn.walk([&](RedistributeOp op) { out.push_back(explain(op)); });
  return out;
}
