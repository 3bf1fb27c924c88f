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

  bool isReductionFactor(int64_t f) const;
  /// "([i, j], [j, k]) -> ([i, k]) reduction={j:sum} joint={} linear={0,1}"
  std::string str() const;
};

struct ShardingStrategy {
  std::vector<Placements> operands;
  Placements result;
  double cost = 0; // bytes moved by the redistributions it needs
};

/// Picks the cheapest strategy for one op. `requiredResult` may be null (the
/// client's inference) or the result placements that must be produced (a
/// result redistribution is then included in the cost).
ShardingStrategy
chooseStrategy(const ShardingRule &rule,
               const std::vector<std::vector<int64_t>> &operandShapes,
               const std::vector<Placements> &operandPlacements,
               const std::vector<int64_t> &resultShape, int64_t elementBytes,
               const std::vector<int64_t> &meshShape,
               const Placements *requiredResult);

/// True when the op can compute `result` from operands placed as given with
/// local work alone (every mesh axis matches one choice of the rule).
bool isLocalStrategy(const ShardingRule &rule,
                     const std::vector<Placements> &operandPlacements,
                     const Placements &result);

} // namespace dtorch

#endif // DTORCH_SHARDINGRULE_H
