//===- Pipelines.cpp - the dtensor-to-rank pipeline ----------------------===//
#include "dtensor/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void dtorch::dtensor::buildDTensorToRankPipeline(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(createPropagateSharding());
  pm.addNestedPass<func::FuncOp>(createCSEPass());
  pm.addNestedPass<func::FuncOp>(createLowerRedistribute());
  pm.addPass(createLowerToRank());
}

void dtorch::dtensor::registerDTensorPipelines() {
  registerDTensorPasses();
  PassPipelineRegistration<>(
      "dtensor-to-rank",
      "Sharding propagation, redistribution lowering and SPMD lowering",
      buildDTensorToRankPipeline);
}
