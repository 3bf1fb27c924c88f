//===- SegmentText.h - a segment as a dtensor-dialect function ----*- C++ -*-===//
#pragma once

#include "dtorch/Client/Session.h"

#include <string>

namespace dtorch::client {

/// The dtensor type text of a tensor: !dtensor.tensor<4x8xf32, #dtensor.mesh<[2, 2]>, [S(0), R]>.
std::string typeText(const TensorMeta& meta, const Mesh& mesh);

/// A function `@name` whose arguments are the segment's args and whose
/// results are its results. Values are numbered locally, so the same step
/// gives the same text (the structural cache key).
std::string segmentText(const Segment& segment, const Mesh& mesh, const std::string& name);

}  // namespace dtorch::client
