//===- Pipelines.cpp - the dtensor-to-rank pipeline ----------------------===//
//
// The one definition of the compiler's pipeline and its stage boundaries.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace {

/// Ends a stage: verifies the module and changes nothing.
struct StageBoundaryPass
    : public PassWrapper<StageBoundaryPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(StageBoundaryPass)

  StageBoundaryPass() = default;
  StageBoundaryPass(const StageBoundaryPass &other) : PassWrapper(other) {}
  explicit StageBoundaryPass(StringRef name) { stage = name.str(); }

  StringRef getArgument() const override { return "dtensor-stage-boundary"; }
  StringRef getName() const override { return "DTensorStageBoundary"; }
  StringRef getDescription() const override {
    return "End a stage of the dtensor-to-rank pipeline: verify the module";
  }
  void runOnOperation() override {
    if (failed(verify(getOperation())))
      return signalPassFailure();
    markAllAnalysesPreserved();
  }

  Option<std::string> stage{*this, "stage",
                            llvm::cl::desc("the stage this pass ends")};
};

} // namespace

std::unique_ptr<Pass> dtorch::dtensor::createStageBoundary(StringRef stage) {
  return std::make_unique<StageBoundaryPass>(stage);
}

std::optional<StringRef> dtorch::dtensor::stageBoundaryName(const Pass *pass) {
  if (pass->getTypeID() != TypeID::get<StageBoundaryPass>())
    return std::nullopt;
  return StringRef(static_cast<const StageBoundaryPass *>(pass)->stage);
}

void dtorch::dtensor::StageObserver::runAfterPass(Pass *pass, Operation *op) {
  if (std::optional<StringRef> stage = stageBoundaryName(pass))
    onStage(*stage, cast<ModuleOp>(op));
}

void dtorch::dtensor::buildDTensorToRankPipeline(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(createPropagateSharding());
  pm.addNestedPass<func::FuncOp>(createCSEPass());
  pm.addPass(createStageBoundary(kStageSharded));
  pm.addNestedPass<func::FuncOp>(createLowerRedistribute());
  pm.addPass(createStageBoundary(kStageRedistributed));
  pm.addPass(createLowerToRank());
  pm.addPass(createStageBoundary(kStageRank));
}

void dtorch::dtensor::registerDTensorPipelines() {
  registerDTensorPasses();
  PassRegistration<StageBoundaryPass>();
  PassPipelineRegistration<>(
      "dtensor-to-rank",
      "Sharding propagation, redistribution lowering and SPMD lowering",
      buildDTensorToRankPipeline);
}
