//===- Redistribute.cpp - plans for changing a DTensor's placements ------===//
#include "dtorch/Redistribute.h"

namespace dtorch {

const char *stepKindName(RedistributeStep::Kind kind) {
  using K = RedistributeStep::Kind;
  switch (kind) {
  case K::AllReduce:
    return "all_reduce";
  case K::ReduceScatter:
    return "reduce_scatter";
  case K::AllGather:
    return "all_gather";
  case K::AllToAll:
    return "all_to_all";
  case K::LocalSlice:
    return "local_slice";
  case K::ToPartial:
    return "to_partial";
  }
  return "?";
}

namespace {

/// True when an axis other than `axis` shards tensor dim `d` in `a` or `b`.
bool otherAxisShards(const Placements &a, const Placements &b, size_t axis,
                     int64_t d) {
  for (size_t j = 0; j < a.size(); ++j)
    if (j != axis && (a[j].isShard(d) || b[j].isShard(d)))
      return true;
  return false;
}

/// A shard on `axis` may stay in place when it is already the destination and
/// every earlier axis that splits the same tensor dim (before or after) is
/// unchanged: the nested split it belongs to is then the same.
bool shardCanStay(const Placements &cur, const Placements &dst, size_t axis) {
  if (!cur[axis].isShard() || cur[axis] != dst[axis])
    return false;
  int64_t d = cur[axis].dim;
  for (size_t j = 0; j < axis; ++j)
    if ((cur[j].isShard(d) || dst[j].isShard(d)) && cur[j] != dst[j])
      return false;
  return true;
}

} // namespace

std::vector<RedistributeStep> planRedistribute(const Placements &src,
                                               const Placements &dst) {
  using K = RedistributeStep::Kind;
  std::vector<RedistributeStep> steps;
  Placements cur = src;
  auto emit = [&](K kind, size_t axis, Placement next, int64_t dim,
                  int64_t srcDim, ReduceOp op) {
    RedistributeStep s{kind, (int64_t)axis, dim, srcDim, op, cur, cur};
    s.after[axis] = next;
    steps.push_back(s);
    cur = s.after;
  };

  // 1. Reduce partial values first: the data is smallest before any gather.
  for (size_t i = 0; i < cur.size(); ++i) {
    if (!cur[i].isPartial() || cur[i] == dst[i])
      continue;
    ReduceOp op = cur[i].op;
    if (dst[i].isShard() && !otherAxisShards(cur, dst, i, dst[i].dim))
      emit(K::ReduceScatter, i, dst[i], dst[i].dim, 0, op);
    else
      emit(K::AllReduce, i, Placement::replicate(), 0, 0, op);
  }
  // 2. Move a shard from one tensor dim to another with one all_to_all.
  for (size_t i = 0; i < cur.size(); ++i) {
    if (!cur[i].isShard() || !dst[i].isShard() || cur[i] == dst[i])
      continue;
    int64_t a = cur[i].dim, b = dst[i].dim;
    if (!otherAxisShards(cur, dst, i, a) && !otherAxisShards(cur, dst, i, b))
      emit(K::AllToAll, i, dst[i], b, a, ReduceOp::Sum);
  }
  // 3. Gather every shard that cannot stay, innermost axis first, so that
  //    nested splits of one tensor dim are undone in reverse order.
  std::vector<bool> stays(cur.size());
  for (size_t i = 0; i < cur.size(); ++i)
    stays[i] = shardCanStay(cur, dst, i);
  for (size_t k = cur.size(); k-- > 0;)
    if (cur[k].isShard() && !stays[k])
      emit(K::AllGather, k, Placement::replicate(), cur[k].dim, 0,
           ReduceOp::Sum);
  // 4. Slice replicated axes into their shards, outermost first, or make
  //    them partial.
  for (size_t i = 0; i < cur.size(); ++i) {
    if (!cur[i].isReplicate() || dst[i].isReplicate())
      continue;
    if (dst[i].isShard())
      emit(K::LocalSlice, i, dst[i], dst[i].dim, 0, ReduceOp::Sum);
    else
      emit(K::ToPartial, i, dst[i], 0, 0, dst[i].op);
  }
  return steps;
}

double redistributeCost(const std::vector<int64_t> &globalShape,
                        int64_t elementBytes,
                        const std::vector<int64_t> &meshShape,
                        const Placements &src, const Placements &dst) {
  double numel = 1;
  for (int64_t s : globalShape)
    numel *= (double)s;
  double total = 0;
  for (const RedistributeStep &s : planRedistribute(src, dst)) {
    double local = numel;
    for (size_t a = 0; a < s.before.size(); ++a)
      if (s.before[a].isShard())
        local /= (double)meshShape[a];
    double n = (double)meshShape[s.axis];
    using K = RedistributeStep::Kind;
    switch (s.kind) {
    case K::AllReduce:
      total += 2 * (n - 1) / n * local;
      break;
    case K::ReduceScatter:
      total += (n - 1) / n * local;
      break;
    case K::AllGather:
      total += (n - 1) * local;
      break;
    case K::AllToAll:
      total += (n - 1) / n * local;
      break;
    case K::LocalSlice:
    case K::ToPartial:
      break;
    }
  }
  return total * (double)elementBytes;
}

} // namespace dtorch
