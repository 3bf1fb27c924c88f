//===- KernelCodegenSupport.h - pieces shared by the kernel builders -*- C++
//-*-===//
//
// Private to lib/Compiler: the scalar computation of each fusible kernel and
// the group's constants, used by the elementwise kernel builder
// (KernelCodegen.cpp, one linalg.generic) and by the row kernel builder
// (RowKernelCodegen.cpp, groups ending in reductions over the innermost
// dims).
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_LIB_COMPILER_KERNELCODEGENSUPPORT_H
#define DTORCH_LIB_COMPILER_KERNELCODEGENSUPPORT_H

#include "rank/IR/Rank.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/DenseMap.h"

#include <string>

namespace llvm {
class Module;
class TargetMachine;
} // namespace llvm

namespace dtorch::codegen {

/// How the generated code holds one element type: in memory (`storage`,
/// i8 for bool, i16 for bfloat16) and while computing (`compute`, f32 for
/// the 16-bit floats).
struct ElementTypes {
  mlir::Type storage;
  mlir::Type compute;
  bool isFloat = false;
  bool isBool = false;
  // bfloat16 is held as its bits: LLVM legalizes bfloat values through
  // float32 and back, and may convert back with vcvtneps2bf16, which
  // flushes denormals to zero; the runtime's kernels round them like any
  // value (FusedKernelBitwiseTest). With no bfloat type in the IR the
  // conversions are integer code (bf16BitsToF32, f32ToBF16Bits).
  bool isBF16 = false;
};

ElementTypes elementTypesFor(mlir::Type t, mlir::MLIRContext *ctx);

/// The float32 value of bfloat16 bits (i16).
mlir::Value bf16BitsToF32(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Value bits);
/// float32 to bfloat16 bits (i16), rounded as the runtime's BFloat16.
mlir::Value f32ToBF16Bits(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Value value);

/// Emits the scalar computation of one kernel on values of the compute
/// type; null for a kernel the generator does not know.
mlir::Value emitScalar(mlir::OpBuilder &b, mlir::Location loc,
                       llvm::StringRef name, mlir::ValueRange x,
                       const ElementTypes &et);

/// An element of the storage type of `et` in its compute type, and back
/// (the 16-bit floats as float32; the others unchanged).
mlir::Value toComputeType(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Value stored, const ElementTypes &et);
mlir::Value toStorageType(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Value computed, const ElementTypes &et);

/// The element of `kernel`'s result (an elementwise kernel, a comparison,
/// `where` or `cast` of rank/IR/FusibleKernels.h) in the storage type of
/// its element type, from the elements of its inputs in the storage types
/// of theirs (KernelElementCodegen.cpp). Null for a kernel computed
/// otherwise (`full`, `iota`, `broadcast_to`, reductions) or unknown.
mlir::Value emitKernelElement(mlir::OpBuilder &b, mlir::Location loc,
                              rank::KernelOp kernel, mlir::ValueRange inputs);

/// The element of an `iota` (admitted by --rank-fuse-elementwise) at
/// `coordinate` (an index along its dim, its offset not added), in the
/// storage type of its element type.
mlir::Value emitIotaElement(mlir::OpBuilder &b, mlir::Location loc,
                            rank::KernelOp iota, mlir::Value coordinate);

/// Each `full` of `body` read from the kernel's scalar argument, converted
/// to the storage type of its element type as the `full` kernel stores it.
llvm::DenseMap<mlir::Operation *, mlir::Value>
emitFullConstants(mlir::OpBuilder &b, mlir::Location loc, mlir::Block &body,
                  mlir::Value scalarArg);

/// A `full` value (float64) converted to the storage type as the `full`
/// kernel stores it.
mlir::Value convertFullConstant(mlir::OpBuilder &b, mlir::Location loc,
                                mlir::Value f64Value, const ElementTypes &et);

/// float32 exp, log, tanh and erf as MLIR's polynomial approximations (erf
/// as populatePiecewiseErfPatterns's unless DTORCH_ERF_PIECEWISE=0), as the
/// runtime's kernels compute them (dtorch/runtime/PolynomialMath.h).
void applyPolynomialApproximations(mlir::ModuleOp module);

/// math.erf on float32 as the runtime's polynomial::erfPiecewise, operation
/// for operation (ErfApproximation.cpp): no division.
void populatePiecewiseErfPatterns(mlir::RewritePatternSet &patterns);

/// The indexing map of an operand of shape `shape` in a loop nest over
/// `group` (numpy broadcasting: trailing dims aligned, extent 1 repeated).
mlir::AffineMap broadcastMap(llvm::ArrayRef<int64_t> shape,
                             llvm::ArrayRef<int64_t> group,
                             mlir::MLIRContext *ctx);

/// How buildElementwiseKernelModule shapes the kernel function.
struct ElementwiseModuleOptions {
  /// The group's constants as float64 arguments after the outputs (one per
  /// `full`), converted inside the element loop; else one memref<Nxf64>
  /// read before the loops (the host kernels).
  bool scalarsAsValues = false;
  /// A group of rank 0 as shape [1] (every operand too), so that it has a
  /// loop to map to GPU threads.
  bool rankZeroAsOne = false;
  /// Two index arguments after the scalars, rows [begin, end) of the
  /// outermost dim: operands varying along it are cut to those rows (the
  /// host kernels of at least two rows, split among a rank's threads).
  bool rowRange = false;
};

/// `func.func @<implName>(inputs..., outputs..., scalars)` over memrefs of
/// the storage types holding one linalg.generic (broadcast operands read
/// through index maps) whose body computes the group's kernels. For groups
/// without row reductions.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildElementwiseKernelModule(rank::FusedOp op, mlir::MLIRContext *ctx,
                             llvm::StringRef implName,
                             const ElementwiseModuleOptions &options);

/// True when `body` holds a row reduction (`sum`, `max`, `min`): the group
/// is generated by buildRowKernelModule.
bool hasRowReduction(mlir::Block &body);

/// The rows of a group holding a row reduction: the elements of its first
/// reduction's input with the reduced dims taken away.
int64_t rowReductionRows(mlir::Block &body);

/// Whether the host form of a row kernel reduces a block of 8 float32 rows
/// on vectors of the 8 rows (8 elements of each row transposed in
/// registers, each row still in increasing order: the same bits) rather
/// than one scalar chain per row; DTORCH_ROW_LANE_VECTORS=0 turns it off
/// (for comparison; read once per process, part of
/// compilerConfiguration()).
bool rowLaneVectorsFromEnvironment();

/// Whether the lane-vector reductions of a row kernel (float32 rows in
/// blocks of 8 on the host) reduce the elements of a chunk past its last
/// multiple of 8 as one more vector step on masked loads, padded with an
/// element that changes no accumulator (-0 for a sum, -inf for max, +inf
/// for min: the same bits), rather than one element at a time;
/// DTORCH_ROW_MASKED_TAILS=0 turns it off (for comparison; read once per
/// process, part of compilerConfiguration()).
bool rowMaskedTailsFromEnvironment();

/// Whether the fill and store loops of the row kernel of `body` fold their
/// remainder into a masked vector iteration (LLVM's
/// `llvm.loop.vectorize.predicate.enable`) instead of a scalar epilogue:
/// with DTORCH_ROW_MASKED_TAILS, for rows shorter than 256 elements of
/// groups that compute a polynomial (exp, log, ...), where that was
/// measured faster (RowKernelCodegen.cpp, kFoldTailsBelow).
bool rowKernelFoldsLoopTails(mlir::Block &body);

/// Whether the host form of a row kernel whose rows fit in one chunk keeps
/// the values each sweep reduces (its scratch rows) for the later sweeps,
/// which read them back instead of computing them again (softmax's exp is
/// evaluated once per element, not twice: the same values, the same
/// bits); DTORCH_ROW_SWEEP_REUSE=0 turns it off (for comparison; read once
/// per process, part of compilerConfiguration()).
bool rowSweepReuseFromEnvironment();

/// Whether the lane-vector max and min of a row kernel combine each group
/// of 8 elements as a tree (first NaN, else the first of the largest: the
/// same value and bits as the chain) before the running value, rather than
/// one element after the other; DTORCH_ROW_TREE_MAX=0 turns it off (for
/// comparison; read once per process, part of compilerConfiguration()).
bool rowTreeMaxFromEnvironment();

/// `func.func @<implName>(inputs..., outputs..., scalars)` computing a
/// group that ends in reductions over its innermost dims, one row at a time
/// (RowKernelCodegen.cpp). `forGpu`: the GPU form, one scf.parallel over
/// the rows (one thread per row once mapped) whose body sums its row in
/// the same increasing float64 order as the host form, in one loop per
/// sweep without scratch; its constants are float64 arguments after the
/// outputs (one per `full`, as ElementwiseModuleOptions::scalarsAsValues)
/// instead of one memref.
mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>>
buildRowKernelModule(rank::FusedOp op, mlir::MLIRContext *ctx,
                     llvm::StringRef implName, bool forGpu = false);

/// LLVM's default O3 module pipeline for `tm`'s target (host and GPU
/// kernels alike).
void optimizeModuleO3(llvm::Module &m, llvm::TargetMachine &tm);

/// `m` as `tm` emits it: assembly text (PTX for the GPU) when `assembly`,
/// else an object file; false when the target cannot emit that kind.
bool emitWithTarget(llvm::Module &m, llvm::TargetMachine &tm, bool assembly,
                    std::string &out);

/// The name the host kernel function must have for
/// compileHostKernelModule: `func.func @dtorch_fused_impl(inputs...,
/// outputs..., scalars: memref<Nxf64>, begin: index, end: index)` over
/// static-shaped memrefs (passed as bare pointers).
inline constexpr llvm::StringLiteral kHostKernelImplName = "dtorch_fused_impl";

/// The MLIR context the host kernels are built in (one per thread).
mlir::MLIRContext &hostKernelContext();

/// What host kernels are compiled for: triple, CPU and features (the
/// Executable's `target`).
std::string hostKernelTarget();

/// A module holding @dtorch_fused_impl (kHostKernelImplName) lowered to the
/// LLVM dialect, optimized at -O3 for the host and linked into a shared
/// object exporting `symbol(in, out, scalars)` (the whole range [0, rows))
/// and, when `rows` > 0, `symbol_rows(in, out, scalars, begin, end)`.
/// `parallelLoops`: every loop of the function touches element i of its
/// buffers in iteration i alone (llvm.loop.parallel_accesses, so in-place
/// calls stay vectorized). The error text in `error` on failure.
mlir::FailureOr<std::string>
compileHostKernelModule(mlir::ModuleOp module, llvm::StringRef symbol,
                        unsigned numInputs, unsigned numOutputs, int64_t rows,
                        bool parallelLoops, std::string &error);

} // namespace dtorch::codegen

#endif // DTORCH_LIB_COMPILER_KERNELCODEGENSUPPORT_H
