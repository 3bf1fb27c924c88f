// Where one rank sits in a mesh, and the resolution of a class program for
// it. A compiled function is one program per local-shape class of its mesh;
// values that differ between the ranks of a class are mesh values
// (wire::MeshValue: the offset of the rank's box, a chunk offset, its
// coordinate) and collectives name a mesh `axis`. A worker turns the class
// program into its rank's program once, when it arrives: mesh values become
// plain `i`/`ints` attributes and each `axis` the `group` of global ranks
// that share every other coordinate. Kernels and communicators never see the
// mesh.
#pragma once

#include "dtorch/runtime/Tensor.h"
#include "dtorch/runtime/WireLimits.h"

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

namespace dtorch::rt {

// The global ranks of a mesh's positions (row-major), checked once per
// upload and shared by the contexts of every rank of the mesh.
class MeshRanks {
public:
  // Throws RuntimeError when an extent is below 1, the ranks do not fill the
  // shape, or a rank is negative or repeated.
  MeshRanks(std::vector<int64_t> shape, std::vector<int64_t> ranks);
  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t rankAt(int64_t position) const { return ranks_[position]; }
  // The position of global rank `rank`; -1 when it is not in the mesh.
  int64_t positionOf(int64_t rank) const;

private:
  std::vector<int64_t> shape_, ranks_;
  std::unordered_map<int64_t, int64_t> positions_;
};

// kMaxMeshPositions (WireLimits.h), the most positions a mesh may have,
// bounds a mesh's size before anything per position is allocated.

// The number of positions of a mesh of `shape`; throws RuntimeError when an
// extent is below 1 or there are more than kMaxMeshPositions.
int64_t meshPositionCount(const std::vector<int64_t> &shape);

// Ranks firstRank, firstRank + 1, ... for every position of `shape` (an
// upload without explicit mesh ranks); throws as meshPositionCount does, and
// when the ranks leave the int64 range or firstRank is negative.
std::vector<int64_t> consecutiveMeshRanks(const std::vector<int64_t> &shape,
                                          int64_t firstRank);

struct RankContext {
  std::shared_ptr<const MeshRanks> mesh;
  std::vector<int64_t> coords; // this rank's position
  int64_t rank = -1;           // this rank's global rank

  // The context of global rank `rank`; throws RuntimeError when the mesh
  // does not contain it.
  static RankContext of(std::shared_ptr<const MeshRanks> mesh, int64_t rank);
  // The same from a shape and its ranks (checked as MeshRanks does).
  static RankContext of(std::vector<int64_t> meshShape,
                        std::vector<int64_t> meshRanks, int64_t rank);

  const std::vector<int64_t> &meshShape() const { return mesh->shape(); }
  // Global ranks of the positions that share every coordinate with this
  // rank except along `axis`, in axis order. Throws on a bad axis.
  std::vector<int64_t> axisGroup(int64_t axis) const;
};

// Row-major coordinates of position `linear` in `meshShape`.
std::vector<int64_t> positionCoords(const std::vector<int64_t> &meshShape,
                                    int64_t linear);

// Whether `coords` lies in one of the program's position boxes.
bool programRunsAt(const ::dtorch::wire::Program &program,
                   const std::vector<int64_t> &coords);

// Index of the first program that runs at `coords`; -1 when none does.
int programIndexAt(const std::vector<const ::dtorch::wire::Program *> &programs,
                   const std::vector<int64_t> &coords);

// The checks resolveForRank makes before it resolves anything: the class
// program is well formed (validateMeshProgram), for the context's mesh and
// runs at its coordinates. Throws RuntimeError.
void checkClassProgramFor(const ::dtorch::wire::Program &program,
                          const RankContext &context);

// Whether a class program resolves to itself for every rank: it names no
// mesh value, mesh axis or group and has no collective.
bool rankIndependent(const ::dtorch::wire::Program &program);

// The program of the rank of `context`: checks the class program
// (validateMeshProgram), that it is for the context's mesh and runs at its
// coordinates, and resolves its mesh values and axes. The result names no
// mesh value or axis; validate it with validateProgram. Throws RuntimeError.
::dtorch::wire::Program resolveForRank(const ::dtorch::wire::Program &program,
                                       const RankContext &context);

// The box offset of a tensor of `globalShape` whose mesh axis a shards
// tensor dim shardDims[a] (-1: none), at `coords` (torch.chunk pieces in
// mesh-axis order), and the box's shape.
struct PieceBox {
  std::vector<int64_t> offset, shape;
};
PieceBox pieceBox(const std::vector<int64_t> &globalShape,
                  const std::vector<int64_t> &meshShape,
                  const std::vector<int64_t> &shardDims,
                  const std::vector<int64_t> &coords);

} // namespace dtorch::rt
