#include "dtorch/runtime/SharedHostArena.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fcntl.h>
#include <mutex>
#include <pthread.h>
#include <string>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dtorch::rt {

namespace {

constexpr size_t kPageBytes = 4096;

struct Arena {
  std::mutex mutex; // guards everything below but `on`
  std::atomic<bool> on{false};
  std::atomic<bool> anyInherited{false};
  int fd = -1;
  char *base = nullptr;
  size_t bytes = 0;
  size_t used = 0;
  std::unordered_map<size_t, std::vector<char *>> released; // by size
  std::vector<std::pair<char *, size_t>> inherited;         // from parents
};

Arena &arena() {
  static Arena *instance = new Arena(); // never destroyed
  return *instance;
}

// fork: the child must not hand out blocks it shares with the parent.
void beforeFork() { arena().mutex.lock(); }
void afterForkInParent() { arena().mutex.unlock(); }
void afterForkInChild() {
  Arena &a = arena();
  if (a.base) {
    a.inherited.emplace_back(a.base, a.bytes);
    a.anyInherited.store(true);
  }
  if (a.fd >= 0)
    close(a.fd);
  a.fd = -1;
  a.base = nullptr;
  a.bytes = a.used = 0;
  a.released.clear();
  a.on.store(false);
  a.mutex.unlock();
}

size_t defaultReserve() {
  long pages = sysconf(_SC_PHYS_PAGES);
  size_t ram =
      pages > 0 ? static_cast<size_t>(pages) * kPageBytes : size_t(16) << 30;
  return std::clamp(ram, size_t(1) << 30, size_t(1) << 40);
}

} // namespace

bool enableSharedHostArena(size_t reserveBytes) {
  Arena &a = arena();
  std::lock_guard<std::mutex> lock(a.mutex);
  if (a.base)
    return true;
  static std::once_flag registered;
  std::call_once(registered, [] {
    pthread_atfork(beforeFork, afterForkInParent, afterForkInChild);
  });
  size_t bytes = reserveBytes ? reserveBytes : defaultReserve();
  bytes = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  int fd = static_cast<int>(
      syscall(SYS_memfd_create, "dtorch-host-arena", MFD_CLOEXEC));
  if (fd < 0)
    return false;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return false;
  }
  void *base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) {
    close(fd);
    return false;
  }
  a.fd = fd;
  a.base = static_cast<char *>(base);
  a.bytes = bytes;
  a.used = 0;
  a.on.store(true, std::memory_order_release);
  return true;
}

bool sharedHostArenaWanted() {
  const char *value = std::getenv("DTORCH_SHARED_ARENA");
  return !(value && std::string(value) == "0");
}

bool sharedHostArenaEnabled() {
  return arena().on.load(std::memory_order_acquire);
}

void *sharedArenaAllocate(size_t bytes) {
  Arena &a = arena();
  if (!a.on.load(std::memory_order_acquire) || bytes == 0)
    return nullptr;
  size_t size = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  std::lock_guard<std::mutex> lock(a.mutex);
  if (!a.base)
    return nullptr;
  auto it = a.released.find(size);
  if (it != a.released.end() && !it->second.empty()) {
    char *block = it->second.back();
    it->second.pop_back();
    return block;
  }
  if (size > a.bytes - a.used)
    return nullptr;
  char *block = a.base + a.used;
  a.used += size;
  return block;
}

bool sharedArenaRelease(void *block, size_t bytes) {
  Arena &a = arena();
  if (!a.on.load(std::memory_order_acquire))
    return false;
  char *at = static_cast<char *>(block);
  size_t size = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  std::lock_guard<std::mutex> lock(a.mutex);
  if (!a.base || at < a.base || at >= a.base + a.used)
    return false;
  // Gives the pages back; the range reads as zeros until written again.
  fallocate(a.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            static_cast<off_t>(at - a.base), static_cast<off_t>(size));
  a.released[size].push_back(at);
  return true;
}

bool sharedArenaLocate(const void *data, size_t bytes,
                       SharedArenaLocation &where) {
  Arena &a = arena();
  if (!a.on.load(std::memory_order_acquire))
    return false;
  const char *at = static_cast<const char *>(data);
  std::lock_guard<std::mutex> lock(a.mutex);
  if (!a.base || at < a.base || at + bytes > a.base + a.used)
    return false;
  where.pid = static_cast<int32_t>(getpid());
  where.fd = a.fd;
  where.arenaBytes = a.bytes;
  where.offset = static_cast<uint64_t>(at - a.base);
  return true;
}

bool sharedArenaInherited(const void *block) {
  Arena &a = arena();
  if (!a.anyInherited.load(std::memory_order_acquire))
    return false;
  const char *at = static_cast<const char *>(block);
  std::lock_guard<std::mutex> lock(a.mutex);
  for (const auto &[base, bytes] : a.inherited)
    if (at >= base && at < base + bytes)
      return true;
  return false;
}

} // namespace dtorch::rt
