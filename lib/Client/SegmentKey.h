//===- SegmentKey.h - the structural key of a segment -------------*- C++
//-*-===//
//
// A segment's structure is everything that decides its compiled program:
// each node's op, attributes (a random node's seed excepted: seeds are run
// parameters), shape, dtype, placements, scalar operand and operands as
// positions inside the segment (a node index or an argument index), the
// arguments' metadata and which nodes are results. The Session builds the
// hash of it while recording (hashNode, hashArgument, hashResults: a cut
// costs nothing more); the controller keys its cache by that hash and the
// mesh, and compares structures on a hit (sameStructure) to rule out a
// collision. structureBytes gives the same content as a canonical byte
// string, what the on-disk cache stores and compares.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/Client/Session.h"

#include <cstdint>
#include <string>

namespace dtorch::client {

/// The operand position of the scalar slot of a node (a Python number).
constexpr int32_t kScalarOperand = INT32_MIN;

/// Folds `value` into the running hash `h` (order-sensitive).
inline uint64_t mixHash(uint64_t h, uint64_t value) {
  h = ((h << 23) | (h >> 41)) ^ value;
  return h * 0x9E3779B97F4A7C15ULL;
}
uint64_t hashString(const std::string &text, uint64_t h = 0);

/// The running hash after appending node `n` (its `operands` filled).
uint64_t hashNode(uint64_t h, const Node &n);
/// ... after appending an argument with this metadata.
uint64_t hashArgument(uint64_t h, const TensorMeta &meta);
/// ... after the cut fixed the result nodes.
uint64_t hashResults(uint64_t h, const std::vector<int32_t> &resultNodes);

/// A fingerprint of a mesh's content (shape, names, ranks, device).
uint64_t meshHash(const Mesh &mesh);
bool sameMesh(const Mesh &a, const Mesh &b);

/// Whether two segments compile to the same program (on the same mesh).
bool sameStructure(const Segment &a, const Segment &b);

/// The structure and the mesh as a canonical byte string.
std::string structureBytes(const Segment &segment, const Mesh &mesh);

} // namespace dtorch::client
