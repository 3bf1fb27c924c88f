//===- Layout.cpp - placements, meshes and per-rank layout math ----------===//
#include "dtorch/Layout.h"

#include <sstream>

namespace dtorch {

const char *reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return "sum";
  case ReduceOp::Avg:
    return "avg";
  case ReduceOp::Max:
    return "max";
  case ReduceOp::Min:
    return "min";
  }
  return "?";
}

std::optional<ReduceOp> parseReduceOp(const std::string &name) {
  for (ReduceOp op :
       {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min})
    if (name == reduceOpName(op))
      return op;
  return std::nullopt;
}

bool Placement::operator==(const Placement &o) const {
  if (kind != o.kind)
    return false;
  if (kind == Kind::Shard)
    return dim == o.dim;
  if (kind == Kind::Partial)
    return op == o.op;
  return true;
}

std::string Placement::str() const {
  switch (kind) {
  case Kind::Replicate:
    return "R";
  case Kind::Shard:
    return "S(" + std::to_string(dim) + ")";
  case Kind::Partial:
    return std::string("P(") + reduceOpName(op) + ")";
  }
  return "?";
}

std::string placementsStr(const Placements &ps) {
  std::string s = "[";
  for (size_t i = 0; i < ps.size(); ++i)
    s += (i ? ", " : "") + ps[i].str();
  return s + "]";
}

int64_t chunkSize(int64_t size, int64_t parts, int64_t index) {
  int64_t full = (size + parts - 1) / parts;
  int64_t begin = std::min(size, full * index);
  int64_t end = std::min(size, full * (index + 1));
  return end - begin;
}

int64_t chunkOffset(int64_t size, int64_t parts, int64_t index) {
  int64_t full = (size + parts - 1) / parts;
  return std::min(size, full * index);
}

std::vector<int64_t> chunkSizes(int64_t size, int64_t parts) {
  std::vector<int64_t> out(parts);
  for (int64_t i = 0; i < parts; ++i)
    out[i] = chunkSize(size, parts, i);
  return out;
}

int64_t meshSize(const std::vector<int64_t> &meshShape) {
  int64_t n = 1;
  for (int64_t s : meshShape)
    n *= s;
  return n;
}

std::vector<int64_t> meshCoords(const std::vector<int64_t> &meshShape,
                                int64_t linear) {
  std::vector<int64_t> c(meshShape.size());
  for (int64_t i = (int64_t)meshShape.size() - 1; i >= 0; --i) {
    c[i] = linear % meshShape[i];
    linear /= meshShape[i];
  }
  return c;
}

int64_t meshLinear(const std::vector<int64_t> &meshShape,
                   const std::vector<int64_t> &coords) {
  int64_t l = 0;
  for (size_t i = 0; i < meshShape.size(); ++i)
    l = l * meshShape[i] + coords[i];
  return l;
}

std::vector<int64_t> axisGroup(const std::vector<int64_t> &meshShape,
                               const std::vector<int64_t> &coords,
                               int64_t axis) {
  std::vector<int64_t> group;
  std::vector<int64_t> c = coords;
  for (int64_t k = 0; k < meshShape[axis]; ++k) {
    c[axis] = k;
    group.push_back(meshLinear(meshShape, c));
  }
  return group;
}

LocalBox localBox(const std::vector<int64_t> &globalShape,
                  const std::vector<int64_t> &meshShape,
                  const Placements &placements,
                  const std::vector<int64_t> &coords) {
  LocalBox box{std::vector<int64_t>(globalShape.size(), 0), globalShape};
  for (size_t axis = 0; axis < placements.size(); ++axis) {
    const Placement &p = placements[axis];
    if (!p.isShard())
      continue;
    int64_t d = p.dim;
    int64_t n = meshShape[axis];
    box.offset[d] += chunkOffset(box.shape[d], n, coords[axis]);
    box.shape[d] = chunkSize(box.shape[d], n, coords[axis]);
  }
  return box;
}

int64_t parentExtent(const std::vector<int64_t> &globalShape,
                     const std::vector<int64_t> &meshShape,
                     const Placements &placements,
                     const std::vector<int64_t> &coords, int64_t axis,
                     int64_t dim) {
  int64_t extent = globalShape[dim];
  for (int64_t a = 0; a < axis; ++a)
    if (placements[a].isShard(dim))
      extent = chunkSize(extent, meshShape[a], coords[a]);
  return extent;
}

std::string validatePlacements(int64_t tensorRank, int64_t meshRank,
                               const Placements &placements) {
  // The stream only on an error: this runs for every op that declares its
  // result's placements, and building a stream costs more than the checks.
  if ((int64_t)placements.size() != meshRank) {
    std::ostringstream os;
    os << "expected " << meshRank << " placements (one per mesh dim), got "
       << placements.size();
    return os.str();
  }
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement &p = placements[i];
    if (p.isShard() && (p.dim < 0 || p.dim >= tensorRank)) {
      std::ostringstream os;
      os << "placement " << i << " is Shard(" << p.dim
         << ") but the tensor has rank " << tensorRank;
      return os.str();
    }
  }
  return "";
}

} // namespace dtorch
