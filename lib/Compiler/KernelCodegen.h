//===- KernelCodegen.h - rank.fused bodies to native code ------*- C++ -*-===//
//
// The controller's kernel generator: the body of a rank.fused (elementwise
// rank.kernel ops of one shape) becomes one linalg.generic on memrefs, which
// MLIR lowers to loops and the LLVM dialect; LLVM optimizes it at -O3 for
// the host's CPU features (vectorizing the loops), emits an object file,
// and ld.lld links it into a shared object that workers load (runtime
// Executable.h). Compiled once per signature (the body's ops, attributes,
// dtypes and shapes) per process. A body holding reductions over the
// innermost dims (softmax, layer_norm) is generated row by row instead
// (RowKernelCodegen.cpp), summing each row in the order of the runtime's
// reduction kernels, so fused and unfused results are bitwise equal.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_LIB_COMPILER_KERNELCODEGEN_H
#define DTORCH_LIB_COMPILER_KERNELCODEGEN_H

#include "dtorch/Compiler.h"
#include "rank/IR/Rank.h"

#include "dtorch_program.pb.h"

#include "mlir/Support/LLVM.h"

#include <memory>
#include <string>
#include <vector>

namespace dtorch {

/// A generated kernel, ready to be put into a program as-is.
using GeneratedKernel = wire::Executable;

/// The kernel of `op`'s body: from the process-wide cache when a body with
/// the same signature was compiled before, else compiled now. Emits an
/// error on `op` and fails when the body holds a kernel the generator does
/// not know or the toolchain fails.
mlir::FailureOr<std::shared_ptr<const GeneratedKernel>>
generateFusedKernel(rank::FusedOp op);

/// The constants of `op`'s group (its `full` values, in body order): the
/// `scalars` the calling instruction passes to the kernel.
std::vector<double> fusedKernelScalars(rank::FusedOp op);

/// Whether row kernels (groups ending in row reductions) declare their
/// buffers `noalias`, which lets LLVM drop its run-time overlap checks;
/// DTORCH_ROW_KERNEL_NOALIAS=0 turns it off (for comparison; read once per
/// process, part of compilerConfiguration()). The same bits either way.
bool rowKernelNoAliasFromEnvironment();

/// Whether a row kernel's element loops (those without a carried value:
/// the sweeps' fills and stores) are kept whole for LLVM's loop vectorizer
/// (`llvm.loop.unroll.disable`) rather than fully unrolled first, which
/// leaves short ones (rows of 32) as scalar code; DTORCH_ROW_VECTOR_LOOPS=0
/// turns it off (for comparison; read once per process, part of
/// compilerConfiguration()). The same operations per element either way.
bool rowVectorLoopsFromEnvironment();

/// Whether generated host kernels prefer 512-bit vectors on hosts with
/// AVX-512 (`prefer-vector-width`=512; LLVM's default for these CPUs is
/// 256); DTORCH_WIDE_VECTORS=0 turns it off (for comparison; read once per
/// process, part of compilerConfiguration()). The same operations per
/// element either way, on twice the elements per instruction.
bool wideVectorsFromEnvironment();

/// The structural signature generateFusedKernel caches by (constants'
/// values excluded).
std::string fusedKernelSignature(rank::FusedOp op);

} // namespace dtorch

#endif // DTORCH_LIB_COMPILER_KERNELCODEGEN_H
