//===- Redistribute.cpp - plans for changing a DTensor's placements ------===//
#include "dtorch/Redistribute.h"
#include "dtorch/RedistributeTraffic.h"

#include <algorithm>
#include <optional>
#include <queue>
#include <unordered_map>

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

using K = RedistributeStep::Kind;

/// True when a mesh axis after `axis` shards tensor dim `d` in `ps`.
bool laterAxisShards(const Placements &ps, size_t axis, int64_t d) {
  for (size_t j = axis + 1; j < ps.size(); ++j)
    if (ps[j].isShard(d))
      return true;
  return false;
}

/// The one step that turns `cur[axis]` into `to`, if there is one (valid or
/// not).
std::optional<RedistributeStep> stepTo(const Placements &cur, size_t axis,
                                       const Placement &to) {
  const Placement &from = cur[axis];
  if (from == to)
    return std::nullopt;
  RedistributeStep s{K::AllReduce,  (int64_t)axis, 0,  0,
                     ReduceOp::Sum, cur,           cur};
  s.after[axis] = to;
  if (from.isPartial()) {
    if (to.isPartial())
      return std::nullopt; // reduce first, then make partial again
    s.kind = to.isShard() ? K::ReduceScatter : K::AllReduce;
    s.dim = to.isShard() ? to.dim : 0;
    s.op = from.op;
  } else if (from.isShard()) {
    if (to.isPartial())
      return std::nullopt;
    s.kind = to.isShard() ? K::AllToAll : K::AllGather;
    s.dim = to.isShard() ? to.dim : from.dim;
    s.srcDim = to.isShard() ? from.dim : 0;
  } else {
    s.kind = to.isShard() ? K::LocalSlice : K::ToPartial;
    s.dim = to.isShard() ? to.dim : 0;
    s.op = to.isPartial() ? to.op : ReduceOp::Sum;
  }
  return s;
}

/// Total order of plans. Each collective waits for its busiest rank, so plans
/// compare first by the sum over steps of the most elements one rank sends
/// in that step, then by the elements all ranks send, then by the number of
/// collectives and of steps.
struct PlanCost {
  int64_t busiest = 0;
  int64_t bytes = 0;
  int collectives = 0;
  int steps = 0;
  bool operator<(const PlanCost &o) const {
    if (busiest != o.busiest)
      return busiest < o.busiest;
    if (bytes != o.bytes)
      return bytes < o.bytes;
    if (collectives != o.collectives)
      return collectives < o.collectives;
    return steps < o.steps;
  }
};

/// Local steps (slices, to_partial) next to each other cost nothing in any
/// order; put them outermost axis first, so that equal plans read the same.
void orderLocalSteps(std::vector<RedistributeStep> &plan) {
  for (bool swapped = true; swapped;) {
    swapped = false;
    for (size_t i = 0; i + 1 < plan.size(); ++i) {
      const RedistributeStep &x = plan[i], &y = plan[i + 1];
      if (communicates(x.kind) || communicates(y.kind) || y.axis >= x.axis)
        continue;
      std::optional<RedistributeStep> first =
          stepTo(x.before, y.axis, y.after[y.axis]);
      if (!first || !isValidStep(*first))
        continue;
      std::optional<RedistributeStep> second =
          stepTo(first->after, x.axis, x.after[x.axis]);
      if (!second || !isValidStep(*second))
        continue;
      plan[i] = *first;
      plan[i + 1] = *second;
      swapped = true;
    }
  }
}

/// Dijkstra over placement states. Each axis may take Replicate, a Shard of
/// any tensor dim, or the Partial of its source or destination; an edge is
/// one valid step, weighted by the exact elements the ranks send.
std::vector<RedistributeStep> searchPlan(const std::vector<int64_t> &shape,
                                         const std::vector<int64_t> &mesh,
                                         const Placements &src,
                                         const Placements &dst) {
  const size_t nAxes = src.size();
  std::vector<std::vector<Placement>> options(nAxes);
  auto addOption = [&](size_t a, const Placement &p) {
    for (const Placement &q : options[a])
      if (q == p)
        return;
    options[a].push_back(p);
  };
  for (size_t a = 0; a < nAxes; ++a) {
    addOption(a, src[a]);
    addOption(a, dst[a]);
    addOption(a, Placement::replicate());
    for (int64_t d = 0; d < (int64_t)shape.size(); ++d)
      addOption(a, Placement::shard(d));
  }
  // A state is one option index per axis, numbered in mixed radix.
  int64_t total = 1;
  for (size_t a = 0; a < nAxes; ++a)
    total *= (int64_t)options[a].size();
  auto encode = [&](const Placements &ps) {
    int64_t id = 0;
    for (size_t a = 0; a < nAxes; ++a) {
      size_t k = 0;
      while (options[a][k] != ps[a])
        ++k;
      id = id * (int64_t)options[a].size() + (int64_t)k;
    }
    return id;
  };
  auto decode = [&](int64_t id) {
    Placements ps(nAxes);
    for (size_t a = nAxes; a-- > 0;) {
      ps[a] = options[a][id % (int64_t)options[a].size()];
      id /= (int64_t)options[a].size();
    }
    return ps;
  };
  const int64_t positions = meshSize(mesh);
  std::vector<std::vector<int64_t>> coords(positions);
  for (int64_t p = 0; p < positions; ++p)
    coords[p] = meshCoords(mesh, p);

  struct Visit {
    PlanCost cost;
    int64_t prev = -1; // the state before the step that reached this one
    bool reached = false, done = false;
  };
  std::vector<Visit> seen(total);
  using Entry = std::pair<PlanCost, int64_t>;
  auto later = [](const Entry &x, const Entry &y) {
    if (x.first < y.first || y.first < x.first)
      return y.first < x.first;
    return x.second > y.second;
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(later)> queue(later);
  const int64_t srcId = encode(src), dstId = encode(dst);
  seen[srcId].reached = true;
  queue.push({PlanCost{}, srcId});
  while (!queue.empty()) {
    auto [cost, id] = queue.top();
    queue.pop();
    Visit &v = seen[id];
    if (v.done || v.cost < cost || cost < v.cost)
      continue;
    v.done = true;
    if (id == dstId)
      break;
    const Placements cur = decode(id);
    for (size_t a = 0; a < nAxes; ++a)
      for (const Placement &to : options[a]) {
        std::optional<RedistributeStep> step = stepTo(cur, a, to);
        if (!step || !isValidStep(*step))
          continue;
        PlanCost next = cost;
        int64_t busiest = 0;
        if (communicates(step->kind))
          for (int64_t p = 0; p < positions; ++p) {
            int64_t sent = stepElementsSent(*step, shape, mesh, coords[p]);
            next.bytes += sent;
            busiest = std::max(busiest, sent);
          }
        next.busiest += busiest;
        next.collectives += communicates(step->kind);
        next.steps += 1;
        Visit &w = seen[encode(step->after)];
        if (w.reached && (w.done || !(next < w.cost)))
          continue;
        w = Visit{next, id, true, false};
        queue.push({next, encode(step->after)});
      }
  }
  // Walk back from the destination; each step is the one between two states
  // that differ on one axis.
  std::vector<RedistributeStep> plan;
  for (int64_t id = dstId; id != srcId; id = seen[id].prev) {
    Placements before = decode(seen[id].prev), after = decode(id);
    size_t axis = 0;
    while (before[axis] == after[axis])
      ++axis;
    plan.push_back(*stepTo(before, axis, after[axis]));
  }
  std::reverse(plan.begin(), plan.end());
  orderLocalSteps(plan);
  return plan;
}

} // namespace

bool isValidStep(const RedistributeStep &s) {
  const Placements &b = s.before, &a = s.after;
  if (b.size() != a.size() || s.axis < 0 || s.axis >= (int64_t)b.size())
    return false;
  for (size_t j = 0; j < b.size(); ++j)
    if ((int64_t)j != s.axis && b[j] != a[j])
      return false;
  size_t axis = s.axis;
  const Placement &from = b[axis], &to = a[axis];
  switch (s.kind) {
  case K::AllReduce:
    return from.isPartial() && to.isReplicate() && from.op == s.op;
  case K::ReduceScatter:
    return from.isPartial() && from.op == s.op && to.isShard(s.dim) &&
           !laterAxisShards(b, axis, s.dim);
  case K::AllGather:
    return from.isShard(s.dim) && to.isReplicate() &&
           !laterAxisShards(b, axis, s.dim);
  case K::AllToAll:
    return from.isShard(s.srcDim) && to.isShard(s.dim) && s.dim != s.srcDim &&
           !laterAxisShards(b, axis, s.srcDim) &&
           !laterAxisShards(b, axis, s.dim);
  case K::LocalSlice:
    return from.isReplicate() && to.isShard(s.dim) &&
           !laterAxisShards(b, axis, s.dim);
  case K::ToPartial:
    return from.isReplicate() && to.isPartial() && to.op == s.op;
  }
  return false;
}

std::vector<RedistributeStep>
planRedistribute(const std::vector<int64_t> &globalShape,
                 const std::vector<int64_t> &meshShape, const Placements &src,
                 const Placements &dst) {
  if (src == dst || src.size() != dst.size() || src.size() != meshShape.size())
    return {};
  // Plans are asked for again and again (every candidate strategy of every
  // op); remember them per thread.
  thread_local std::unordered_map<std::string, std::vector<RedistributeStep>>
      memo;
  std::string key;
  for (int64_t s : globalShape)
    key += std::to_string(s) + ",";
  key += "|";
  for (int64_t s : meshShape)
    key += std::to_string(s) + ",";
  key += placementsStr(src) + placementsStr(dst);
  auto it = memo.find(key);
  if (it != memo.end())
    return it->second;
  if (memo.size() > 100000)
    memo.clear();
  return memo[key] = searchPlan(globalShape, meshShape, src, dst);
}

std::vector<RedistributeStep> planViaReplicate(const Placements &src,
                                               const Placements &dst) {
  std::vector<RedistributeStep> steps;
  Placements cur = src;
  auto go = [&](size_t axis, const Placement &to) {
    if (std::optional<RedistributeStep> s = stepTo(cur, axis, to)) {
      steps.push_back(*s);
      cur = s->after;
    }
  };
  for (size_t a = 0; a < cur.size(); ++a)
    if (cur[a].isPartial() && cur[a] != dst[a])
      go(a, Placement::replicate());
  for (size_t a = cur.size(); a-- > 0;)
    if (cur[a].isShard())
      go(a, Placement::replicate());
  for (size_t a = 0; a < cur.size(); ++a)
    if (cur[a] != dst[a])
      go(a, dst[a]);
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
  for (const RedistributeStep &s :
       planRedistribute(globalShape, meshShape, src, dst)) {
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
