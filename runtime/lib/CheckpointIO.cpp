//===- CheckpointIO.cpp - a rank writes and reads its checkpoint shards ---===//
//
// Runs on a rank's own thread (the worker's rank loop, or the in-process
// backend's rank thread), queued behind the work sent before it, so a save
// sees every run before it and a loaded tensor exists before any later run.
//
//===----------------------------------------------------------------------===//

#include "dtorch/runtime/Checkpoint.h"
#include "dtorch/runtime/RankState.h"
#include "dtorch/runtime/Shape.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <memory>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace dtorch::rt {

namespace wire = ::dtorch::wire;

namespace {

std::string systemError(const std::string &what, const std::string &path) {
  return what + " " + path + ": " + std::strerror(errno);
}

/// An open file descriptor, closed on destruction.
class FileDescriptor {
public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  FileDescriptor(const FileDescriptor &) = delete;
  FileDescriptor &operator=(const FileDescriptor &) = delete;
  int get() const { return fd_; }
  /// Closes now, reporting the error close() gives (delayed write errors).
  void close(const std::string &path) {
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0)
      throw CheckpointError(systemError("cannot close", path));
  }

private:
  int fd_;
};

void writeAll(int fd, const void *data, size_t size, const std::string &path) {
  const char *p = static_cast<const char *>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      throw CheckpointError(systemError("cannot write", path));
    p += n;
    size -= static_cast<size_t>(n);
  }
}

/// A data file mapped read-only for the duration of one request.
class MappedFile {
public:
  explicit MappedFile(const std::string &path) : path_(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      throw CheckpointError(systemError("cannot open checkpoint file", path));
    FileDescriptor owner(fd);
    struct stat st;
    if (::fstat(fd, &st) != 0)
      throw CheckpointError(systemError("cannot stat", path));
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ == 0)
      return;
    void *p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED)
      throw CheckpointError(systemError("cannot map", path));
    data_ = static_cast<const char *>(p);
  }
  ~MappedFile() {
    if (data_)
      ::munmap(const_cast<char *>(data_), size_);
  }
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;

  /// The bytes [offset, offset + size), checked to lie inside the file.
  const char *range(uint64_t offset, uint64_t size) const {
    if (offset > size_ || size > size_ - offset)
      throw CheckpointError("checkpoint file " + path_ +
                            " is truncated: " + std::to_string(size_) +
                            " bytes, a chunk needs " + std::to_string(offset) +
                            " + " + std::to_string(size));
    return data_ + offset;
  }

private:
  std::string path_;
  const char *data_ = nullptr;
  uint64_t size_ = 0;
};

Box boxOf(const google::protobuf::RepeatedField<int64_t> &offsets,
          const google::protobuf::RepeatedField<int64_t> &sizes) {
  return {std::vector<int64_t>(offsets.begin(), offsets.end()),
          std::vector<int64_t>(sizes.begin(), sizes.end())};
}

std::vector<int64_t> minus(const std::vector<int64_t> &a,
                           const std::vector<int64_t> &b) {
  std::vector<int64_t> out(a.size());
  for (size_t d = 0; d < a.size(); ++d)
    out[d] = a[d] - b[d];
  return out;
}

std::string joinPath(const std::string &folder, const std::string &name) {
  if (!isPlainFileName(name))
    throw CheckpointError("invalid checkpoint file name '" + name + "'");
  return folder + "/" + name;
}

void checkFolder(const std::string &folder) {
  if (folder.empty() || folder[0] != '/')
    throw CheckpointError("checkpoint folder '" + folder +
                          "' is not an absolute path");
}

wire::CheckpointReply writeShards(RankState &state,
                                  const wire::CheckpointRequest &request) {
  checkFolder(request.directory());
  const std::string path = joinPath(request.directory(), request.file());
  wire::CheckpointReply reply;
  // Every value first: a poisoned one fails the save before any file.
  // (in host memory: a GPU rank's values are copied out first).
  std::vector<Tensor> values;
  for (uint64_t handle : request.write_handles())
    values.push_back(state.fetchToHost(handle));
  FileDescriptor fd(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0)
    throw CheckpointError(systemError("cannot create checkpoint file", path));
  uint64_t offset = 0;
  for (const Tensor &value : values) {
    wire::CheckpointWritten *written = reply.add_written();
    written->set_byte_offset(offset);
    written->set_byte_size(value.nbytes());
    written->set_checksum(checksumBytes(value.data(), value.nbytes()));
    writeAll(fd.get(), value.data(), value.nbytes(), path);
    offset += value.nbytes();
  }
  if (::fsync(fd.get()) != 0)
    throw CheckpointError(systemError("cannot sync", path));
  fd.close(path);
  return reply;
}

Tensor readRegion(const wire::CheckpointRead &read, const std::string &folder,
                  std::map<std::string, std::unique_ptr<MappedFile>> &files) {
  if (read.dtype() == wire::DTYPE_INVALID || !wire::DType_IsValid(read.dtype()))
    throw CheckpointError("checkpoint read of an invalid dtype");
  if (read.offsets_size() != read.sizes_size())
    throw CheckpointError("checkpoint read: offsets and sizes differ in rank");
  Box region = boxOf(read.offsets(), read.sizes());
  for (int64_t s : region.sizes)
    if (s < 0)
      throw CheckpointError("checkpoint read: negative extent");
  Tensor out = Tensor::empty(read.dtype(), region.sizes);
  const size_t elementSize = dtypeSize(read.dtype());
  std::vector<Box> chunks;
  for (const wire::CheckpointChunk &chunk : read.sources()) {
    if (chunk.offsets_size() != chunk.sizes_size())
      throw CheckpointError("checkpoint chunk: offsets and sizes differ");
    chunks.push_back(boxOf(chunk.offsets(), chunk.sizes()));
  }
  for (const ChunkRead &part : planChunkReads(region, chunks)) {
    const wire::CheckpointChunk &chunk = read.sources(part.source);
    const Box &chunkBox = chunks[part.source];
    int64_t chunkVolume = chunkBox.volume();
    if (chunkVolume < 0 ||
        chunk.byte_size() != static_cast<uint64_t>(chunkVolume) * elementSize)
      throw CheckpointError("checkpoint chunk of " + chunk.file() +
                            " has the wrong byte size");
    std::unique_ptr<MappedFile> &file = files[chunk.file()];
    if (!file)
      file = std::make_unique<MappedFile>(joinPath(folder, chunk.file()));
    const char *bytes = file->range(chunk.byte_offset(), chunk.byte_size());
    // A read of a whole chunk checks its checksum; a part of one is only
    // checked to lie inside the file (reading a region must not read the
    // rest of the chunk).
    if (part.box.sizes == chunkBox.sizes &&
        checksumBytes(bytes, chunk.byte_size()) != chunk.checksum())
      throw CheckpointError("checkpoint file " + chunk.file() +
                            " is corrupt: checksum mismatch at byte " +
                            std::to_string(chunk.byte_offset()));
    copyBox(bytes, chunkBox.sizes, minus(part.box.offsets, chunkBox.offsets),
            out.data(), region.sizes, minus(part.box.offsets, region.offsets),
            part.box.sizes, elementSize);
  }
  return out;
}

wire::CheckpointReply readShards(RankState &state,
                                 const wire::CheckpointRequest &request) {
  checkFolder(request.directory());
  std::map<std::string, std::unique_ptr<MappedFile>> files;
  std::vector<Tensor> values;
  for (const wire::CheckpointRead &read : request.reads())
    values.push_back(readRegion(read, request.directory(), files));
  for (int i = 0; i < request.reads_size(); ++i)
    state.put(request.reads(i).handle(), std::move(values[i]));
  return {};
}

} // namespace

wire::CheckpointReply
serveCheckpointRequest(RankState &state,
                       const wire::CheckpointRequest &request) {
  wire::CheckpointReply reply;
  try {
    switch (request.action()) {
    case wire::CheckpointRequest::WRITE:
      reply = writeShards(state, request);
      break;
    case wire::CheckpointRequest::READ:
      reply = readShards(state, request);
      break;
    default:
      throw CheckpointError("checkpoint request without an action");
    }
    reply.set_ok(true);
  } catch (const std::exception &e) {
    reply.Clear();
    reply.set_ok(false);
    reply.set_error(e.what());
    for (const wire::CheckpointRead &read : request.reads())
      state.poison(read.handle(),
                   std::string("checkpoint load failed: ") + e.what());
  }
  reply.set_rank(request.rank());
  return reply;
}

void writeFileSynced(const std::string &path, std::string_view bytes) {
  FileDescriptor fd(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0)
    throw CheckpointError(systemError("cannot create", path));
  writeAll(fd.get(), bytes.data(), bytes.size(), path);
  if (::fsync(fd.get()) != 0)
    throw CheckpointError(systemError("cannot sync", path));
  fd.close(path);
}

void syncFolder(const std::string &path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0)
    throw CheckpointError(systemError("cannot open folder", path));
  if (::fsync(fd.get()) != 0 && errno != EINVAL)
    throw CheckpointError(systemError("cannot sync folder", path));
}

namespace {

std::string parentOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace

std::string commitCheckpointFolder(const std::string &staging,
                                   const std::string &target) {
  syncFolder(staging);
  struct stat st;
  std::string old;
  if (::lstat(target.c_str(), &st) != 0) {
    if (errno != ENOENT)
      throw CheckpointError(systemError("cannot stat", target));
    if (::rename(staging.c_str(), target.c_str()) != 0)
      throw CheckpointError(systemError("cannot rename into", target));
  } else {
    if (!S_ISDIR(st.st_mode))
      throw CheckpointError("checkpoint path " + target +
                            " exists and is not a folder");
#ifdef SYS_renameat2
    constexpr unsigned kRenameExchange = 2; // RENAME_EXCHANGE
    if (::syscall(SYS_renameat2, AT_FDCWD, staging.c_str(), AT_FDCWD,
                  target.c_str(), kRenameExchange) == 0) {
      old = staging;
    } else if (errno != EINVAL && errno != ENOSYS) {
      throw CheckpointError(systemError("cannot exchange", target));
    }
#endif
    if (old.empty()) {
      old = staging + ".old";
      if (::rename(target.c_str(), old.c_str()) != 0)
        throw CheckpointError(systemError("cannot move aside", target));
      if (::rename(staging.c_str(), target.c_str()) != 0)
        throw CheckpointError(systemError("cannot rename into", target));
    }
  }
  syncFolder(parentOf(target));
  return old;
}

} // namespace dtorch::rt
