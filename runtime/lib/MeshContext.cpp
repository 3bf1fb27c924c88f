#include "dtorch/runtime/MeshContext.h"

#include "dtorch/runtime/ProgramValidator.h"

#include <limits>

namespace dtorch::rt {

namespace wire = ::dtorch::wire;

namespace {

std::string listToString(const std::vector<int64_t> &values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i)
    text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

// torch.chunk: pieces of ceil(size / parts), the trailing ones shorter or
// empty (the same rule as the compiler's dtorch::chunkOffset/chunkSize).
int64_t chunkStart(int64_t size, int64_t parts, int64_t index) {
  int64_t full = (size + parts - 1) / parts;
  return std::min(size, full * index);
}
int64_t chunkExtent(int64_t size, int64_t parts, int64_t index) {
  return chunkStart(size, parts, index + 1) - chunkStart(size, parts, index);
}

void requireAxis(int64_t axis, const std::vector<int64_t> &meshShape) {
  if (axis < 0 || axis >= static_cast<int64_t>(meshShape.size()))
    throw RuntimeError("mesh axis " + std::to_string(axis) +
                       " is out of range for mesh " + listToString(meshShape));
}

wire::Attr resolveMeshValue(const wire::MeshValue &value,
                            const RankContext &context) {
  wire::Attr out;
  switch (value.kind()) {
  case wire::MeshValue::BOX_OFFSET: {
    std::vector<int64_t> shape(value.global_shape().begin(),
                               value.global_shape().end());
    std::vector<int64_t> shards(value.shard_dims().begin(),
                                value.shard_dims().end());
    PieceBox box = pieceBox(shape, context.meshShape(), shards, context.coords);
    if (value.dim() < 0) {
      wire::IntList *ints = out.mutable_ints();
      for (int64_t o : box.offset)
        ints->add_values(o);
    } else {
      out.set_i(box.offset[value.dim()]);
    }
    return out;
  }
  case wire::MeshValue::CHUNK_OFFSET:
    out.set_i(chunkStart(value.extent(), context.meshShape()[value.axis()],
                         context.coords[value.axis()]));
    return out;
  case wire::MeshValue::MESH_COORD:
    out.set_i(context.coords[value.axis()]);
    return out;
  default:
    throw RuntimeError("unknown mesh value kind " +
                       std::to_string(static_cast<int>(value.kind())));
  }
}

} // namespace

int64_t meshPositionCount(const std::vector<int64_t> &shape) {
  int64_t size = 1;
  for (int64_t s : shape) {
    if (s < 1)
      throw RuntimeError("mesh " + listToString(shape) +
                         " has an extent below 1");
    if (s > kMaxMeshPositions / size)
      throw RuntimeError("mesh " + listToString(shape) + " has more than " +
                         std::to_string(kMaxMeshPositions) + " positions");
    size *= s;
  }
  return size;
}

std::vector<int64_t> consecutiveMeshRanks(const std::vector<int64_t> &shape,
                                          int64_t firstRank) {
  int64_t size = meshPositionCount(shape);
  if (firstRank < 0 || firstRank > std::numeric_limits<int64_t>::max() - size)
    throw RuntimeError("mesh ranks from " + std::to_string(firstRank) +
                       " are out of range");
  std::vector<int64_t> ranks(static_cast<size_t>(size));
  for (int64_t p = 0; p < size; ++p)
    ranks[p] = firstRank + p;
  return ranks;
}

MeshRanks::MeshRanks(std::vector<int64_t> shape, std::vector<int64_t> ranks)
    : shape_(std::move(shape)), ranks_(std::move(ranks)) {
  int64_t size = meshPositionCount(shape_);
  if (static_cast<int64_t>(ranks_.size()) != size)
    throw RuntimeError("mesh " + listToString(shape_) + " has " +
                       std::to_string(size) + " positions but " +
                       std::to_string(ranks_.size()) + " ranks were given");
  positions_.reserve(ranks_.size());
  for (size_t p = 0; p < ranks_.size(); ++p)
    if (ranks_[p] < 0 ||
        !positions_.emplace(ranks_[p], static_cast<int64_t>(p)).second)
      throw RuntimeError("mesh rank " + std::to_string(ranks_[p]) +
                         " is negative or repeated");
}

int64_t MeshRanks::positionOf(int64_t rank) const {
  auto it = positions_.find(rank);
  return it == positions_.end() ? -1 : it->second;
}

RankContext RankContext::of(std::shared_ptr<const MeshRanks> mesh,
                            int64_t rank) {
  int64_t position = mesh->positionOf(rank);
  if (position < 0)
    throw RuntimeError("rank " + std::to_string(rank) + " is not in the mesh");
  RankContext context;
  context.coords = positionCoords(mesh->shape(), position);
  context.mesh = std::move(mesh);
  context.rank = rank;
  return context;
}

RankContext RankContext::of(std::vector<int64_t> meshShape,
                            std::vector<int64_t> meshRanks, int64_t rank) {
  return of(std::make_shared<const MeshRanks>(std::move(meshShape),
                                              std::move(meshRanks)),
            rank);
}

std::vector<int64_t> RankContext::axisGroup(int64_t axis) const {
  const std::vector<int64_t> &shape = meshShape();
  requireAxis(axis, shape);
  // Position of coords with coordinate `axis` set to k: base + k * stride.
  int64_t stride = 1;
  for (size_t a = axis + 1; a < shape.size(); ++a)
    stride *= shape[a];
  int64_t base = 0;
  for (size_t a = 0; a < shape.size(); ++a)
    base = base * shape[a] + (static_cast<int64_t>(a) == axis ? 0 : coords[a]);
  std::vector<int64_t> group;
  for (int64_t k = 0; k < shape[axis]; ++k)
    group.push_back(mesh->rankAt(base + k * stride));
  return group;
}

std::vector<int64_t> positionCoords(const std::vector<int64_t> &meshShape,
                                    int64_t linear) {
  std::vector<int64_t> coords(meshShape.size());
  for (size_t a = meshShape.size(); a-- > 0;) {
    coords[a] = linear % meshShape[a];
    linear /= meshShape[a];
  }
  return coords;
}

bool programRunsAt(const wire::Program &program,
                   const std::vector<int64_t> &coords) {
  int axes = static_cast<int>(coords.size());
  for (const wire::MeshBox &box : program.positions()) {
    if (box.lo_size() != axes || box.hi_size() != axes)
      continue;
    bool inside = true;
    for (int a = 0; a < axes && inside; ++a)
      inside = box.lo(a) <= coords[a] && coords[a] < box.hi(a);
    if (inside)
      return true;
  }
  return false;
}

int programIndexAt(const std::vector<const wire::Program *> &programs,
                   const std::vector<int64_t> &coords) {
  for (size_t k = 0; k < programs.size(); ++k)
    if (programRunsAt(*programs[k], coords))
      return static_cast<int>(k);
  return -1;
}

PieceBox pieceBox(const std::vector<int64_t> &globalShape,
                  const std::vector<int64_t> &meshShape,
                  const std::vector<int64_t> &shardDims,
                  const std::vector<int64_t> &coords) {
  PieceBox box{std::vector<int64_t>(globalShape.size(), 0), globalShape};
  for (size_t a = 0; a < shardDims.size(); ++a) {
    int64_t d = shardDims[a];
    if (d < 0)
      continue;
    box.offset[d] += chunkStart(box.shape[d], meshShape[a], coords[a]);
    box.shape[d] = chunkExtent(box.shape[d], meshShape[a], coords[a]);
  }
  return box;
}

void checkClassProgramFor(const wire::Program &program,
                          const RankContext &context) {
  validateMeshProgram(program);
  const std::string prefix = "program '" + program.name() + "': ";
  std::vector<int64_t> shape(program.mesh_shape().begin(),
                             program.mesh_shape().end());
  if (shape != context.meshShape())
    throw RuntimeError(prefix + "it is for mesh " + listToString(shape) +
                       " but rank " + std::to_string(context.rank) +
                       " is on mesh " + listToString(context.meshShape()));
  if (!programRunsAt(program, context.coords))
    throw RuntimeError(prefix + "it does not run at mesh position " +
                       listToString(context.coords) + " (rank " +
                       std::to_string(context.rank) + ")");
}

bool rankIndependent(const wire::Program &program) {
  for (const wire::Instruction &inst : program.instructions()) {
    if (isCollectiveOp(inst.op()))
      return false;
    for (const auto &[name, attr] : inst.attrs())
      if (attr.value_case() == wire::Attr::kMesh || name == "axis" ||
          name == "group")
        return false;
  }
  return true;
}

wire::Program resolveForRank(const wire::Program &program,
                             const RankContext &context) {
  checkClassProgramFor(program, context);
  const std::string prefix = "program '" + program.name() + "': ";
  wire::Program resolved = program;
  for (int i = 0; i < resolved.instructions_size(); ++i) {
    wire::Instruction &inst = *resolved.mutable_instructions(i);
    auto &attrs = *inst.mutable_attrs();
    try {
      for (auto &[name, attr] : attrs)
        if (attr.value_case() == wire::Attr::kMesh)
          attr = resolveMeshValue(attr.mesh(), context);
      if (auto it = attrs.find("axis");
          it != attrs.end() && isCollectiveOp(inst.op())) {
        std::vector<int64_t> group = context.axisGroup(it->second.i());
        attrs.erase(it);
        if (inst.op() == "send" || inst.op() == "recv") {
          // `peer` is a coordinate of the axis: the global rank there.
          wire::Attr &peer = attrs["peer"];
          if (peer.i() < 0 || peer.i() >= static_cast<int64_t>(group.size()))
            throw RuntimeError("peer coordinate " + std::to_string(peer.i()) +
                               " is out of range for an axis of " +
                               std::to_string(group.size()) + " ranks");
          peer.set_i(group[peer.i()]);
          continue;
        }
        wire::IntList *ints = attrs["group"].mutable_ints();
        for (int64_t r : group)
          ints->add_values(r);
      }
    } catch (const RuntimeError &error) {
      throw RuntimeError(prefix + describeInstruction(program, i) + ": " +
                         error.what());
    }
  }
  return resolved;
}

} // namespace dtorch::rt
