#include "dtorch/runtime/Shape.h"

#include "dtorch/runtime/Tensor.h"

#include <cstring>
#include <limits>

namespace dtorch::rt {

int64_t shapeNumel(const Shape &shape) {
  int64_t numel = 1;
  bool hasZero = false;
  for (int64_t extent : shape) {
    if (extent < 0)
      throw RuntimeError("negative extent in shape " + shapeToString(shape));
    if (extent == 0)
      hasZero = true;
  }
  if (hasZero)
    return 0;
  for (int64_t extent : shape) {
    if (numel > std::numeric_limits<int64_t>::max() / extent)
      throw RuntimeError("element count of shape " + shapeToString(shape) +
                         " overflows");
    numel *= extent;
  }
  return numel;
}

std::vector<int64_t> rowMajorStrides(const Shape &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

std::string shapeToString(const Shape &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i)
      text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

int64_t normalizeDim(int64_t dim, int64_t rank, const char *what) {
  int64_t normalized = dim < 0 ? dim + rank : dim;
  if (normalized < 0 || normalized >= rank)
    throw RuntimeError(std::string(what) + " " + std::to_string(dim) +
                       " is out of range for rank " + std::to_string(rank));
  return normalized;
}

std::vector<int64_t> exclusivePrefixSums(const std::vector<int64_t> &sizes) {
  std::vector<int64_t> offsets(sizes.size(), 0);
  int64_t running = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = running;
    running += sizes[i];
  }
  return offsets;
}

void copyBox(const void *src, const Shape &srcShape, const Shape &srcOffset,
             void *dst, const Shape &dstShape, const Shape &dstOffset,
             const Shape &extent, size_t elementSize) {
  size_t rank = extent.size();
  if (srcShape.size() != rank || srcOffset.size() != rank ||
      dstShape.size() != rank || dstOffset.size() != rank)
    throw RuntimeError("copyBox: rank mismatch");
  for (size_t d = 0; d < rank; ++d) {
    if (extent[d] < 0 || srcOffset[d] < 0 || dstOffset[d] < 0 ||
        srcOffset[d] + extent[d] > srcShape[d] ||
        dstOffset[d] + extent[d] > dstShape[d])
      throw RuntimeError("copyBox: box " + shapeToString(extent) + " at " +
                         shapeToString(srcOffset) + " in " +
                         shapeToString(srcShape) + " -> at " +
                         shapeToString(dstOffset) + " in " +
                         shapeToString(dstShape) + " does not fit");
  }
  if (shapeNumel(extent) == 0)
    return;
  const auto *srcBytes = static_cast<const char *>(src);
  auto *dstBytes = static_cast<char *>(dst);
  if (rank == 0) {
    std::memcpy(dstBytes, srcBytes, elementSize);
    return;
  }
  std::vector<int64_t> srcStrides = rowMajorStrides(srcShape);
  std::vector<int64_t> dstStrides = rowMajorStrides(dstShape);
  // Merge the innermost dims into one contiguous run when possible.
  size_t inner = rank - 1;
  int64_t runElements = extent[inner];
  while (inner > 0 && extent[inner] == srcShape[inner] &&
         extent[inner] == dstShape[inner]) {
    --inner;
    runElements *= extent[inner];
  }
  size_t runBytes = static_cast<size_t>(runElements) * elementSize;
  // Odometer over dims [0, inner).
  std::vector<int64_t> index(inner, 0);
  while (true) {
    int64_t srcElem = 0, dstElem = 0;
    for (size_t d = 0; d < inner; ++d) {
      srcElem += (srcOffset[d] + index[d]) * srcStrides[d];
      dstElem += (dstOffset[d] + index[d]) * dstStrides[d];
    }
    srcElem += srcOffset[inner] * srcStrides[inner];
    dstElem += dstOffset[inner] * dstStrides[inner];
    std::memcpy(dstBytes + dstElem * elementSize,
                srcBytes + srcElem * elementSize, runBytes);
    size_t d = inner;
    while (d > 0) {
      --d;
      if (++index[d] < extent[d])
        break;
      index[d] = 0;
      if (d == 0)
        return;
    }
    if (inner == 0)
      return;
  }
}

// The reduction as at most three dims after merging neighbours that are
// both reduced or both kept: [outer kept, reduced, inner kept] (a missing
// part has extent 1). False when the dims alternate more often.
bool collapseReduction(const Shape &shape, const std::vector<bool> &mask,
                       int64_t &outer, int64_t &reduced, int64_t &inner) {
  std::vector<std::pair<bool, int64_t>> runs; // (reduced?, extent)
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    if (!runs.empty() && runs.back().first == mask[d])
      runs.back().second *= shape[d];
    else
      runs.push_back({mask[d], shape[d]});
  }
  outer = reduced = inner = 1;
  size_t i = 0;
  if (i < runs.size() && !runs[i].first)
    outer = runs[i++].second;
  if (i < runs.size() && runs[i].first)
    reduced = runs[i++].second;
  if (i < runs.size() && !runs[i].first)
    inner = runs[i++].second;
  return i == runs.size();
}

} // namespace dtorch::rt
