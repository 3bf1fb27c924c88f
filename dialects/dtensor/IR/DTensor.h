//===- DTensor.h - the dtensor dialect ----------------------------*- C++
//-*-===//
#ifndef DTORCH_DIALECTS_DTENSOR_IR_DTENSOR_H
#define DTORCH_DIALECTS_DTENSOR_IR_DTENSOR_H

#include "dtorch/Layout.h"
#include "dtorch/ShardingRule.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/Hashing.h"

namespace dtorch {
inline llvm::hash_code hash_value(const Placement &p) {
  return llvm::hash_combine(static_cast<int>(p.kind), p.dim,
                            static_cast<int>(p.op));
}
} // namespace dtorch

#include "dtensor/IR/DTensorOpsDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dtensor/IR/DTensorAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dtensor/IR/DTensorOpsTypes.h.inc"

#include "dtensor/IR/ShardingRuleInterface.h.inc"

#define GET_OP_CLASSES
#include "dtensor/IR/DTensorOps.h.inc"

namespace dtorch::dtensor {
/// Discardable attribute of a dtensor.redistribute that gathers a value a
/// second time (FSDP's backward all_gather with reshard_after_forward=True):
/// it keeps the op distinct from the forward's identical redistribute under
/// CSE, survives chain folding, and LowerRedistribute copies it onto the
/// collective steps, so the compiled program shows both gathers.
inline constexpr llvm::StringLiteral kRegatherAttrName = "dtorch.regather";
/// On a dtensor function: the global rank of every position of its mesh
/// (row-major, DenseI64ArrayAttr). SPMD lowering copies it onto every class
/// function as `rank.global_ranks`, so that --rank-match-p2p pairs the
/// moves between meshes (dtensor.send/recv) of the functions of a module.
inline constexpr llvm::StringLiteral kGlobalRanksAttrName =
    "dtensor.global_ranks";
/// Copies `from`'s regather attribute (if any) onto `to`.
void copyRegatherAttr(mlir::Operation *from, mlir::Operation *to);
/// Bytes per element of an MLIR element type (for the cost model).
int64_t elementBytes(mlir::Type type);
/// Builds a DTensorType from layout-library placements.
DTensorType getDTensorType(mlir::ArrayRef<int64_t> shape,
                           mlir::Type elementType, MeshAttr mesh,
                           const Placements &placements);
} // namespace dtorch::dtensor

#endif // DTORCH_DIALECTS_DTENSOR_IR_DTENSOR_H
