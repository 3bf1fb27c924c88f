//===- TensorData.h - global values <-> per-rank pieces -----------*- C++ -*-===//
#pragma once

#include "dtorch/Client/Session.h"
#include "dtorch/runtime/Tensor.h"

#include <vector>

namespace dtorch::client {

/// The piece of `full` that each mesh position holds under `placements`
/// (P(sum): position 0 of the axis holds the value, the others zeros;
/// P(avg/max/min): every position holds the value).
std::vector<rt::Tensor> scatterPieces(const rt::Tensor& full, const Shape& meshShape,
                                      const Placements& placements);

/// The global value from every mesh position's piece, reducing partial axes.
rt::Tensor assemblePieces(const std::vector<rt::Tensor>& pieces, const Shape& globalShape,
                          wire::DType dtype, const Shape& meshShape,
                          const Placements& placements);

/// Copies the box [offset, offset+box.shape) between a dense tensor of
/// `fullShape` and a dense box tensor, in either direction.
void copyBox(const void* src, const Shape& srcShape, const Shape& srcOffset, void* dst,
             const Shape& dstShape, const Shape& dstOffset, const Shape& extent, size_t elemSize);

}  // namespace dtorch::client
