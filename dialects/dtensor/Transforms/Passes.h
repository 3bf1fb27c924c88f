//===- Passes.h - dtensor passes and the pipeline -----------------*- C++
//-*-===//
#ifndef DTORCH_DIALECTS_DTENSOR_TRANSFORMS_PASSES_H
#define DTORCH_DIALECTS_DTENSOR_TRANSFORMS_PASSES_H

#include "dtensor/IR/DTensor.h"
#include "rank/IR/Rank.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace dtorch::dtensor {

#define GEN_PASS_DECL
#include "dtensor/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dtensor/Transforms/Passes.h.inc"

/// Adds the whole compiler pipeline (propagation, redistribution lowering,
/// SPMD lowering) to `pm`.
void buildDTensorToRankPipeline(mlir::OpPassManager &pm);

/// Registers the passes and the `dtensor-to-rank` pipeline.
void registerDTensorPipelines();

} // namespace dtorch::dtensor

#endif // DTORCH_DIALECTS_DTENSOR_TRANSFORMS_PASSES_H
