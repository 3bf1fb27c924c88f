//===- FusibleKernels.h - kernels a fused group may hold -------*- C++ -*-===//
//
// The one list of the runtime kernels that `--rank-fuse-elementwise` groups
// and that the controller's kernel generator (lib/Compiler/KernelCodegen.cpp)
// compiles: one declaration per kernel, with the element types it is fused
// for. A kernel absent here is never fused; a test generates every entry for
// every element type it names and compares it with the runtime's kernel.
// A group may mix element types: comparisons make `i1`, which `where`
// consumes, and casts convert between any two element types.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_DIALECTS_RANK_IR_FUSIBLEKERNELS_H
#define DTORCH_DIALECTS_RANK_IR_FUSIBLEKERNELS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Types.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace dtorch::rank {

/// How a fusible kernel relates its operands to its result.
enum class FusibleKind {
  Elementwise, // operands and result share shape and element type
  Creation,    // no operands (`full`: one value everywhere; `iota`)
  Broadcast,   // one operand broadcast (numpy rules) to the result's shape
  Compare,     // two operands of one element type, an `i1` result
  Select,      // `where`: an `i1` condition, then two operands of the
               // result's element type
  Cast,        // one operand of any element type, the result of another
};

/// The element types a kernel is fused for.
enum FusibleTypes : unsigned {
  kFloatTypes = 1,   // f32, f64, f16, bf16
  kIntegerTypes = 2, // i32, i64
  kBoolType = 4,     // i1
  kAllTypes = kFloatTypes | kIntegerTypes | kBoolType,
};

struct FusibleKernel {
  llvm::StringLiteral name;
  FusibleKind kind;
  unsigned numOperands;
  unsigned types; // FusibleTypes bits: of the operands for a comparison, of
                  // the result for the others (a cast: of both)
};

/// Every fusible kernel.
llvm::ArrayRef<FusibleKernel> fusibleKernels();

/// The entry for `name` when it is fused for `elementType` (the operands'
/// element type for a comparison, the result's for the others), else
/// nullptr.
const FusibleKernel *lookupFusibleKernel(llvm::StringRef name,
                                         mlir::Type elementType);

/// The entry of the rank.kernel `op` when its kernel is fused for its
/// element types, else nullptr (what lookupFusibleKernel is asked: the
/// first operand's element type for a comparison, the result's otherwise).
const FusibleKernel *lookupFusibleKernel(mlir::Operation *op);

/// True for the element types a fused kernel may hold: f32, f64, f16,
/// bf16, i32, i64 and i1.
bool isFusibleElementType(mlir::Type elementType);

/// The first position of an `iota` along its dim (its `offset` attribute's
/// entry there: plain integers, or a `#rank.box_offset` whose mesh axes do
/// not shard that dim, which is zero on every rank), or nothing when it
/// differs between ranks.
std::optional<int64_t> constantIotaStart(mlir::Operation *iota);

/// The type of a row reduction's result: `rowType` with its last
/// `reducedDims` dims set to 1 (`keepdim`) or dropped. Null for
/// reducedDims <= 0 or more than the rank.
mlir::RankedTensorType rowReducedType(mlir::RankedTensorType rowType,
                                      int64_t reducedDims, bool keepdim);

/// True when `op` is a `rank.kernel` calling `kernel`.
bool isKernel(mlir::Operation *op, llvm::StringRef kernel);

} // namespace dtorch::rank

#endif // DTORCH_DIALECTS_RANK_IR_FUSIBLEKERNELS_H
