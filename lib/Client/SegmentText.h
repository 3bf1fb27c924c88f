//===- SegmentText.h - a segment as a dtensor-dialect function ----*- C++
//-*-===//
#pragma once

#include "dtorch/Client/Session.h"
#include "dtorch/SegmentGraph.h"

#include <string>

namespace dtorch::client {

/// The dtensor type text of a tensor, with the mesh's dim names and device
/// when it has them: !dtensor.tensor<4x8xf32, #dtensor.mesh<[2, 2], names =
/// ["dp", "tp"]>, [S(0), R]>.
std::string typeText(const TensorMeta &meta, const Mesh &mesh);

/// What identifies the full tensor a Python number operand stands for: its
/// value's bits, shape, dtype and placements. A segment holds one `full`
/// per distinct key, written where it is first read, and every node with
/// that scalar reads it (what CSE would make of one full per use, without
/// building, verifying and merging the copies).
std::string scalarFullKey(const Node &node);

/// Whether the segment moves values between meshes (a send or a recv): its
/// function then names the global rank of every mesh position
/// (`dtensor.global_ranks`), so the compiler can pair those messages.
bool movesBetweenMeshes(const Segment &segment);

/// A function `@name` whose arguments are the segment's args and whose
/// results are its results. Values are numbered locally, so the same step
/// gives the same text (the structural cache key). With `seeds`, random ops
/// get their slot number (0, 1, ... in segment order) as seed and the real
/// seeds are appended to `seeds`, so steps that draw fresh random numbers
/// still share one text; without it, the real seeds are written.
std::string segmentText(const Segment &segment, const Mesh &mesh,
                        const std::string &name,
                        std::vector<int64_t> *seeds = nullptr);

/// The same function as data, for the compiler to build its module from
/// directly (dtorch::compileGraph); building it prints exactly what parsing
/// segmentText(segment, mesh, name, seeds) gives, and `seeds` is filled the
/// same way.
SegmentGraph segmentGraph(const Segment &segment, const Mesh &mesh,
                          const std::string &name,
                          std::vector<int64_t> *seeds = nullptr);

} // namespace dtorch::client
