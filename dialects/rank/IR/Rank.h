//===- Rank.h - the per-rank dialect ------------------------------*- C++
//-*-===//
#ifndef DTORCH_DIALECTS_RANK_IR_RANK_H
#define DTORCH_DIALECTS_RANK_IR_RANK_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "rank/IR/RankOpsDialect.h.inc"

#define GET_OP_CLASSES
#include "rank/IR/RankOps.h.inc"

namespace dtorch::rank {
/// Name of the function attribute holding the global rank of a program.
inline constexpr llvm::StringLiteral kRankAttrName = "rank.rank";
} // namespace dtorch::rank

#endif // DTORCH_DIALECTS_RANK_IR_RANK_H
