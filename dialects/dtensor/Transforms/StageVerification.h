//===- StageVerification.h - which stage boundaries verify -------*- C++
//-*-===//
//
// The compiler's pipeline verifies the module at its stage boundaries. The
// passes between two boundaries of a release build cannot make IR that the
// next boundary would reject without a bug, so a release compile verifies
// the built module and the final ("rank") stage only, and a debug build,
// DTORCH_VERIFY_STAGES=1 or a caller asking for it verifies every stage
// (dtorch-opt's registered `dtensor-to-rank` pipeline always does).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringRef.h"

#include <memory>

namespace dtorch::dtensor {

struct DTensorToRankPipelineOptions {
  /// --rank-fuse-elementwise before the "rank" boundary.
  bool fuseElementwise = false;
  /// Fused groups take in row reductions (--rank-fuse-elementwise
  /// row-reductions); off for GPU kernels only with DTORCH_GPU_ROW_FUSION=0.
  bool fuseRowReductions = true;
  /// --rank-fold-transpose-into-bmm after the GEMM transpose folding
  /// (unless DTORCH_FOLD_BMM_LAYOUT=0); off for CUDA programs, whose bmm
  /// takes no perms.
  bool foldBmmLayout = true;
  /// Every stage boundary verifies the module; else only the last ("rank")
  /// one does (the others still end their stage for a StageObserver).
  bool verifyEachStage = true;
};

/// buildDTensorToRankPipeline with its options spelled out.
void buildDTensorToRankPipeline(mlir::OpPassManager &pm,
                                const DTensorToRankPipelineOptions &options);

/// A stage boundary that verifies the module when `verify` is set and only
/// marks the stage otherwise.
std::unique_ptr<mlir::Pass> createStageBoundary(llvm::StringRef stage,
                                                bool verify);

/// Whether a boundary pass verifies (false for any other pass).
bool stageBoundaryVerifies(const mlir::Pass *pass);

/// Whether the compiler verifies every stage: in a build with assertions
/// (no NDEBUG), or when DTORCH_VERIFY_STAGES=1 (read at every call, so a
/// test may change it); DTORCH_VERIFY_STAGES=0 turns it off in any build.
bool verifyEachStageByDefault();

} // namespace dtorch::dtensor
