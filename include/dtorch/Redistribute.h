//===- Redistribute.h - plans for changing a DTensor's placements -*- C++
//-*-===//
//
// A redistribution from placements `src` to `dst` becomes a short sequence of
// steps, each changing the placement on one mesh axis with one collective or
// one local operation. The plan is exact for uneven shards and for a tensor
// dim sharded over several mesh axes (nested splits in mesh-dim order):
//  1. Partial axes are reduced first (reduce_scatter straight into the
//     destination shard when no other axis shards that dim, else all_reduce);
//  2. Shard(a) -> Shard(b) on one axis is an all_to_all when no other axis
//     shards a or b;
//  3. shards that cannot stay are all-gathered, innermost mesh axis first;
//  4. Replicate axes are sliced into their destination shard (outermost
//     first) or turned into Partial.
// The same plan drives the IR lowering and the cost model.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_REDISTRIBUTE_H
#define DTORCH_REDISTRIBUTE_H

#include "dtorch/Layout.h"

namespace dtorch {

struct RedistributeStep {
  enum class Kind : uint8_t {
    AllReduce,     // Partial(op) -> Replicate
    ReduceScatter, // Partial(op) -> Shard(dim)
    AllGather,     // Shard(dim) -> Replicate
    AllToAll,      // Shard(srcDim) -> Shard(dim)
    LocalSlice,    // Replicate -> Shard(dim)
    ToPartial,     // Replicate -> Partial(op)
  };
  Kind kind;
  int64_t axis;
  int64_t dim = 0;    // tensor dim of the resulting shard / gathered shard
  int64_t srcDim = 0; // AllToAll: the source shard dim
  ReduceOp op = ReduceOp::Sum;
  Placements before, after;
};
const char *stepKindName(RedistributeStep::Kind kind);

std::vector<RedistributeStep> planRedistribute(const Placements &src,
                                               const Placements &dst);

/// Estimated bytes that one rank sends or receives to carry out the plan.
double redistributeCost(const std::vector<int64_t> &globalShape,
                        int64_t elementBytes,
                        const std::vector<int64_t> &meshShape,
                        const Placements &src, const Placements &dst);

} // namespace dtorch

#endif // DTORCH_REDISTRIBUTE_H
