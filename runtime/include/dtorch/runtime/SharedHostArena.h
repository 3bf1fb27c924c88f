// Large host blocks that other processes of the host can map: one memfd per
// process, mapped once (sparse: a page takes memory only once touched), cut
// by a bump pointer, blocks reused by size. Once enabled, CachingAllocator
// takes its blocks of at least kSharedArenaMinBytes from here, so the inputs
// and outputs of a worker's collectives can be read and written by the other
// members in place (HostSharedMemoryCommunicator maps the arena of each
// member through /proc/PID/fd/FD) instead of being copied through a segment.
//
// Off unless enableSharedHostArena() is called (dtorch-worker does, unless
// $DTORCH_SHARED_ARENA=0). A process that forks after enabling it leaves
// the child with the arena off: blocks the child inherited stay shared with
// the parent, so the allocator never hands them out again in the child.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtorch::rt {

// Blocks of at least this many bytes come from the arena (when enabled).
constexpr size_t kSharedArenaMinBytes = size_t(64) << 10;

// Where a block lies, for another process: it opens /proc/pid/fd/fd and
// maps `arenaBytes` from offset 0.
struct SharedArenaLocation {
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t arenaBytes = 0;
  uint64_t offset = 0;
};

// Creates this process's arena of `reserveBytes` of address space (0: a
// default from the host's memory); idempotent. Returns false (and leaves it
// off) when memfd or mmap fail.
bool enableSharedHostArena(size_t reserveBytes = 0);
bool sharedHostArenaEnabled();
// False when $DTORCH_SHARED_ARENA is "0" (for processes that would turn the
// arena on by default, such as dtorch-worker).
bool sharedHostArenaWanted();

// A block of `bytes` (whole pages, page aligned), or null when the arena is
// off or full.
void *sharedArenaAllocate(size_t bytes);
// True when `block` is an arena block of this process (allocated with
// `bytes`): its memory is given back to the system (the range is kept for
// the next block of that size). False for any other pointer.
bool sharedArenaRelease(void *block, size_t bytes);
// True when [data, data + bytes) lies in this process's arena (`where` then
// says how another process reaches it).
bool sharedArenaLocate(const void *data, size_t bytes,
                       SharedArenaLocation &where);
// True when `block` lies in an arena this process inherited through fork
// (shared with the parent: never to be reused here).
bool sharedArenaInherited(const void *block);

} // namespace dtorch::rt
