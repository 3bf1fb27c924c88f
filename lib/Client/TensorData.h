//===- TensorData.h - global values <-> per-rank pieces -----------*- C++
//-*-===//
#pragma once

#include "dtorch/Client/Session.h"
#include "dtorch/runtime/Tensor.h"

#include <vector>

namespace dtorch::client {

/// The piece of `full` that each mesh position holds under `placements`
/// (P(sum): position 0 of the axis holds the value, the others zeros;
/// P(avg/max/min): every position holds the value).
std::vector<rt::Tensor> scatterPieces(const rt::Tensor &full,
                                      const Shape &meshShape,
                                      const Placements &placements);

/// The global value from every mesh position's piece, reducing partial axes.
rt::Tensor assemblePieces(const std::vector<rt::Tensor> &pieces,
                          const Shape &globalShape, wire::DType dtype,
                          const Shape &meshShape, const Placements &placements);

} // namespace dtorch::client
