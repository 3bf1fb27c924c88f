//===- RecordPool.h - free lists for the per-op objects of recording -*- C++
//-*-===//
//
// Recording an op allocates a few small objects of fixed size: the result's
// TensorImpl and TensorStorage and, with autograd, its GradRecord (each
// with its shared_ptr control block, one allocation per object through
// std::allocate_shared). A training step frees hundreds of them at once
// (the graph released by backward(), the step's intermediates), more than
// glibc's per-thread cache keeps (7 per size), so the rest go through its
// fast bins and are consolidated at the next large allocation (a numpy
// batch, a fetched value): about a fifth of the client's recording CPU.
//
// PoolAllocator keeps freed blocks in per-thread free lists by size class
// (16-byte steps up to kMaxBlock bytes) and hands them out again: no lock,
// no glibc bookkeeping. Blocks move between threads in chains of 64
// through a depot under a mutex: the controller thread frees the
// TensorStorage blocks whose last weak reference (Node::owner) it drops,
// and the recording thread takes them back a chain at a time. The depot
// holds at most kMaxCached blocks per size (the rest go back to the heap);
// a thread's own lists are freed when it exits.
//
// DTORCH_RECORD_POOL=0 (read once per process) allocates from the heap as
// before, for A/B measurements.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

namespace dtorch::client {

/// False when DTORCH_RECORD_POOL is "0" (read once per process).
bool recordPoolEnabled();

namespace pool {

constexpr size_t kGranule = 16;
constexpr size_t kMaxBlock = 512;
constexpr size_t kClasses = kMaxBlock / kGranule;
constexpr uint32_t kMaxCached = 8192;

/// A block of `bytes` (<= kMaxBlock) from this thread's free list, or the
/// heap.
void *allocate(size_t bytes);
/// Gives a block of `bytes` from allocate() back.
void deallocate(void *block, size_t bytes) noexcept;

/// Counters of the calling thread's pool (tests).
struct Stats {
  uint64_t reused = 0;   // blocks handed out from a free list
  uint64_t fresh = 0;    // blocks taken from the heap
  uint64_t cached = 0;   // blocks in this thread's free lists now
  uint64_t returned = 0; // blocks given back to the heap (depot full)
};
Stats threadStats();

} // namespace pool

/// The allocator of std::allocate_shared for the per-op objects.
template <typename T> struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U> PoolAllocator(const PoolAllocator<U> &) noexcept {}
  // Up to kMaxBlock bytes (an object, or a short array such as an op's
  // operands) from the pool; larger ones from the heap.
  T *allocate(size_t n) {
    if (n <= pool::kMaxBlock / sizeof(T))
      return static_cast<T *>(pool::allocate(n * sizeof(T)));
    return static_cast<T *>(::operator new(n * sizeof(T)));
  }
  void deallocate(T *p, size_t n) noexcept {
    if (n <= pool::kMaxBlock / sizeof(T))
      pool::deallocate(p, n * sizeof(T));
    else
      ::operator delete(p);
  }
  template <typename U> bool operator==(const PoolAllocator<U> &) const {
    return true;
  }
  template <typename U> bool operator!=(const PoolAllocator<U> &) const {
    return false;
  }
};

} // namespace dtorch::client
