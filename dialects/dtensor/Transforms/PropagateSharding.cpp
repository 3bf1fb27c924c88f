//===- PropagateSharding.cpp - --dtensor-propagate-sharding --------------===//
//
// Chooses every op's strategy from its sharding rule and materialises the
// redistributions it needs; declared placements never change.
//
//===----------------------------------------------------------------------===//
#include "OpLayoutKey.h"
#include "dtensor/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <unordered_map>

namespace dtorch::dtensor {
#define GEN_PASS_DEF_PROPAGATESHARDING
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;
using namespace dtorch;
using namespace dtorch::dtensor;

namespace {

std::vector<int64_t> toVec(ArrayRef<int64_t> a) { return {a.begin(), a.end()}; }

/// `loc` marked with why a redistribute was inserted (see Passes.h).
Location reasonLoc(Location loc, StringRef reason) {
  return FusedLoc::get(loc.getContext(), {loc},
                       StringAttr::get(loc.getContext(), reason));
}

/// The strategy chosen for a key, and whether it keeps every layout (the
/// op then needs no redistribution).
struct Choice {
  ShardingStrategy strategy;
  bool keepsLayouts;
};

/// Strategies chosen so far in one run of the pass: a chain of ops of the
/// same kind and layouts asks the rule once.
using StrategyMemo = std::unordered_map<OpLayoutKey, Choice, OpLayoutKeyHash>;

void applyStrategy(ShardingRuleOpInterface op, StrategyMemo &memo) {
  Operation *operation = op.getOperation();
  auto resultType = cast<DTensorType>(operation->getResult(0).getType());
  OpLayoutKey key = OpLayoutKey::of(operation);
  auto found = memo.find(key);
  if (found != memo.end() && found->second.keepsLayouts)
    return;

  std::vector<std::vector<int64_t>> shapes;
  std::vector<Placements> placements;
  for (Value v : operation->getOperands()) {
    auto t = cast<DTensorType>(v.getType());
    shapes.push_back(toVec(t.getShape()));
    placements.push_back(t.getLayout());
  }
  Placements required = resultType.getLayout();
  // An op without operands (a creation, a receive) that makes its declared
  // result locally keeps it: nothing is cheaper, and for a receive another
  // result would change what the received pieces mean (a summand of a
  // P(sum) is not a replica).
  if (operation->getNumOperands() == 0 &&
      isLocalStrategy(op.getShardingRule(), {}, required,
                      toVec(resultType.getMesh().getShape())))
    return;
  if (found == memo.end()) {
    ShardingStrategy chosen = chooseStrategy(
        op.getShardingRule(), shapes, placements, toVec(resultType.getShape()),
        elementBytes(resultType.getElementType()),
        toVec(resultType.getMesh().getShape()), &required);
    bool keeps = chosen.operands == placements && chosen.result == required;
    found =
        memo.emplace(std::move(key), Choice{std::move(chosen), keeps}).first;
    if (keeps)
      return;
  }
  const ShardingStrategy &s = found->second.strategy;

  OpBuilder b(operation);
  for (unsigned k = 0; k < operation->getNumOperands(); ++k) {
    if (s.operands[k] == placements[k])
      continue;
    Value v = operation->getOperand(k);
    auto t = cast<DTensorType>(v.getType()).withPlacements(s.operands[k]);
    operation->setOperand(
        k,
        RedistributeOp::create(
            b, reasonLoc(operation->getLoc(), kNeededByOperandReason), t, v));
  }
  if (s.result != required) {
    Value res = operation->getResult(0);
    res.setType(resultType.withPlacements(s.result));
    b.setInsertionPointAfter(operation);
    auto r = RedistributeOp::create(
        b, reasonLoc(operation->getLoc(), kDeclaredResultReason), resultType,
        res);
    res.replaceAllUsesExcept(r, r);
  }
}

/// Removes identity redistributions and shortens chains A -> B -> C to A -> C.
void foldRedistributes(func::FuncOp fn) {
  SmallVector<RedistributeOp> ops;
  fn.walk([&](RedistributeOp op) { ops.push_back(op); });
  // The inner op of a chain is usually in `ops` too: once erased, it must
  // not be looked at again (fuzz_dtensor_ir: a use after free).
  llvm::SmallPtrSet<Operation *, 8> erased;
  for (RedistributeOp op : ops) {
    if (erased.contains(op))
      continue;
    while (auto inner = op.getInput().getDefiningOp<RedistributeOp>()) {
      op.getInputMutable().assign(inner.getInput());
      // A regather stays one through the chain (CSE must not merge it with
      // the forward's gather).
      copyRegatherAttr(inner, op);
      if (inner->use_empty()) {
        erased.insert(inner);
        inner->erase();
      }
    }
  }
  for (RedistributeOp op : ops) {
    if (erased.contains(op))
      continue;
    if (op.getInput().getType() == op.getResult().getType()) {
      op.getResult().replaceAllUsesWith(op.getInput());
      op->erase();
    }
  }
}

struct PropagateShardingPass
    : public dtorch::dtensor::impl::PropagateShardingBase<
          PropagateShardingPass> {
  void runOnOperation() override {
    SmallVector<ShardingRuleOpInterface> ops;
    getOperation().walk([&](ShardingRuleOpInterface op) { ops.push_back(op); });
    StrategyMemo memo;
    for (ShardingRuleOpInterface op : ops)
      applyStrategy(op, memo);
    foldRedistributes(getOperation());
  }
};

} // namespace
