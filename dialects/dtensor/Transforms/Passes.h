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
#include "mlir/Pass/PassInstrumentation.h"

#include <functional>
#include <optional>

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

/// The stages of the dtensor-to-rank pipeline, in order: after sharding
/// propagation ("sharded"), after redistribution lowering ("redistributed")
/// and after SPMD lowering ("rank"). `dtorch.last_ir` and dtorch-run's
/// --print-ir name them, with "input" for the IR before the pipeline.
inline constexpr llvm::StringLiteral kStageSharded = "sharded";
inline constexpr llvm::StringLiteral kStageRedistributed = "redistributed";
inline constexpr llvm::StringLiteral kStageRank = "rank";

/// Adds the whole compiler pipeline (propagation, redistribution lowering,
/// SPMD lowering, then --rank-fold-transpose-into-matmul unless
/// DTORCH_FOLD_TRANSPOSE=0) to `pm`: the one
/// definition the compiler, the `dtensor-to-rank` pipeline of dtorch-opt and
/// `dtorch.last_ir` share. A stage boundary pass (createStageBoundary) ends
/// each stage: it verifies the module, so the IR is verified between phases
/// even when the pass manager's own verifier (after every pass) is off, and a
/// StageObserver sees the module there.
/// With `fuseElementwise`, --rank-fuse-elementwise runs on the class
/// functions before the "rank" stage boundary (the compiler's default; the
/// registered `dtensor-to-rank` pipeline leaves it out).
void buildDTensorToRankPipeline(mlir::OpPassManager &pm,
                                bool fuseElementwise = false);

/// A module pass that ends the stage `stage` of the pipeline: it verifies
/// the module (failing the pipeline on invalid IR) and changes nothing.
/// Registered as `dtensor-stage-boundary{stage=NAME}`.
std::unique_ptr<mlir::Pass> createStageBoundary(llvm::StringRef stage);

/// The stage a pass ends, when it is a stage boundary.
std::optional<llvm::StringRef> stageBoundaryName(const mlir::Pass *pass);

/// Calls `onStage(stage, module)` after each stage boundary of a pipeline
/// built by buildDTensorToRankPipeline, with the verified module: how the
/// compiler records the IR of each stage for `dtorch.last_ir` and explains
/// the redistributions after "sharded". Costs nothing at other passes.
class StageObserver : public mlir::PassInstrumentation {
public:
  using Callback =
      std::function<void(llvm::StringRef stage, mlir::ModuleOp module)>;
  explicit StageObserver(Callback onStage) : onStage(std::move(onStage)) {}
  void runAfterPass(mlir::Pass *pass, mlir::Operation *op) override;

private:
  Callback onStage;
};

/// The options of --rank-schedule-collectives in the pipeline, from the
/// environment (read once per process): none when
/// DTORCH_SCHEDULE_COLLECTIVES=0 (the pass is left out), else the defaults
/// with DTORCH_BUCKET_CAP_MB (MiB per all_reduce bucket, 0: no bucketing)
/// and DTORCH_PREFETCH_MB (MiB of gathers issued ahead) when set.
const std::optional<ScheduleCollectivesOptions> &
collectiveScheduleFromEnvironment();
/// Those options as text (part of the on-disk program cache's key).
std::string collectiveScheduleDescription();

/// Whether the pipeline runs --rank-fold-transpose-into-matmul: yes unless
/// DTORCH_FOLD_TRANSPOSE=0 (read once per process; for comparison).
bool foldTransposeFromEnvironment();

/// Whether fused groups may mix element types (comparisons, `where`,
/// casts, `iota`; --rank-fuse-elementwise's `mixed-types`): yes unless
/// DTORCH_FUSE_MIXED_TYPES=0 (read once per process; for comparison).
bool fuseMixedTypesFromEnvironment();

/// Whether the pipeline runs --rank-fold-transpose-into-bmm (CPU programs):
/// yes unless DTORCH_FOLD_BMM_LAYOUT=0 (read once per process; for
/// comparison).
bool foldBmmLayoutFromEnvironment();

/// Whether the pipeline runs --rank-rematerialize-broadcasts before fusion:
/// yes unless DTORCH_REMATERIALIZE=0 (read once per process; for
/// comparison).
bool rematerializeFromEnvironment();

/// Whether --rank-plan-buffers places a reshape of a temporary at its
/// source's offset (its `views` option): yes unless DTORCH_PLAN_VIEWS=0
/// (read once per process; for comparison).
bool planViewsFromEnvironment();

/// Registers the passes and the `dtensor-to-rank` pipeline.
void registerDTensorPipelines();

} // namespace dtorch::dtensor

#endif // DTORCH_DIALECTS_DTENSOR_TRANSFORMS_PASSES_H
