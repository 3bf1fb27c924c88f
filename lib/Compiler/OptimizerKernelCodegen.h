//===- OptimizerKernelCodegen.h - rank.fused_adam to native code -*- C++
//-*-===//
//
// The multi-tensor Adam/AdamW update (rank.fused_adam) generated through
// MLIR, for the host and for NVIDIA GPUs: every parameter's group (param,
// grad, exp_avg, exp_avg_sq and, with amsgrad, max_exp_avg_sq) is one
// linalg.generic over its elements (host) or one branch of a loop over all
// elements mapped to GPU threads, lowered as the fused elementwise kernels
// are (KernelCodegen.cpp, GpuKernelCodegen.cpp). One kernel per signature:
// the number of parameters, each one's dtype and element count, and the
// mode (decay none / L2 / decoupled, amsgrad, maximize). lr and step are
// read from the op's 0-d inputs and beta1, beta2, eps and weight_decay from
// the call's `scalars`, so the kernel computes the step-dependent bias
// corrections itself and a schedule never recompiles it.
//
// Numerics are the runtime's hand-written kernel's (runtime/lib/
// OptimizerKernels.cpp), operation for operation and bit for bit: the 0-d
// terms in float64 (libm's pow and an IEEE sqrt) rounded once to the
// compute type, then per element the same operations in the same order
// without contraction; float16 and bfloat16 are computed in float32 and
// rounded once at the end (bfloat16 by integer code, as the runtime
// rounds). On the GPU, pow is libdevice's, which may differ from glibc's in
// the last bit of a float64 term (then a float32 term can differ by one
// ulp).
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_LIB_COMPILER_OPTIMIZERKERNELCODEGEN_H
#define DTORCH_LIB_COMPILER_OPTIMIZERKERNELCODEGEN_H

#include "KernelCodegen.h"

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace dtorch {

/// The signature a generated fused_adam kernel is cached by: parameter
/// count, dtypes and element counts, and the mode.
std::string fusedAdamKernelSignature(rank::FusedAdamOp op);

/// The `scalars` a call of the generated kernel passes: beta1, beta2, eps,
/// weight_decay.
std::vector<double> fusedAdamKernelScalars(rank::FusedAdamOp op);

/// The host kernel of `op` (a shared object exporting the entry and the
/// `_rows` entry, whose range counts the elements of every parameter one
/// after the other): from the process-wide cache, else compiled now.
mlir::FailureOr<std::shared_ptr<const GeneratedKernel>>
generateFusedAdamKernel(rank::FusedAdamOp op);

/// The GPU kernel of `op` for `arch` (PTX; one thread per element of all
/// parameters one after the other): from the cache, else compiled now.
mlir::FailureOr<std::shared_ptr<const GeneratedKernel>>
generateFusedAdamGpuKernel(rank::FusedAdamOp op, llvm::StringRef arch);

/// How many fused_adam kernels this process has compiled, host and GPU.
int64_t generatedAdamKernelCompiles();

} // namespace dtorch

#endif // DTORCH_LIB_COMPILER_OPTIMIZERKERNELCODEGEN_H
