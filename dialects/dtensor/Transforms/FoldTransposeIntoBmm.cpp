//===- FoldTransposeIntoBmm.cpp - --rank-fold-transpose-into-bmm ---------===//
//
// Turns the transposes of leading dims around a `bmm` (attention's
// [B, T, H, D] <-> [B, H, T, D] head transposes) into the bmm's `a_perm`,
// `b_perm` and `out_perm` attributes: the runtime's kernel reads and writes
// the permuted tensors in place, row by row with a stride (Passes.td).
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/SmallVector.h"

namespace dtorch::dtensor {
#define GEN_PASS_DEF_FOLDTRANSPOSEINTOBMM
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;
namespace rank = dtorch::rank;

namespace {

constexpr llvm::StringLiteral kOperandPerm[2] = {"a_perm", "b_perm"};
constexpr llvm::StringLiteral kOutPerm = "out_perm";

bool isBmm(Operation *op) {
  auto kernel = dyn_cast_or_null<rank::KernelOp>(op);
  return kernel && kernel.getKernel() == "bmm" &&
         kernel.getInputs().size() == 2 && op->getNumResults() == 1;
}

/// The `perm` of a `transpose` kernel that moves leading dims only (the
/// last dim stays last, and it moves something), else none.
std::optional<SmallVector<int64_t>> leadingPerm(Operation *op) {
  auto kernel = dyn_cast_or_null<rank::KernelOp>(op);
  if (!kernel || kernel.getKernel() != "transpose" ||
      kernel.getInputs().size() != 1)
    return std::nullopt;
  auto perm = kernel->getAttrOfType<DenseI64ArrayAttr>("perm");
  auto type = dyn_cast<RankedTensorType>(kernel.getInputs()[0].getType());
  if (!perm || !type || type.getRank() < 3 || perm.size() != type.getRank())
    return std::nullopt;
  int64_t r = type.getRank();
  SmallVector<int64_t> p(perm.asArrayRef());
  if (p[r - 1] != r - 1)
    return std::nullopt;
  SmallVector<bool> seen(r, false);
  bool identity = true;
  for (int64_t d = 0; d < r; ++d) {
    if (p[d] < 0 || p[d] >= r || seen[p[d]])
      return std::nullopt;
    seen[p[d]] = true;
    identity = identity && p[d] == d;
  }
  if (identity)
    return std::nullopt;
  return p;
}

struct FoldTransposeIntoBmmPass
    : public dtorch::dtensor::impl::FoldTransposeIntoBmmBase<
          FoldTransposeIntoBmmPass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    // Planned functions carry arena offsets that a rewrite would invalidate.
    if (fn->hasAttr(rank::kArenaBytesAttrName))
      return;
    SmallVector<Operation *> ops;
    fn.walk([&](rank::KernelOp op) { ops.push_back(op); });
    llvm::SmallPtrSet<Operation *, 16> erased;
    SmallVector<Operation *> maybeDead;
    for (Operation *op : ops) {
      if (erased.contains(op))
        continue;
      if (isBmm(op)) {
        foldOperands(op, maybeDead);
        continue;
      }
      // A transpose of a bmm's result, its only reader: the bmm writes
      // the transposed layout itself.
      std::optional<SmallVector<int64_t>> perm = leadingPerm(op);
      if (!perm)
        continue;
      Operation *producer = op->getOperand(0).getDefiningOp();
      if (!isBmm(producer) || producer->hasAttr(kOutPerm) ||
          !producer->getResult(0).hasOneUse() ||
          producer->getBlock() != op->getBlock())
        continue;
      OpBuilder b(producer);
      auto kernel = cast<rank::KernelOp>(producer);
      auto folded = rank::KernelOp::create(
          b, producer->getLoc(), op->getResult(0).getType(),
          kernel.getKernelAttr(), kernel.getInputs());
      for (NamedAttribute a : producer->getAttrs())
        if (a.getName() != "kernel")
          folded->setAttr(a.getName(), a.getValue());
      folded->setAttr(kOutPerm, DenseI64ArrayAttr::get(&getContext(), *perm));
      op->getResult(0).replaceAllUsesWith(folded.getResult());
      erased.insert(op);
      erased.insert(producer);
      op->erase();
      producer->erase();
    }
    for (Operation *t : maybeDead)
      if (!erased.contains(t) && t->use_empty()) {
        erased.insert(t);
        t->erase();
      }
  }

  /// Each operand made by a transpose of leading dims is read from the
  /// transpose's input, with the perm on the bmm.
  void foldOperands(Operation *bmm, SmallVectorImpl<Operation *> &maybeDead) {
    for (unsigned i = 0; i < 2; ++i) {
      Operation *t = bmm->getOperand(i).getDefiningOp();
      std::optional<SmallVector<int64_t>> perm = leadingPerm(t);
      if (!perm || bmm->hasAttr(kOperandPerm[i]) ||
          t->getBlock() != bmm->getBlock())
        continue;
      bmm->setOperand(i, t->getOperand(0));
      bmm->setAttr(kOperandPerm[i],
                   DenseI64ArrayAttr::get(&getContext(), *perm));
      maybeDead.push_back(t);
    }
  }
};

} // namespace
