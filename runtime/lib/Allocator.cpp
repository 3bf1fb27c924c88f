#include "dtorch/runtime/Allocator.h"
#include "dtorch/runtime/SharedHostArena.h"

#include <cstdlib>
#include <new>

namespace dtorch::rt {

namespace {
constexpr size_t kMinBlock = 64;
constexpr size_t kAlignment = 64;
constexpr size_t kPowerOfTwoLimit = size_t(1) << 20; // 1 MiB

size_t nextPowerOfTwo(size_t value) {
  size_t power = 1;
  while (power < value) {
    if (power > (~size_t(0) >> 1))
      throw std::bad_alloc();
    power <<= 1;
  }
  return power;
}
} // namespace

CachingAllocator &CachingAllocator::instance() {
  static CachingAllocator *allocator =
      new CachingAllocator(); // never destroyed
  return *allocator;
}

size_t CachingAllocator::bucketSize(size_t bytes) {
  if (bytes <= kMinBlock)
    return kMinBlock;
  if (bytes <= kPowerOfTwoLimit)
    return nextPowerOfTwo(bytes);
  // Above 1 MiB: 2^k * {1, 1.25, 1.5, 1.75}.
  size_t power = nextPowerOfTwo(bytes) >> 1; // 2^k < bytes <= 2^(k+1)
  size_t step = power / 4;
  size_t rounded = ((bytes + step - 1) / step) * step;
  return rounded;
}

void *CachingAllocator::allocate(size_t bytes) {
  size_t bucket = bucketSize(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = freeBlocks_.find(bucket);
    while (it != freeBlocks_.end() && !it->second.empty()) {
      void *block = it->second.back();
      it->second.pop_back();
      stats_.bytesCached -= bucket;
      if (sharedArenaInherited(block))
        continue; // shared with the parent process: never reused here
      stats_.bytesInUse += bucket;
      ++stats_.cacheHits;
      return block;
    }
    ++stats_.cacheMisses;
  }
  // Large blocks from the shared arena when it is on (SharedHostArena.h).
  void *block =
      bucket >= kSharedArenaMinBytes ? sharedArenaAllocate(bucket) : nullptr;
  if (!block)
    block = std::aligned_alloc(kAlignment, bucket);
  if (!block) {
    releaseCached();
    block = std::aligned_alloc(kAlignment, bucket);
    if (!block)
      throw std::bad_alloc();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.bytesInUse += bucket;
  return block;
}

void CachingAllocator::deallocate(void *ptr, size_t bytes) {
  if (!ptr)
    return;
  size_t bucket = bucketSize(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  freeBlocks_[bucket].push_back(ptr);
  stats_.bytesInUse -= bucket;
  stats_.bytesCached += bucket;
}

void CachingAllocator::releaseCached() {
  std::unordered_map<size_t, std::vector<void *>> blocks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks.swap(freeBlocks_);
    stats_.bytesCached = 0;
  }
  for (auto &entry : blocks)
    for (void *block : entry.second)
      if (!sharedArenaInherited(block) &&
          !sharedArenaRelease(block, entry.first))
        std::free(block);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

} // namespace dtorch::rt
