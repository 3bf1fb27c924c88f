//===- ProgramEmitter.h - rank-dialect functions to wire programs -*- C++
//-*-===//
#ifndef DTORCH_LIB_COMPILER_PROGRAMEMITTER_H
#define DTORCH_LIB_COMPILER_PROGRAMEMITTER_H

#include "dtorch_program.pb.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LogicalResult.h"

namespace dtorch {

/// Maps an MLIR element type to the wire dtype (DTYPE_INVALID if none).
wire::DType toWireDType(mlir::Type type);

/// Emits the program of one class function (`rank.mesh`, `rank.positions`):
/// one buffer per SSA value, kernels on the compute stream, collectives on
/// the communication stream, with an event wherever a value crosses streams.
/// Fused groups are compiled for the host, or to PTX for `cudaArch` when it
/// is not empty. `generateOptimizerKernels`: a rank.fused_adam or
/// rank.fused_sgd calls a
/// kernel generated for its signature (OptimizerKernelCodegen.h) instead of
/// the runtime's hand-written one (on a CUDA mesh it always does).
mlir::FailureOr<wire::Program>
emitProgram(mlir::func::FuncOp fn, llvm::StringRef cudaArch = {},
            bool generateOptimizerKernels = false);

} // namespace dtorch

#endif
