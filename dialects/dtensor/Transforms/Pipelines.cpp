//===- Pipelines.cpp - the dtensor-to-rank pipeline ----------------------===//
//
// The one definition of the compiler's pipeline and its stage boundaries.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void dtorch::dtensor::StageObserver::runAfterPass(Pass *pass, Operation *op) {
  if (std::optional<StringRef> stage = stageBoundaryName(pass))
    onStage(*stage, cast<ModuleOp>(op));
}

void dtorch::dtensor::buildDTensorToRankPipeline(OpPassManager &pm,
                                                 bool fuseElementwise) {
  pm.addNestedPass<func::FuncOp>(createPropagateSharding());
  pm.addNestedPass<func::FuncOp>(createCSEPass());
  pm.addPass(createStageBoundary(kStageSharded));
  pm.addNestedPass<func::FuncOp>(createLowerRedistribute());
  pm.addPass(createStageBoundary(kStageRedistributed));
  pm.addPass(createLowerToRank());
  if (fuseElementwise)
    pm.addNestedPass<func::FuncOp>(createFuseElementwise());
  pm.addPass(createStageBoundary(kStageRank));
}

void dtorch::dtensor::registerDTensorPipelines() {
  registerDTensorPasses();
  PassPipelineRegistration<>(
      "dtensor-to-rank",
      "Sharding propagation, redistribution lowering and SPMD lowering",
      [](OpPassManager &pm) { buildDTensorToRankPipeline(pm); });
}
