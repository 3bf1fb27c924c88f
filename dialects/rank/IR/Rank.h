//===- Rank.h - the per-rank dialect ------------------------------*- C++
//-*-===//
#ifndef DTORCH_DIALECTS_RANK_IR_RANK_H
#define DTORCH_DIALECTS_RANK_IR_RANK_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <optional>

#include "rank/IR/RankOpsDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "rank/IR/RankAttrs.h.inc"

#define GET_OP_CLASSES
#include "rank/IR/RankOps.h.inc"

namespace dtorch::rank {
/// Function attributes of a class program: the mesh shape
/// (DenseI64ArrayAttr) and the mesh positions that run it, an ArrayAttr of
/// boxes, each a DenseI64ArrayAttr [lo0, hi0, lo1, hi1, ...] (half-open
/// coordinate ranges, one pair per mesh axis).
inline constexpr llvm::StringLiteral kMeshAttrName = "rank.mesh";
inline constexpr llvm::StringLiteral kPositionsAttrName = "rank.positions";
/// On a class function: the global rank of every position of its mesh
/// (row-major). `--rank-match-p2p` uses it to pair the sends and receives
/// that name global ranks (moves between meshes) across the functions of a
/// module.
inline constexpr llvm::StringLiteral kGlobalRanksAttrName = "rank.global_ranks";
/// Set by --rank-plan-buffers: an op's result offset in the rank's arena
/// (bytes, I64) and a function's arena size (bytes, I64).
inline constexpr llvm::StringLiteral kArenaOffsetAttrName = "rank.arena_offset";
inline constexpr llvm::StringLiteral kArenaBytesAttrName = "rank.arena_bytes";
/// Set by --rank-mark-donations on a class function: per result, the
/// argument whose storage it may take when the caller donates that argument
/// (DenseI64ArrayAttr, -1: none).
inline constexpr llvm::StringLiteral kOutputDonorsAttrName =
    "rank.output_donors";
/// Unit attribute of a class program whose collectives were placed by
/// --rank-schedule-collectives: the emitter makes each collective also wait
/// for the compute instruction right before it.
inline constexpr llvm::StringLiteral kScheduledAttrName = "rank.scheduled";

/// The arena offset `--rank-plan-buffers` gave result `index` of `op`: an
/// i64 `rank.arena_offset` for an op with one result, an i64 array with one
/// entry per result for an op with several (e.g. a rank.fused); -1 when the
/// result keeps its own storage.
int64_t arenaOffsetOf(mlir::Operation *op, unsigned index);

/// True for the ops the emitter puts on the COMPUTE stream (a registry
/// kernel, a generated fused kernel or the multi-tensor optimizer kernel);
/// every other op of the function body that belongs to the rank dialect is
/// a collective on the COMM stream.
inline bool runsOnComputeStream(mlir::Operation *op) {
  return mlir::isa<KernelOp, FusedOp, FusedAdamOp, FusedSgdOp>(op);
}

/// The tensor groups of a multi-tensor optimizer update (rank.fused_adam,
/// rank.fused_sgd): `scalarInputs` leading 0-d f64 inputs (step and lr, or
/// lr), then `inputsPerParam` groups of `numParams` tensors (tensor k of
/// parameter i is input `input(k, i)`: parameters, gradients, state); the
/// results are `resultsPerParam` such groups (parameters, state), result
/// `r` replacing input `replacedInput(r)`. Each result element is computed
/// from the same element of its parameter's group alone.
struct OptimizerGroups {
  unsigned scalarInputs = 0;
  int64_t numParams = 0, inputsPerParam = 0, resultsPerParam = 0;
  unsigned input(int64_t k, int64_t i) const {
    return static_cast<unsigned>(scalarInputs + k * numParams + i);
  }
};

/// The groups of `op` when it is a multi-tensor optimizer update.
std::optional<OptimizerGroups> optimizerGroupsOf(mlir::Operation *op);

/// The input that result `index` of the optimizer update `op` replaces
/// (the same role in the parameter's group).
unsigned replacedInputOf(mlir::Operation *op, unsigned index);
} // namespace dtorch::rank

#endif // DTORCH_DIALECTS_RANK_IR_RANK_H
