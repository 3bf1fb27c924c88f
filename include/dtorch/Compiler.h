//===- Compiler.h - dtensor graphs to per-rank programs -----------*- C++
//-*-===//
//
// The compiler's MLIR-free entry points, used by the client, the controller,
// dtorch-run and the tests: take a module in the dtensor dialect (as text,
// or built from a SegmentGraph), run the dtensor-to-rank pipeline and emit
// for every function one wire::Program per local-shape class of its mesh
// (evenly sharded: one for all ranks). Nothing MLIR leaks through
// this header.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_COMPILER_H
#define DTORCH_COMPILER_H

#include "dtorch/Explain.h"
#include "dtorch/Layout.h"
#include "dtorch/SegmentGraph.h"
#include "dtorch_program.pb.h"

#include <string>
#include <utility>
#include <vector>

namespace dtorch {

/// The global view of one function argument or result.
struct TensorInfo {
  std::vector<int64_t> shape;
  wire::DType dtype = wire::DTYPE_INVALID;
  std::vector<int64_t> meshShape;
  Placements placements;
};

struct CompiledFunction {
  std::string name;
  std::vector<int64_t> meshShape;
  std::vector<TensorInfo> inputs, outputs;
  /// The class programs; each names the mesh positions that run it
  /// (Program::positions), and every position is in exactly one.
  std::vector<wire::Program> programs;
  /// Index into `programs` of the program that the mesh position `position`
  /// (row-major linear index) runs; -1 when none does.
  int programAt(int64_t position) const;
};

/// Whether `coords` lies in one of the program's position boxes.
bool programRunsAt(const wire::Program &program,
                   const std::vector<int64_t> &coords);

/// Whether compiles plan buffers by default: true unless the environment
/// variable DTORCH_BUFFER_PLANNING is "0" (read at each call).
bool bufferPlanningDefault();
/// False when the environment variable DTORCH_FUSION is "0".
bool fusionEnabledByEnvironment();

/// DTORCH_GENERATED_ADAM: on unless "0"
/// (CompileOptions::generateOptimizerKernels; fused_sgd's generated kernel
/// too).
bool generatedAdamEnabledByEnvironment();
/// The CUDA architecture fused kernels are generated for on CUDA meshes:
/// DTORCH_CUDA_ARCH (e.g. "sm_80") when set, else "sm_90" (H100, H200).
std::string defaultCudaArch();
/// Whether fused groups for the GPU take in row reductions (softmax, the
/// norms, cross-entropy): true unless DTORCH_GPU_ROW_FUSION is "0" (read at
/// each call).
bool gpuRowFusionEnabled();

/// How many fused kernels this process generated (compiled to native code;
/// a kernel whose signature was compiled before is reused).
int64_t generatedKernelCompiles();

struct CompileOptions {
  /// Keep the IR after each stage ("input", "sharded", "redistributed",
  /// "rank") in CompileResult::stages (printed at the pipeline's stage
  /// boundaries; nothing is printed without it).
  bool recordStages = false;
  /// Explain every redistribution after sharding propagation (as
  /// --dtensor-explain-redistributions does) in CompileResult::explanations.
  bool explain = false;
  /// Time each phase (getting the context, parse or build, making the pass
  /// manager, every pass, emission) into CompileResult::timings, in CPU seconds
  /// of the compiling thread.
  bool profile = false;
  /// Run --rank-plan-buffers after the pipeline: every temporary of a class
  /// program gets an offset in one per-rank arena (Program.buffer_offsets);
  /// off, every buffer has its own storage.
  bool planBuffers = bufferPlanningDefault();
  /// Run --rank-mark-donations after the pipeline: each output names the
  /// input whose storage it may take when a run donates that input
  /// (Program.output_donors).
  bool markDonations = true;
  /// Group elementwise chains into rank.fused (--rank-fuse-elementwise) and
  /// compile each group to native code shipped in the program. On unless
  /// the environment sets DTORCH_FUSION=0 (read when the options are made).
  bool fuseElementwise = fusionEnabledByEnvironment();
  /// Empty: fused groups are compiled for the controller's CPU (a shared
  /// object). A CUDA architecture ("sm_90"): the programs run on a CUDA mesh
  /// and fused groups are compiled to PTX for it (Executable.gpu,
  /// lib/Compiler/GpuKernelCodegen.h); groups then hold no row reductions.
  std::string cudaArch;
  /// With fuseElementwise: each rank.fused_adam and rank.fused_sgd calls a
  /// kernel generated through MLIR for its signature instead of the
  /// runtime's hand-written one (same bits). On unless the environment sets
  /// DTORCH_GENERATED_ADAM=0. CUDA meshes always generate it.
  bool generateOptimizerKernels = generatedAdamEnabledByEnvironment();
};

struct CompileResult {
  bool ok = false;
  std::string error; // diagnostics, when !ok
  std::vector<CompiledFunction> functions;
  std::vector<std::pair<std::string, std::string>> stages;
  std::vector<RedistributionExplanation> explanations; // in program order
  /// With CompileOptions::profile: seconds per phase, in order.
  std::vector<std::pair<std::string, double>> timings;
};

/// `source` is dtensor-dialect text or bytecode; `sourceName` names it in
/// diagnostics.
CompileResult compileModule(const std::string &source,
                            const std::string &sourceName,
                            const CompileOptions &options = {});

/// The same for a module built directly from `graph` (no text printed or
/// parsed): what the controller compiles on a cache miss. An invalid
/// description gives diagnostics in CompileResult::error, never a crash.
CompileResult compileGraph(const SegmentGraph &graph,
                           const CompileOptions &options = {});

/// What of the compiler's configuration comes from the environment (the
/// collective schedule: DTORCH_SCHEDULE_COLLECTIVES, DTORCH_BUCKET_CAP_MB,
/// DTORCH_PREFETCH_MB; and DTORCH_FOLD_TRANSPOSE), as text: part of the
/// on-disk program cache's key.
std::string compilerConfiguration();

} // namespace dtorch

#endif // DTORCH_COMPILER_H
