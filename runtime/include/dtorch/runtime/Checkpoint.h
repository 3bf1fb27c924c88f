//===- Checkpoint.h - checkpoint metadata, shard regions, shard I/O -*- C++
//-*-===//
//
// The MLIR-free half of dtorch.distributed.checkpoint
// (docs/guide/checkpoints.md):
//
// - the metadata file ("metadata.json": wire::CheckpointMetadata in
//   protobuf's JSON mapping), written by writeCheckpointMetadata and read
//   back, strictly validated, by readCheckpointMetadata (the fuzzed entry
//   point: every size, count, offset and name is checked before use);
// - the box arithmetic that maps a rank's new shard onto the saved chunks
//   (intersectBoxes, planChunkReads);
// - what a rank does with a CheckpointRequest (serveCheckpointRequest):
//   write its pieces into one file and sync it, or read, for each target
//   region, exactly the overlapping parts of the saved chunks;
// - the atomic replacement of a checkpoint folder (commitCheckpointFolder).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/runtime/Tensor.h"
#include "dtorch_checkpoint.pb.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtorch::rt {

class RankState;

/// The version of the metadata format this build writes and reads.
constexpr uint32_t kCheckpointFormatVersion = 1;
/// The metadata file's name inside a checkpoint folder.
constexpr const char *kCheckpointMetadataFile = "metadata.json";

/// A metadata file or a data file that is missing, truncated, corrupt or
/// inconsistent.
class CheckpointError : public RuntimeError {
public:
  using RuntimeError::RuntimeError;
};

/// Limits of readCheckpointMetadata (a metadata file beyond them is refused
/// before anything is allocated for it).
struct CheckpointLimits {
  size_t maxMetadataBytes = size_t(1) << 30;
  size_t maxTensors = 1 << 20;
  size_t maxChunksPerTensor = 1 << 16;
  int64_t maxRank = 16;
  size_t maxNameBytes = 4096;
};

/// Parses and validates a metadata file: format version, unique non-empty
/// keys, valid dtypes, non-negative shapes whose byte size fits in int64,
/// chunks inside their tensor with the byte size of their box, plain file
/// names (no '/', not "." or ".."), no byte range that overflows, chunks of
/// a tensor pairwise disjoint and covering it. Throws CheckpointError
/// naming the key and what is wrong.
::dtorch::wire::CheckpointMetadata
readCheckpointMetadata(std::string_view bytes,
                       const CheckpointLimits &limits = {});

/// The metadata as the JSON text of the file (validated first, as read).
std::string
writeCheckpointMetadata(const ::dtorch::wire::CheckpointMetadata &metadata);

/// Whether `name` may name a data file inside a checkpoint folder.
bool isPlainFileName(std::string_view name);

/// The CRC-32 (zlib's, as Python's zlib.crc32) of `size` bytes, continuing
/// from `crc` (0 to start).
uint64_t checksumBytes(const void *data, size_t size, uint64_t crc = 0);

/// A box of a global tensor: [offsets, offsets + sizes).
struct Box {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  int64_t volume() const;
};

/// The intersection of two boxes of the same rank; `found` is false when it
/// is empty (some extent is zero), and then `box` is unspecified.
struct Intersection {
  bool found = false;
  Box box;
};
Intersection intersectBoxes(const Box &a, const Box &b);

/// One copy of a region read: the part `box` (global coordinates) of the
/// region comes from source chunk `source`.
struct ChunkRead {
  size_t source;
  Box box;
};
/// The parts of `region` each of `chunks` supplies, in chunk order. Throws
/// CheckpointError when the chunks overlapping the region do not cover it
/// exactly (a gap, or more elements than the region has: overlapping
/// chunks).
std::vector<ChunkRead> planChunkReads(const Box &region,
                                      const std::vector<Box> &chunks);

/// Handles `request` on `state`'s rank (the worker's rank thread or the
/// in-process backend's): WRITE appends the handles' tensors to one file,
/// syncs it and reports each one's byte range and checksum; READ puts a
/// tensor under each read's handle, or poisons them all and reports why.
/// Never throws: failures are in the reply (ok = false).
::dtorch::wire::CheckpointReply
serveCheckpointRequest(RankState &state,
                       const ::dtorch::wire::CheckpointRequest &request);

/// Writes `bytes` to `path` (created or truncated) and syncs the file.
void writeFileSynced(const std::string &path, std::string_view bytes);
/// Syncs a folder (after files were created or renamed in it).
void syncFolder(const std::string &path);

/// Moves the complete checkpoint folder `staging` to `target`, atomically:
/// when `target` exists the two are exchanged (renameat2 RENAME_EXCHANGE),
/// so at every instant `target` is either the old or the new checkpoint;
/// the parent folder is synced. Returns the path that now holds the old
/// checkpoint (`staging`), for the caller to delete, or "" when there was
/// none. On a file system without exchange, `target` is first renamed to
/// `staging + ".old"` (returned): a crash between the two renames leaves
/// the old checkpoint there.
std::string commitCheckpointFolder(const std::string &staging,
                                   const std::string &target);

} // namespace dtorch::rt
