//===- RedistributeTraffic.cpp - bytes each rank sends to redistribute ---===//
#include "dtorch/RedistributeTraffic.h"

#include <algorithm>

namespace dtorch {
namespace {

int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

/// Elements of the intersection of two boxes of the same tensor.
int64_t overlap(const LocalBox &a, const LocalBox &b) {
  int64_t n = 1;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    int64_t lo = std::max(a.offset[d], b.offset[d]);
    int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    n *= std::max<int64_t>(0, hi - lo);
  }
  return n;
}

} // namespace

int64_t stepElementsSent(const RedistributeStep &step,
                         const std::vector<int64_t> &globalShape,
                         const std::vector<int64_t> &meshShape,
                         const std::vector<int64_t> &coords) {
  using K = RedistributeStep::Kind;
  LocalBox before = localBox(globalShape, meshShape, step.before, coords);
  int64_t local = numel(before.shape);
  int64_t n = meshShape[step.axis];
  int64_t me = coords[step.axis];
  switch (step.kind) {
  case K::AllGather:
    return (n - 1) * local;
  case K::AllReduce: {
    // The runtime reduces chunk j of the flattened piece on member j, then
    // gathers the reduced chunks.
    int64_t mine = local * (me + 1) / n - local * me / n;
    return (local - mine) + (n - 1) * mine;
  }
  case K::ReduceScatter:
  case K::AllToAll:
    return local - overlap(before, localBox(globalShape, meshShape, step.after,
                                            coords));
  case K::LocalSlice:
  case K::ToPartial:
    return 0;
  }
  return 0;
}

bool communicates(RedistributeStep::Kind kind) {
  using K = RedistributeStep::Kind;
  return kind != K::LocalSlice && kind != K::ToPartial;
}

std::vector<StepTraffic>
redistributeTraffic(const std::vector<int64_t> &globalShape,
                    int64_t elementBytes, const std::vector<int64_t> &meshShape,
                    const Placements &src, const Placements &dst) {
  return stepsTraffic(globalShape, elementBytes, meshShape,
                      planRedistribute(globalShape, meshShape, src, dst));
}

std::vector<StepTraffic>
stepsTraffic(const std::vector<int64_t> &globalShape, int64_t elementBytes,
             const std::vector<int64_t> &meshShape,
             const std::vector<RedistributeStep> &steps) {
  std::vector<StepTraffic> out;
  int64_t positions = meshSize(meshShape);
  for (const RedistributeStep &step : steps) {
    StepTraffic t{step, std::vector<int64_t>(positions, 0)};
    for (int64_t p = 0; p < positions; ++p)
      t.bytesSent[p] =
          elementBytes * stepElementsSent(step, globalShape, meshShape,
                                          meshCoords(meshShape, p));
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<int64_t> totalBytesSent(const std::vector<StepTraffic> &steps,
                                    int64_t meshPositions) {
  std::vector<int64_t> total(meshPositions, 0);
  for (const StepTraffic &t : steps)
    for (int64_t p = 0; p < meshPositions && p < (int64_t)t.bytesSent.size();
         ++p)
      total[p] += t.bytesSent[p];
  return total;
}

} // namespace dtorch
