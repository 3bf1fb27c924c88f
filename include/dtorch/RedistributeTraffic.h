//===- RedistributeTraffic.h - bytes each rank sends to redistribute -*- C++
//-*-===//
//
// How many bytes every rank of the mesh sends for each step of a
// redistribution plan (include/dtorch/Redistribute.h), computed from the
// exact local pieces (uneven shards and nested splits included) and the way
// the runtime's collectives exchange data:
//  - all_gather: a rank sends its piece to each of the other n-1 members;
//  - reduce_scatter, all_to_all: a rank sends every member the part of its
//    piece that member keeps, i.e. all of its piece except its own part;
//  - all_reduce: a reduce_scatter of the flattened piece cut into n
//    near-equal chunks, then an all_gather of the reduced chunk;
//  - local_slice, to_partial: nothing.
// Used by --dtensor-explain-redistributions and by dtorch.explain().
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_REDISTRIBUTETRAFFIC_H
#define DTORCH_REDISTRIBUTETRAFFIC_H

#include "dtorch/Redistribute.h"

namespace dtorch {

/// One step of a plan and the bytes it makes each rank send.
struct StepTraffic {
  RedistributeStep step;
  std::vector<int64_t> bytesSent; // by mesh position (row-major)
};

/// The plan from `src` to `dst` with the bytes each rank sends per step.
std::vector<StepTraffic>
redistributeTraffic(const std::vector<int64_t> &globalShape,
                    int64_t elementBytes, const std::vector<int64_t> &meshShape,
                    const Placements &src, const Placements &dst);

/// The bytes each rank sends for a given list of steps (e.g. planViaReplicate).
std::vector<StepTraffic>
stepsTraffic(const std::vector<int64_t> &globalShape, int64_t elementBytes,
             const std::vector<int64_t> &meshShape,
             const std::vector<RedistributeStep> &steps);

/// Elements that the rank at mesh coordinates `coords` sends for `step`.
int64_t stepElementsSent(const RedistributeStep &step,
                         const std::vector<int64_t> &globalShape,
                         const std::vector<int64_t> &meshShape,
                         const std::vector<int64_t> &coords);

/// Bytes each mesh position sends over all steps.
std::vector<int64_t> totalBytesSent(const std::vector<StepTraffic> &steps,
                                    int64_t meshPositions);

/// True when a step of this kind exchanges data between ranks.
bool communicates(RedistributeStep::Kind kind);

} // namespace dtorch

#endif // DTORCH_REDISTRIBUTETRAFFIC_H
