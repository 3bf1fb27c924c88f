//===- CheckedCSE.cpp - --dtensor-cse -------------------------------------===//
//
// MLIR's CSE, run only on functions where it could change something
// (Passes.td). A cold segment is mostly a chain of distinct ops: one hash per
// op tells that nothing merges, without CSE's scoped hash tables, dominance
// queries and memory-effect checks.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "mlir/IR/Dominance.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/CSE.h"

#include "llvm/ADT/DenseSet.h"

namespace dtorch::dtensor {
#define GEN_PASS_DEF_CHECKEDCSE
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;

namespace {

/// Whether MLIR's CSE could change `fn`: some op is trivially dead, or two
/// ops hash alike under the equivalence CSE uses (so they may be equal; a
/// hash collision only costs running CSE). Bodies with more than one block
/// or with nested regions are always handed to CSE.
bool cseCouldChange(func::FuncOp fn) {
  Region &body = fn.getBody();
  if (!body.hasOneBlock())
    return !body.empty();
  llvm::DenseSet<llvm::hash_code> seen;
  seen.reserve(body.front().getOperations().size());
  for (Operation &op : body.front()) {
    if (op.getNumRegions() != 0)
      return true;
    if (op.hasTrait<OpTrait::IsTerminator>())
      continue;
    if (isOpTriviallyDead(&op))
      return true;
    // What CSE's table hashes (SimpleOperationInfo::getHashValue).
    llvm::hash_code hash = OperationEquivalence::computeHash(
        &op, OperationEquivalence::directHashValue,
        OperationEquivalence::ignoreHashValue,
        OperationEquivalence::IgnoreLocations);
    if (!seen.insert(hash).second)
      return true;
  }
  return false;
}

struct CheckedCSEPass
    : public dtorch::dtensor::impl::CheckedCSEBase<CheckedCSEPass> {
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!cseCouldChange(fn)) {
      ++numSkipped;
      markAllAnalysesPreserved();
      return;
    }
    ++numRun;
    IRRewriter rewriter(&getContext());
    DominanceInfo &dominance = getAnalysis<DominanceInfo>();
    bool changed = false;
    eliminateCommonSubExpressions(rewriter, dominance, fn, &changed);
    if (!changed)
      markAllAnalysesPreserved();
    else
      markAnalysesPreserved<DominanceInfo>();
  }
};

} // namespace
