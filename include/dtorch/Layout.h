//===- Layout.h - placements, meshes and per-rank layout math -----*- C++
//-*-===//
//
// The MLIR-free core of DTorch's DTensor semantics, shared by the dialect's
// verifiers, the passes, the client core and the tests:
//  - Placement: Shard(d), Replicate, Partial(op), one per mesh dim;
//  - how a global tensor is split into per-rank local pieces (torch.chunk
//    semantics: pieces of ceil(n/k) rows, the trailing ones shorter or empty),
//    applied in mesh-dim order when several mesh dims shard one tensor dim;
//  - mesh coordinates and the rank groups along a mesh axis.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_LAYOUT_H
#define DTORCH_LAYOUT_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtorch {

enum class ReduceOp : uint8_t { Sum, Avg, Max, Min };
const char *reduceOpName(ReduceOp op);
std::optional<ReduceOp> parseReduceOp(const std::string &name);

struct Placement {
  enum class Kind : uint8_t { Replicate, Shard, Partial };
  Kind kind = Kind::Replicate;
  int64_t dim = 0;             // for Shard
  ReduceOp op = ReduceOp::Sum; // for Partial

  static Placement replicate() { return {}; }
  static Placement shard(int64_t d) { return {Kind::Shard, d, ReduceOp::Sum}; }
  static Placement partial(ReduceOp o = ReduceOp::Sum) {
    return {Kind::Partial, 0, o};
  }
  bool isReplicate() const { return kind == Kind::Replicate; }
  bool isShard() const { return kind == Kind::Shard; }
  bool isShard(int64_t d) const { return isShard() && dim == d; }
  bool isPartial() const { return kind == Kind::Partial; }
  bool operator==(const Placement &o) const;
  bool operator!=(const Placement &o) const { return !(*this == o); }
  /// "S(0)", "R", "P(sum)".
  std::string str() const;
};
using Placements = std::vector<Placement>;
std::string placementsStr(const Placements &ps);

/// Extent of piece `index` when `size` elements are split into `parts`
/// (torch.chunk: ceil-sized pieces, trailing pieces shorter or empty).
int64_t chunkSize(int64_t size, int64_t parts, int64_t index);
int64_t chunkOffset(int64_t size, int64_t parts, int64_t index);
std::vector<int64_t> chunkSizes(int64_t size, int64_t parts);

/// Row-major coordinates of `linear` in `meshShape` and back.
std::vector<int64_t> meshCoords(const std::vector<int64_t> &meshShape,
                                int64_t linear);
int64_t meshLinear(const std::vector<int64_t> &meshShape,
                   const std::vector<int64_t> &coords);
int64_t meshSize(const std::vector<int64_t> &meshShape);

/// Mesh-local indices (0..size-1) of the ranks that share all coordinates of
/// `coords` except along `axis`, in axis order.
std::vector<int64_t> axisGroup(const std::vector<int64_t> &meshShape,
                               const std::vector<int64_t> &coords,
                               int64_t axis);

/// The box [offset, offset+shape) of the global tensor that the rank at mesh
/// coordinates `coords` holds (Partial/Replicate keep the full extent).
struct LocalBox {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
};
LocalBox localBox(const std::vector<int64_t> &globalShape,
                  const std::vector<int64_t> &meshShape,
                  const Placements &placements,
                  const std::vector<int64_t> &coords);

/// Extent along tensor dim `dim` of the piece that mesh axis `axis` splits,
/// i.e. after the splits of dim by earlier mesh axes (the "parent piece").
int64_t parentExtent(const std::vector<int64_t> &globalShape,
                     const std::vector<int64_t> &meshShape,
                     const Placements &placements,
                     const std::vector<int64_t> &coords, int64_t axis,
                     int64_t dim);

/// Checks placements against a tensor rank and mesh rank; returns an error
/// message, or an empty string when valid.
std::string validatePlacements(int64_t tensorRank, int64_t meshRank,
                               const Placements &placements);

} // namespace dtorch

#endif // DTORCH_LAYOUT_H
