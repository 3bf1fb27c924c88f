//===- Pipelines.cpp - the dtensor-to-rank pipeline ----------------------===//
//
// The one definition of the compiler's pipeline and its stage boundaries.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"
#include "dtensor/Transforms/StageVerification.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

#include <cstdlib>
#include <string>

using namespace mlir;

void dtorch::dtensor::StageObserver::runAfterPass(Pass *pass, Operation *op) {
  if (std::optional<StringRef> stage = stageBoundaryName(pass))
    onStage(*stage, cast<ModuleOp>(op));
}

void dtorch::dtensor::buildDTensorToRankPipeline(OpPassManager &pm,
                                                 bool fuseElementwise) {
  DTensorToRankPipelineOptions options;
  options.fuseElementwise = fuseElementwise;
  buildDTensorToRankPipeline(pm, options);
}

void dtorch::dtensor::buildDTensorToRankPipeline(
    OpPassManager &pm, const DTensorToRankPipelineOptions &options) {
  bool verifyEach = options.verifyEachStage;
  pm.addNestedPass<func::FuncOp>(createPropagateSharding());
  pm.addNestedPass<func::FuncOp>(createCheckedCSE());
  pm.addPass(createStageBoundary(kStageSharded, verifyEach));
  pm.addNestedPass<func::FuncOp>(createLowerRedistribute());
  pm.addPass(createStageBoundary(kStageRedistributed, verifyEach));
  pm.addPass(createLowerToRank());
  if (foldTransposeFromEnvironment())
    pm.addNestedPass<func::FuncOp>(createFoldTransposeIntoMatmul());
  if (options.foldBmmLayout && foldBmmLayoutFromEnvironment())
    pm.addNestedPass<func::FuncOp>(createFoldTransposeIntoBmm());
  if (options.fuseElementwise) {
    FuseElementwiseOptions fuse;
    fuse.rowReductions = options.fuseRowReductions;
    fuse.mixedTypes = fuseMixedTypesFromEnvironment();
    if (rematerializeFromEnvironment())
      pm.addNestedPass<func::FuncOp>(createRematerializeBroadcasts());
    pm.addNestedPass<func::FuncOp>(createFuseElementwise(fuse));
  }
  if (std::optional<ScheduleCollectivesOptions> schedule =
          collectiveScheduleFromEnvironment())
    pm.addPass(createScheduleCollectives(*schedule));
  pm.addPass(createMatchPointToPoint());
  // The emitter reads this module: its stage is always verified.
  pm.addPass(createStageBoundary(kStageRank, /*verify=*/true));
}

namespace {

/// A non-negative number of MiB from the environment; none when unset or
/// not such a number.
std::optional<double> mebibytesFromEnvironment(const char *name) {
  const char *text = std::getenv(name);
  if (!text || !*text)
    return std::nullopt;
  char *end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || *end || !(value >= 0))
    return std::nullopt; // not a number: the default
  return value;
}

} // namespace

bool dtorch::dtensor::foldTransposeFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_FOLD_TRANSPOSE");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

bool dtorch::dtensor::fuseMixedTypesFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_FUSE_MIXED_TYPES");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

bool dtorch::dtensor::foldBmmLayoutFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_FOLD_BMM_LAYOUT");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

bool dtorch::dtensor::planViewsFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_PLAN_VIEWS");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

bool dtorch::dtensor::rematerializeFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_REMATERIALIZE");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

const std::optional<dtorch::dtensor::ScheduleCollectivesOptions> &
dtorch::dtensor::collectiveScheduleFromEnvironment() {
  static const std::optional<ScheduleCollectivesOptions> options =
      []() -> std::optional<ScheduleCollectivesOptions> {
    const char *enabled = std::getenv("DTORCH_SCHEDULE_COLLECTIVES");
    if (enabled && std::string(enabled) == "0")
      return std::nullopt;
    ScheduleCollectivesOptions o;
    if (std::optional<double> cap =
            mebibytesFromEnvironment("DTORCH_BUCKET_CAP_MB"))
      o.bucketCapBytes = static_cast<int64_t>(*cap * (1 << 20));
    if (std::optional<double> prefetch =
            mebibytesFromEnvironment("DTORCH_PREFETCH_MB"))
      o.prefetchBytes = static_cast<int64_t>(*prefetch * (1 << 20));
    return o;
  }();
  return options;
}

std::string dtorch::dtensor::collectiveScheduleDescription() {
  const std::optional<ScheduleCollectivesOptions> &o =
      collectiveScheduleFromEnvironment();
  if (!o)
    return "off";
  return "cap=" + std::to_string(o->bucketCapBytes) +
         ",floor=" + std::to_string(o->bucketFloorBytes) +
         ",min=" + std::to_string(o->minBuckets) +
         ",prefetch=" + std::to_string(o->prefetchBytes);
}

void dtorch::dtensor::registerDTensorPipelines() {
  registerDTensorPasses();
  PassPipelineRegistration<>(
      "dtensor-to-rank",
      "Sharding propagation, redistribution lowering and SPMD lowering",
      [](OpPassManager &pm) { buildDTensorToRankPipeline(pm); });
}
