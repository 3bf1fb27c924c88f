// Shape arithmetic and strided box copies shared by kernels and collectives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtorch::rt {

using Shape = std::vector<int64_t>;

// Product of the extents; throws RuntimeError on a negative extent or overflow.
// A reduction over the dims where `mask` is true, as at most three dims
// after merging neighbours that are both reduced or both kept:
// [outer kept, reduced, inner kept] (a missing part has extent 1; dims of
// extent 1 drop out). False when kept and reduced dims alternate more often.
bool collapseReduction(const Shape &shape, const std::vector<bool> &mask,
                       int64_t &outer, int64_t &reduced, int64_t &inner);

int64_t shapeNumel(const Shape &shape);
// Row-major strides in elements.
std::vector<int64_t> rowMajorStrides(const Shape &shape);
// "[2, 3]".
std::string shapeToString(const Shape &shape);
// Maps a possibly negative dim into [0, rank); throws RuntimeError otherwise.
int64_t normalizeDim(int64_t dim, int64_t rank, const char *what);

// Copies the box of extent `extent` starting at `srcOffset` in a dense
// row-major `srcShape` array to the box starting at `dstOffset` in a dense
// `dstShape` array. All four vectors have the same rank; the caller
// guarantees the boxes fit (checked, throws RuntimeError otherwise).
void copyBox(const void *src, const Shape &srcShape, const Shape &srcOffset,
             void *dst, const Shape &dstShape, const Shape &dstOffset,
             const Shape &extent, size_t elementSize);

// Offsets of piece j when a dim of extent sum(sizes) is cut into `sizes`.
std::vector<int64_t> exclusivePrefixSums(const std::vector<int64_t> &sizes);

} // namespace dtorch::rt
