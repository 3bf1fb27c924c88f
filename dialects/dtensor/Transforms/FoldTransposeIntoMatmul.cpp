//===- FoldTransposeIntoMatmul.cpp - --rank-fold-transpose-into-matmul ---===//
//
// Turns the transposes of the last two dims that feed a GEMM, or that a GEMM
// feeds, into the GEMM's `trans_a` / `trans_b` flags, which the runtime hands
// its BLAS (Passes.td). Runs on the local ops of a class function, after
// SPMD lowering: every sharding decision is made by then, so the rewrite is
// a local identity on each rank's pieces.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallVector.h"

#include <numeric>

namespace dtorch::dtensor {
#define GEN_PASS_DEF_FOLDTRANSPOSEINTOMATMUL
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;
namespace rank = dtorch::rank;

namespace {

constexpr llvm::StringLiteral kTransA = "trans_a";
constexpr llvm::StringLiteral kTransB = "trans_b";

/// `perm` of a `transpose` kernel, or none for any other op.
std::optional<ArrayRef<int64_t>> transposePerm(Operation *op) {
  auto kernel = dyn_cast_or_null<rank::KernelOp>(op);
  if (!kernel || kernel.getKernel() != "transpose" ||
      kernel.getInputs().size() != 1)
    return std::nullopt;
  auto perm = kernel->getAttrOfType<DenseI64ArrayAttr>("perm");
  if (!perm)
    return std::nullopt;
  return perm.asArrayRef();
}

/// Whether `op` is a transpose that swaps the last two dims and keeps the
/// others in place.
bool swapsLastTwo(Operation *op) {
  std::optional<ArrayRef<int64_t>> perm = transposePerm(op);
  if (!perm)
    return false;
  int64_t r = perm->size();
  if (r < 2)
    return false;
  for (int64_t d = 0; d + 2 < r; ++d)
    if ((*perm)[d] != d)
      return false;
  return (*perm)[r - 2] == r - 1 && (*perm)[r - 1] == r - 2;
}

/// A `matmul` (2-D) or `bmm` (batched) kernel, whose operands a transpose of
/// the last two dims may be folded into.
bool isGemm(Operation *op) {
  auto kernel = dyn_cast_or_null<rank::KernelOp>(op);
  return kernel && kernel.getInputs().size() == 2 &&
         (kernel.getKernel() == "matmul" || kernel.getKernel() == "bmm");
}

bool flag(Operation *op, StringRef name) {
  auto attr = op->getAttrOfType<IntegerAttr>(name);
  return attr && attr.getInt() != 0;
}

/// Sets a flag; a cleared flag is left out (the kernel's default).
void setFlag(Operation *op, StringRef name, bool value) {
  if (value)
    op->setAttr(name,
                IntegerAttr::get(IntegerType::get(op->getContext(), 64), 1));
  else
    op->removeAttr(name);
}

struct FoldTransposeIntoMatmulPass
    : public dtorch::dtensor::impl::FoldTransposeIntoMatmulBase<
          FoldTransposeIntoMatmulPass> {
  using FoldTransposeIntoMatmulBase::FoldTransposeIntoMatmulBase;

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    // Planned functions carry arena offsets that a rewrite would invalidate.
    if (fn->hasAttr(rank::kArenaBytesAttrName))
      return;
    SmallVector<Operation *> ops;
    fn.walk([&](rank::KernelOp op) { ops.push_back(op); });
    SmallVector<Operation *> maybeDead;
    llvm::SmallPtrSet<Operation *, 16> erased;
    // Program order: a GEMM's operands are folded before any transpose of
    // its result is, and a transpose's input is final when it is reached.
    for (Operation *op : ops) {
      if (erased.contains(op))
        continue;
      if (isGemm(op)) {
        foldOperands(op, maybeDead);
        continue;
      }
      if (!transposePerm(op))
        continue;
      Operation *input = op->getOperand(0).getDefiningOp();
      if (swapsLastTwo(op) && isGemm(input) &&
          input->getResult(0).hasOneUse() &&
          input->getBlock() == op->getBlock()) {
        swapGemm(input, op);
        erased.insert(op);
        erased.insert(input);
        continue;
      }
      if (transposePerm(input))
        composeTransposes(input, op, maybeDead, erased);
    }
    // Transposes whose every reader now reads their input instead.
    for (Operation *t : maybeDead)
      if (!erased.contains(t) && t->use_empty()) {
        erased.insert(t);
        t->erase();
      }
  }

  /// Replaces every operand of `gemm` that a transpose of the last two dims
  /// makes by that transpose's input, toggling the operand's flag (a
  /// transpose of a transpose folds twice and leaves the flag as it was).
  void foldOperands(Operation *gemm, SmallVectorImpl<Operation *> &maybeDead) {
    for (unsigned i = 0; i < 2; ++i) {
      StringRef name = i == 0 ? kTransA : kTransB;
      bool transposed = flag(gemm, name);
      bool changed = false;
      while (Operation *t = gemm->getOperand(i).getDefiningOp()) {
        if (!swapsLastTwo(t) || t->getBlock() != gemm->getBlock())
          break;
        gemm->setOperand(i, t->getOperand(0));
        transposed = !transposed;
        changed = true;
        maybeDead.push_back(t);
      }
      if (changed)
        setFlag(gemm, name, transposed);
    }
  }

  /// transpose(op(a) * op(b)) = op(b)^T * op(a)^T: one GEMM of the operands
  /// swapped with their flags flipped, where the old GEMM was (its operands'
  /// live ranges stay as they were).
  void swapGemm(Operation *gemm, Operation *transpose) {
    OpBuilder b(gemm);
    auto kernel = cast<rank::KernelOp>(gemm);
    auto swapped = rank::KernelOp::create(
        b, gemm->getLoc(), transpose->getResult(0).getType(),
        kernel.getKernelAttr(),
        ValueRange{gemm->getOperand(1), gemm->getOperand(0)});
    for (NamedAttribute a : gemm->getAttrs())
      if (a.getName() != "kernel" && a.getName() != kTransA &&
          a.getName() != kTransB)
        swapped->setAttr(a.getName(), a.getValue());
    setFlag(swapped, kTransA, !flag(gemm, kTransB));
    setFlag(swapped, kTransB, !flag(gemm, kTransA));
    transpose->getResult(0).replaceAllUsesWith(swapped.getResult());
    transpose->erase();
    gemm->erase();
  }

  /// transpose(transpose(x, p1), p2) reads x directly: dim i of the result
  /// is dim p1[p2[i]] of x; x itself when that is the identity.
  void composeTransposes(Operation *inner, Operation *outer,
                         SmallVectorImpl<Operation *> &maybeDead,
                         llvm::SmallPtrSet<Operation *, 16> &erased) {
    ArrayRef<int64_t> p1 = *transposePerm(inner), p2 = *transposePerm(outer);
    if (p1.size() != p2.size() || inner->getBlock() != outer->getBlock())
      return;
    SmallVector<int64_t> composed;
    for (int64_t d : p2) {
      if (d < 0 || d >= (int64_t)p1.size())
        return;
      composed.push_back(p1[d]);
    }
    Value source = inner->getOperand(0);
    SmallVector<int64_t> identity(composed.size());
    std::iota(identity.begin(), identity.end(), 0);
    if (composed == identity &&
        source.getType() == outer->getResult(0).getType()) {
      maybeDead.push_back(inner);
      outer->getResult(0).replaceAllUsesWith(source);
      erased.insert(outer);
      outer->erase();
      return;
    }
    // A swap of the last two dims that a GEMM reads folds into the GEMM
    // instead (no kernel at all for it there).
    if (swapsLastTwo(outer) && llvm::any_of(outer->getUsers(), isGemm))
      return;
    maybeDead.push_back(inner);
    outer->setOperand(0, source);
    outer->setAttr("perm",
                   DenseI64ArrayAttr::get(outer->getContext(), composed));
  }
};

} // namespace
