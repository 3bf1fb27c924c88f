//===- ProgramDiskCache.h - compiled programs kept across processes -*- C++
//-*-===//
//
// One file per compiled segment, named by a hash of the compiler's version
// (compilerVersionKey) and the segment's structural key, holding the
// segment's canonical structure (structureBytes, SegmentKey.h; compared on
// load, so a hash collision never returns another segment's programs) and
// the programs by mesh position, ready to upload. Files are written to a
// temporary name and renamed (readers never see a partial file) and end
// with a checksum: a truncated or corrupt file is ignored (and replaced by
// the next compile). The IR stages and explanation are not stored: the
// controller recompiles them from the structure when asked.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch_program.pb.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtorch::client {

/// Changes whenever the compiler may emit other programs: a hash of the
/// binary holding the compiler and of the DTorch dialect library (this
/// build, by content), of the MLIR and LLVM libraries loaded (by path, size
/// and time) and PROGRAM_FORMAT_VERSION. Computed once per process.
uint64_t compilerVersionKey();

class ProgramDiskCache {
public:
  /// `dir` empty: disabled (every lookup misses, nothing is written).
  explicit ProgramDiskCache(std::string dir) : dir_(std::move(dir)) {}
  bool enabled() const { return !dir_.empty(); }
  const std::string &dir() const { return dir_; }

  /// The programs stored under `key` when the file is intact and its
  /// structure equals `structure`.
  std::optional<std::vector<wire::Program>>
  load(uint64_t key, const std::string &structure) const;
  /// Stores atomically; failures (a read-only disk) are ignored.
  void store(uint64_t key, const std::string &structure,
             const std::vector<wire::Program> &programs) const;
  std::string pathOf(uint64_t key) const;

private:
  std::string dir_;
};

} // namespace dtorch::client
