//===- Passes.h - dtensor passes and the pipeline -----------------*- C++
//-*-===//
#ifndef DTORCH_DIALECTS_DTENSOR_TRANSFORMS_PASSES_H
#define DTORCH_DIALECTS_DTENSOR_TRANSFORMS_PASSES_H

#include "dtensor/IR/DTensor.h"
#include "rank/IR/Rank.h"

#include "dtorch/Explain.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dtorch::dtensor {

#define GEN_PASS_DECL
#include "dtensor/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dtensor/Transforms/Passes.h.inc"

/// Why --dtensor-propagate-sharding inserted a redistribute, kept as the
/// metadata of its location (a FusedLoc around the location of the op that
/// needed it) for --dtensor-explain-redistributions: an operand of that op
/// needs another layout, or that op computes another layout than the one
/// its result was declared with.
inline constexpr llvm::StringLiteral kNeededByOperandReason =
    "dtensor.needed_by_operand";
inline constexpr llvm::StringLiteral kDeclaredResultReason =
    "dtensor.declared_result";

/// One `dtensor.redistribute` of a function after sharding propagation,
/// explained; `anchor` is the op the explanation is about (the op that needs
/// it, the op whose result it produces, or the redistribute itself).
struct ExplainedRedistribute {
  mlir::Operation *anchor;
  RedistributionExplanation info;
};
std::vector<ExplainedRedistribute>
explainRedistributions(mlir::func::FuncOp fn);

/// Adds the whole compiler pipeline (propagation, redistribution lowering,
/// SPMD lowering) to `pm`.
void buildDTensorToRankPipeline(mlir::OpPassManager &pm);

/// Registers the passes and the `dtensor-to-rank` pipeline.
void registerDTensorPipelines();

} // namespace dtorch::dtensor

#endif // DTORCH_DIALECTS_DTENSOR_TRANSFORMS_PASSES_H
