//===- CheckpointMetadata.cpp - the checkpoint metadata file and boxes ----===//
//
// readCheckpointMetadata is the entry point the metadata fuzzer targets: it
// must refuse every malformed input with CheckpointError, and never crash,
// hang or allocate beyond the input's own size.
//
//===----------------------------------------------------------------------===//

#include "dtorch/runtime/Checkpoint.h"

#include <google/protobuf/util/json_util.h>
#include <zlib.h>

#include <algorithm>
#include <limits>
#include <set>

namespace dtorch::rt {

namespace wire = ::dtorch::wire;

namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

/// a * b when it fits in int64 (both non-negative), else -1.
int64_t checkedProduct(int64_t a, int64_t b) {
  if (a == 0 || b == 0)
    return 0;
  if (a > kInt64Max / b)
    return -1;
  return a * b;
}

std::string quoted(const std::string &key) { return "'" + key + "'"; }

void validateTensor(const wire::CheckpointTensor &t,
                    const CheckpointLimits &limits) {
  const std::string name = "checkpoint tensor " + quoted(t.key());
  if (t.dtype() == wire::DTYPE_INVALID || !wire::DType_IsValid(t.dtype()))
    throw CheckpointError(name + ": invalid dtype " +
                          std::to_string(static_cast<int>(t.dtype())));
  if (t.shape_size() > limits.maxRank)
    throw CheckpointError(name + ": rank " + std::to_string(t.shape_size()) +
                          " exceeds " + std::to_string(limits.maxRank));
  const int64_t elementSize = static_cast<int64_t>(dtypeSize(t.dtype()));
  int64_t numel = 1;
  for (int64_t extent : t.shape()) {
    if (extent < 0)
      throw CheckpointError(name + ": negative extent in its shape");
    numel = checkedProduct(numel, extent);
    if (numel < 0)
      throw CheckpointError(name + ": its shape overflows");
  }
  if (checkedProduct(numel, elementSize) < 0)
    throw CheckpointError(name + ": its byte size overflows");
  if (static_cast<size_t>(t.chunks_size()) > limits.maxChunksPerTensor)
    throw CheckpointError(name + ": too many chunks");

  std::vector<Box> boxes;
  boxes.reserve(static_cast<size_t>(t.chunks_size()));
  int64_t covered = 0;
  for (int c = 0; c < t.chunks_size(); ++c) {
    const wire::CheckpointChunk &chunk = t.chunks(c);
    const std::string where = name + " chunk " + std::to_string(c);
    if (chunk.offsets_size() != t.shape_size() ||
        chunk.sizes_size() != t.shape_size())
      throw CheckpointError(where + ": offsets/sizes do not match the rank " +
                            std::to_string(t.shape_size()));
    Box box;
    int64_t volume = 1;
    for (int d = 0; d < t.shape_size(); ++d) {
      int64_t offset = chunk.offsets(d), size = chunk.sizes(d);
      if (offset < 0 || size < 0 || offset > t.shape(d) ||
          size > t.shape(d) - offset)
        throw CheckpointError(where + ": box outside the tensor along dim " +
                              std::to_string(d));
      volume = checkedProduct(volume, size);
      box.offsets.push_back(offset);
      box.sizes.push_back(size);
    }
    if (volume == 0)
      throw CheckpointError(where + ": empty chunk");
    if (chunk.byte_size() != static_cast<uint64_t>(volume * elementSize))
      throw CheckpointError(where + ": byte size " +
                            std::to_string(chunk.byte_size()) +
                            " does not match its box (" +
                            std::to_string(volume * elementSize) + ")");
    if (chunk.byte_offset() >
        static_cast<uint64_t>(kInt64Max) - chunk.byte_size())
      throw CheckpointError(where + ": byte range overflows");
    if (chunk.file().size() > limits.maxNameBytes ||
        !isPlainFileName(chunk.file()))
      throw CheckpointError(where + ": invalid file name");
    for (size_t other = 0; other < boxes.size(); ++other)
      if (intersectBoxes(boxes[other], box).found)
        throw CheckpointError(where + " overlaps chunk " +
                              std::to_string(other));
    covered += volume; // disjoint boxes inside the tensor: no overflow
    boxes.push_back(std::move(box));
  }
  if (covered != numel)
    throw CheckpointError(name + ": its chunks cover " +
                          std::to_string(covered) + " of its " +
                          std::to_string(numel) + " elements");
}

void validateMetadata(const wire::CheckpointMetadata &m,
                      const CheckpointLimits &limits) {
  if (m.format_version() != kCheckpointFormatVersion)
    throw CheckpointError("checkpoint format version " +
                          std::to_string(m.format_version()) +
                          " is not supported (this build reads " +
                          std::to_string(kCheckpointFormatVersion) + ")");
  if (static_cast<size_t>(m.tensors_size()) > limits.maxTensors)
    throw CheckpointError("checkpoint metadata lists too many tensors");
  std::set<std::string> keys;
  for (const wire::CheckpointTensor &t : m.tensors()) {
    if (t.key().empty() || t.key().size() > limits.maxNameBytes)
      throw CheckpointError("checkpoint tensor with an empty or too long key");
    if (!keys.insert(t.key()).second)
      throw CheckpointError("checkpoint tensor " + quoted(t.key()) +
                            " is listed twice");
    validateTensor(t, limits);
  }
}

} // namespace

bool isPlainFileName(std::string_view name) {
  if (name.empty() || name == "." || name == "..")
    return false;
  for (char c : name)
    if (c == '/' || c == '\0')
      return false;
  return true;
}

uint64_t checksumBytes(const void *data, size_t size, uint64_t crc) {
  return crc32_z(static_cast<uLong>(crc),
                 static_cast<const Bytef *>(size ? data : nullptr), size);
}

wire::CheckpointMetadata
readCheckpointMetadata(std::string_view bytes, const CheckpointLimits &limits) {
  if (bytes.size() > limits.maxMetadataBytes)
    throw CheckpointError("checkpoint metadata of " +
                          std::to_string(bytes.size()) + " bytes is too large");
  wire::CheckpointMetadata metadata;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(bytes.data(), bytes.size()), &metadata,
      options);
  if (!status.ok())
    throw CheckpointError("checkpoint metadata is not valid: " +
                          std::string(status.message()));
  validateMetadata(metadata, limits);
  return metadata;
}

std::string writeCheckpointMetadata(const wire::CheckpointMetadata &metadata) {
  validateMetadata(metadata, CheckpointLimits{});
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = false; // one line: compact for large meshes
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  auto status =
      google::protobuf::util::MessageToJsonString(metadata, &out, options);
  if (!status.ok())
    throw CheckpointError("cannot print checkpoint metadata: " +
                          std::string(status.message()));
  return out;
}

int64_t Box::volume() const {
  int64_t v = 1;
  for (int64_t s : sizes)
    v *= s;
  return v;
}

Intersection intersectBoxes(const Box &a, const Box &b) {
  Intersection out;
  if (a.offsets.size() != b.offsets.size())
    return out;
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    int64_t hi = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (hi <= lo)
      return out;
    out.box.offsets.push_back(lo);
    out.box.sizes.push_back(hi - lo);
  }
  out.found = true;
  return out;
}

std::vector<ChunkRead> planChunkReads(const Box &region,
                                      const std::vector<Box> &chunks) {
  std::vector<ChunkRead> reads;
  int64_t covered = 0;
  const int64_t want = region.volume();
  if (want == 0)
    return reads;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (chunks[c].offsets.size() != region.offsets.size())
      throw CheckpointError(
          "a saved chunk has rank " + std::to_string(chunks[c].offsets.size()) +
          ", the region " + std::to_string(region.offsets.size()));
    Intersection part = intersectBoxes(region, chunks[c]);
    if (!part.found)
      continue;
    covered += part.box.volume();
    reads.push_back({c, std::move(part.box)});
  }
  if (covered != want)
    throw CheckpointError("the saved chunks cover " + std::to_string(covered) +
                          " of the " + std::to_string(want) +
                          " elements of the region to read");
  return reads;
}

} // namespace dtorch::rt
