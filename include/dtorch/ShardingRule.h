//===- ShardingRule.h - factor-based sharding rules of ops --------*- C++
//-*-===//
//
// Every dtensor op describes how it may be sharded with a ShardingRule, in the
// style of einsum factors (as Shardy does): each operand and result dim names
// a factor (or -1 when the dim must not be split); a factor that appears in
// operands but not in results is a reduction factor. Sharding a factor on a
// mesh axis shards every dim that carries it; sharding a reduction factor
// makes the result Partial(reductionOp) on that axis.
//
// Partial operands pass through when the op is homomorphic for the reduction:
//  - jointPartial: all operands Partial(op) -> result Partial(op)
//    (add/sub for sum and avg, maximum for max, reshape for any op);
//  - linearOperands: the op is linear in that operand, so one Partial(sum or
//    avg) operand with the others Replicate gives a Partial result (mul,
//    matmul, the numerator of div).
//
// Factors listed in evenFactors may be sharded only when the product of the
// sizes of the mesh axes that shard them divides the factor's size. A reshape
// uses them for the outer dims of a split or merge: [B, H] -> [B*H] keeps
// Shard(0) when B splits evenly, because an even split of B rows is then the
// same contiguous block as an even split of the B*H merged rows, while an
// uneven (torch.chunk) split of the two would differ. Keeping the rule itself
// mesh-free (the condition is checked against the mesh where a strategy is
// chosen or checked) lets the client, the propagation pass and the lowering
// share one rule.
//
// chooseStrategy enumerates, per mesh axis, "replicate", "shard factor f" and
// the allowed partial pass-throughs, and picks the cheapest total of the
// redistributions it needs (bytes moved), breaking ties by less local
// compute. The client infers result placements with it (no result given);
// the sharding propagation pass uses it with the result placements fixed.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_SHARDINGRULE_H
#define DTORCH_SHARDINGRULE_H

#include "dtorch/Layout.h"

namespace dtorch {

struct ShardingRule {
  std::vector<int64_t> factorSizes;
  std::vector<std::vector<int64_t>> operands; // factor per operand dim, or -1
  std::vector<std::vector<int64_t>> results;  // factor per result dim, or -1
  ReduceOp reductionOp = ReduceOp::Sum;
  std::vector<ReduceOp> jointPartial;
  std::vector<int64_t> linearOperands;
  std::vector<int64_t> evenFactors; // shardable only by an even split

  bool isReductionFactor(int64_t f) const;
  /// "([i, j], [j, k]) -> ([i, k]) reduction={j:sum} joint={} linear={0,1}",
  /// followed by " even={i}" when the rule has even factors.
  std::string str() const;
};

struct ShardingStrategy {
  std::vector<Placements> operands;
  Placements result;
  double cost = 0; // bytes moved by the redistributions it needs
};

/// Picks the cheapest strategy for one op. `requiredResult` may be null (the
/// client's inference) or the result placements that must be produced (a
/// result redistribution is then included in the cost). Without a required
/// result, strategies are ranked with the cost of later reducing a Partial
/// result (a reduce_scatter per partial axis) added, since a fetch or a
/// non-linear use pays it; the returned `cost` counts only the
/// redistributions. Ties go to the strategy that changes fewer operand
/// placements, then to less local work, then to fewer tensor dims split by
/// several mesh axes, then to fewer shards or partials on mesh axes of size 1.
ShardingStrategy
chooseStrategy(const ShardingRule &rule,
               const std::vector<std::vector<int64_t>> &operandShapes,
               const std::vector<Placements> &operandPlacements,
               const std::vector<int64_t> &resultShape, int64_t elementBytes,
               const std::vector<int64_t> &meshShape,
               const Placements *requiredResult);

/// True when the op can compute `result` from operands placed as given with
/// local work alone (every mesh axis matches one choice of the rule, and the
/// even factors are split evenly on `meshShape`).
bool isLocalStrategy(const ShardingRule &rule,
                     const std::vector<Placements> &operandPlacements,
                     const Placements &result,
                     const std::vector<int64_t> &meshShape);

} // namespace dtorch

#endif // DTORCH_SHARDINGRULE_H
