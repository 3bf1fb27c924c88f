//===- GpuKernelCodegen.h - rank.fused bodies to PTX -----------*- C++ -*-===//
//
// The controller's kernel generator for CUDA meshes: the body of a
// rank.fused (elementwise rank.kernel ops of one shape) becomes the same
// linalg.generic as for the host (KernelCodegen.cpp, so the math is the
// same), which MLIR turns into parallel loops, collapses to one loop, tiles
// by the block size and maps to blocks and threads (gpu.launch), outlines
// into a gpu.module and lowers to the NVVM and LLVM dialects; LLVM's NVPTX
// backend emits PTX for the chosen architecture after linking the CUDA
// toolkit's libdevice for the functions it calls (float64 exp, sin, pow...).
// Workers load the PTX through the CUDA driver (runtime/cuda,
// CudaGeneratedKernels.cpp). Compiled once per signature and architecture
// per process.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_LIB_COMPILER_GPUKERNELCODEGEN_H
#define DTORCH_LIB_COMPILER_GPUKERNELCODEGEN_H

#include "KernelCodegen.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace dtorch {

/// Threads per block of the generated GPU kernels.
constexpr int kGpuKernelBlockSize = 256;

/// The CUDA toolkit's libdevice bitcode: DTORCH_CUDA_LIBDEVICE when set,
/// else nvvm/libdevice/libdevice.10.bc under CUDA_HOME, CUDA_PATH or
/// /usr/local/cuda. Empty when none exists.
std::string cudaLibdevicePath();

/// The GPU kernel of `op`'s body for `arch` (an Executable whose `gpu`
/// holds the PTX, its entry, launch shape and parameter order; `object` is
/// empty): from the process-wide cache when a body with the same signature
/// was compiled for `arch` before, else compiled now. A body ending in row
/// reductions becomes one thread per row (grid_x blocks of
/// kGpuKernelBlockSize threads cover the rows). Emits an error on `op` and
/// fails for a body the generator does not know or when the toolchain
/// fails.
mlir::FailureOr<std::shared_ptr<const GeneratedKernel>>
generateFusedGpuKernel(rank::FusedOp op, llvm::StringRef arch);

/// The stages of the GPU lowering, for inspection (tools/dtorch-gpu-kernel,
/// the lit tests).
enum class GpuKernelStage {
  Gpu,    // after outlining: gpu.launch_func and the gpu.module
  Nvvm,   // the gpu.module in the LLVM and NVVM dialects
  LlvmIr, // LLVM IR after libdevice linking and -O3
  Ptx,    // the PTX text
};

/// The text of `op`'s kernel at `stage` (compiled afresh, not cached).
mlir::FailureOr<std::string> fusedGpuKernelStage(rank::FusedOp op,
                                                 llvm::StringRef arch,
                                                 GpuKernelStage stage);

/// What the GPU lowering produced: the PTX and how to launch it.
struct GpuKernelBuild {
  std::string ptx;
  std::string entry;
  int64_t gridX = 0;
  int32_t blockX = 0;
  std::vector<int32_t> params;
  int64_t elements = 0;
};

/// The MLIR context the GPU kernels are built in (one per thread).
mlir::MLIRContext &gpuKernelContext();

/// The GPU road from a module holding one `func.func @<symbol>` (buffers as
/// static memrefs, then float64 scalars by value) whose work is one
/// scf.parallel (or linalg.generic) of `elements` iterations: collapsed,
/// tiled by kGpuKernelBlockSize, mapped to blocks and threads, outlined,
/// lowered to NVVM and LLVM IR, libdevice linked, -O3, PTX. Stops at
/// `stopAt` (its text into `stageText`); errors are emitted on `op`.
mlir::LogicalResult
lowerParallelModuleToPtx(mlir::Operation *op, mlir::ModuleOp module,
                         llvm::StringRef arch, llvm::StringRef symbol,
                         int64_t elements, GpuKernelStage stopAt,
                         std::string &stageText, GpuKernelBuild &build);

/// How many GPU kernels this process has compiled (cache misses).
int64_t generatedGpuKernelCompiles();

} // namespace dtorch

#endif // DTORCH_LIB_COMPILER_GPUKERNELCODEGEN_H
