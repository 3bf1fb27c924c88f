//===- CheckpointFiles.h - checkpoint files for the Python package -*- C++
//-*-===//
//
// The client's door to the runtime's checkpoint files
// (dtorch/runtime/Checkpoint.h): the same functions, with the runtime's
// CheckpointError turned into DTorchError, so the Python extension needs
// only client headers. The shard writes and reads are Session::saveShards
// and Session::loadShards.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch_checkpoint.pb.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace dtorch::client {

/// The metadata format version this build writes and reads.
uint32_t checkpointFormatVersion();
/// Parses and strictly validates a metadata file
/// (rt::readCheckpointMetadata); throws DTorchError saying what is wrong.
wire::CheckpointMetadata readCheckpointMetadata(std::string_view bytes);
/// Validates `metadata` and writes it as the JSON file `path`, synced.
void writeCheckpointMetadata(const std::string &path,
                             const wire::CheckpointMetadata &metadata);
/// Writes `bytes` to `path` and syncs the file.
void writeCheckpointFile(const std::string &path, std::string_view bytes);
/// The chunk checksum (CRC-32, as zlib.crc32).
uint64_t checkpointChecksum(std::string_view bytes);
/// rt::commitCheckpointFolder: `staging` replaces `target` atomically;
/// returns the folder now holding the previous checkpoint ("" if none).
std::string commitCheckpointFolder(const std::string &staging,
                                   const std::string &target);

} // namespace dtorch::client
