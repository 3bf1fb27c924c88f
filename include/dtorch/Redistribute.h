//===- Redistribute.h - plans for changing a DTensor's placements -*- C++
//-*-===//
//
// A redistribution from placements `src` to `dst` becomes a short sequence of
// steps, each changing the placement on one mesh axis with one collective or
// one local operation. A step is exact for uneven shards (torch.chunk) and for
// a tensor dim sharded over several mesh axes (nested splits in mesh-dim
// order) when the axis it changes is the innermost axis that shards the
// tensor dims it touches (see isValidStep): its group's pieces are then
// consecutive chunks of one parent piece.
//
// planRedistribute searches (Dijkstra) the states reachable by valid steps
// for the plan whose ranks send the fewest bytes in total (exact piece sizes,
// RedistributeTraffic.h), then the fewest collectives. So it uses
// reduce_scatter for Partial -> Shard, all_to_all for Shard(i) -> Shard(j),
// slices a replicated axis before gathering another one when that shrinks
// what is gathered, and never sends more than planViaReplicate, the naive
// "reduce and gather everything, then slice" plan, which is one of the paths
// it searches. The same plan drives the IR lowering, the cost model and
// dtorch.explain().
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

/// True when `step` (one axis changed, `before` -> `after`) is a step the
/// lowering carries out exactly: the changed axis is the innermost axis that
/// shards each tensor dim the step splits or joins, and the kinds match.
bool isValidStep(const RedistributeStep &step);

/// The cheapest plan from `src` to `dst` for a tensor of `globalShape` on a
/// mesh of `meshShape` (memoized per thread).
std::vector<RedistributeStep>
planRedistribute(const std::vector<int64_t> &globalShape,
                 const std::vector<int64_t> &meshShape, const Placements &src,
                 const Placements &dst);

/// The naive plan: all_reduce every partial axis, all_gather every shard
/// (innermost axis first), then slice and make partial what `dst` needs. The
/// baseline that planRedistribute never exceeds.
std::vector<RedistributeStep> planViaReplicate(const Placements &src,
                                               const Placements &dst);

/// Estimated bytes that one rank sends or receives to carry out the plan.
double redistributeCost(const std::vector<int64_t> &globalShape,
                        int64_t elementBytes,
                        const std::vector<int64_t> &meshShape,
                        const Placements &src, const Placements &dst);

} // namespace dtorch

#endif // DTORCH_REDISTRIBUTE_H
