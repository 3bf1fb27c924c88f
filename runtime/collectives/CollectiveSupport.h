// Argument checks and shape helpers shared by the shared-memory and Gloo
// communicators (internal to runtime/collectives).
#pragma once

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/Shape.h"

#include <string>
#include <vector>

namespace dtorch::rt::detail {

inline Shape withExtent(Shape shape, int64_t dim, int64_t extent) {
  shape[dim] = extent;
  return shape;
}

inline Shape zeros(size_t rank) { return Shape(rank, 0); }

inline Shape offsetAlong(size_t rank, int64_t dim, int64_t offset) {
  Shape result(rank, 0);
  result[dim] = offset;
  return result;
}

inline void requireShape(const Tensor &tensor, DType dtype, const Shape &shape,
                         const std::string &what) {
  if (!tensor.defined() || tensor.dtype() != dtype || tensor.shape() != shape)
    throw RuntimeError(what + ": expected " + dtypeName(dtype) +
                       shapeToString(shape) + ", got " + tensor.describe());
}

inline void checkSizes(const std::vector<int64_t> &sizes, const Group &group,
                       const char *what) {
  if (sizes.size() != group.size())
    throw RuntimeError(
        std::string(what) + " has " + std::to_string(sizes.size()) +
        " entries for a group of " + std::to_string(group.size()));
  for (int64_t size : sizes)
    if (size < 0)
      throw RuntimeError(std::string(what) + " has a negative entry");
}

inline int64_t sumOf(const std::vector<int64_t> &sizes) {
  int64_t total = 0;
  for (int64_t size : sizes)
    total += size;
  return total;
}

// Product of the extents before `dim`: 1 means every piece cut along `dim`
// is one contiguous run.
inline int64_t outerCount(const Shape &shape, int64_t dim) {
  int64_t count = 1;
  for (int64_t d = 0; d < dim; ++d)
    count *= shape[d];
  return count;
}

// Elements in one unit of `dim` (product of the extents after it).
inline int64_t innerCount(const Shape &shape, int64_t dim) {
  int64_t count = 1;
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d)
    count *= shape[d];
  return count;
}

inline std::string ranksToString(const std::vector<int64_t> &ranks) {
  std::string text;
  for (int64_t rank : ranks) {
    if (!text.empty())
      text += ", ";
    text += std::to_string(rank);
  }
  return text;
}

// Validates the common arguments of each collective for the caller; returns
// normalized dims through the references.
void checkAllGather(const Tensor &x, const Tensor &out, const Group &group,
                    size_t me, int64_t &dim, const std::vector<int64_t> &sizes);
void checkReduceScatter(const Tensor &x, const Tensor &out, const Group &group,
                        size_t me, ReduceOp op, int64_t &dim,
                        const std::vector<int64_t> &sizes);
void checkAllToAll(const Tensor &x, const Tensor &out, const Group &group,
                   int64_t &splitDim, const std::vector<int64_t> &splitSizes,
                   int64_t &concatDim, const std::vector<int64_t> &concatSizes);

} // namespace dtorch::rt::detail
