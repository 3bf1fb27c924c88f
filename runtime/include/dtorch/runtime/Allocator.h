// A size-bucketed caching host allocator. Freed blocks are kept (their pages
// already touched) and handed out again for requests of the same bucket
// instead of being returned to the OS. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace dtorch::rt {

struct AllocatorStats {
  size_t bytesInUse = 0;    // bucket bytes handed out and not yet freed
  size_t bytesCached = 0;   // bucket bytes kept for reuse
  uint64_t cacheHits = 0;   // allocations served from the cache
  uint64_t cacheMisses = 0; // allocations that went to the system
};

class CachingAllocator {
public:
  // The process-wide instance (never destroyed, so tensors alive at exit are
  // safe to free).
  static CachingAllocator &instance();

  // Bucket size for a request: at least 64 bytes; powers of two up to 1 MiB,
  // above that steps of a quarter of the power of two (waste < 25%).
  static size_t bucketSize(size_t bytes);

  // Returns a 64-byte aligned block of at least `bytes` bytes (never null;
  // throws std::bad_alloc when the system is out of memory even after the
  // cache was released).
  void *allocate(size_t bytes);
  // `bytes` must be the size passed to allocate.
  void deallocate(void *ptr, size_t bytes);

  // Returns every cached block to the system.
  void releaseCached();
  AllocatorStats stats() const;

private:
  CachingAllocator() = default;

  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void *>> freeBlocks_; // by bucket size
  AllocatorStats stats_;
};

} // namespace dtorch::rt
