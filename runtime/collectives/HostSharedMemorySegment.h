// The shared segment behind HostSharedMemoryCommunicator (internal to
// runtime/collectives): its layout, its creation and attachment through the
// rendezvous store, the members' liveness, and waiting on a member's counter
// (spin, yield, futex) with a deadline and abort propagation.
#pragma once

#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/PeerHealth.h"
#include "dtorch/runtime/Tensor.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtorch::rt::hostshm {

constexpr uint64_t kMagic = 0x6873686374726f74ull; // "torchshh"
constexpr size_t kMaxMembers = 255;
constexpr size_t kPage = 4096;
// Rounds a member may run ahead of the slowest one (slots per member).
constexpr size_t kSlots = 4;

enum class SegmentKind : uint32_t { Group = 1, Pair = 2 };

// At offset 0. Stats are written by the members (relaxed), for inspection
// from outside (tests read them through /proc/PID/fd of the creator).
struct SegmentHeader {
  uint64_t magic;
  uint64_t nonce;
  uint32_t kind;
  uint32_t members;
  uint64_t chunkBytes; // group: bytes per round; pair: ring capacity
  uint64_t totalBytes;
  alignas(64) std::atomic<uint32_t> sleepers;
  alignas(64) std::atomic<uint32_t> aborted;
  char abortReason[512];
  alignas(64) std::atomic<uint64_t> calls;
  std::atomic<uint64_t> bytes;
  int64_t ranks[kMaxMembers];
  // all_reduce through peer access (HostSharedMemoryPeerAccess.h): chunks
  // claimed and chunks completed, counted over the segment's life (they
  // wrap; compared by difference).
  alignas(64) std::atomic<uint32_t> claimed;
  alignas(64) std::atomic<uint32_t> completed;
};
static_assert(sizeof(SegmentHeader) <= kPage, "header fits a page");
// test/python/test_host_shared_memory.py reads the counters at this offset.
static_assert(offsetof(SegmentHeader, calls) == 704 &&
                  offsetof(SegmentHeader, bytes) == 712,
              "the counters' offsets are read from outside");
static_assert(offsetof(SegmentHeader, claimed) == 2816,
              "test/python/test_host_shared_memory.py reads the claims here");
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<uint64_t>::is_always_lock_free,
              "shared atomics must be lock free");

// One per member, each counter on its own cache line. Counters count rounds
// (group) or ticks (pair) and wrap around; they are compared by difference.
struct MemberControl {
  alignas(64) std::atomic<int32_t> pid;
  std::atomic<uint32_t> attached;
  uint64_t startTime; // of the process, from /proc/PID/stat
  alignas(64) std::atomic<uint32_t> posted;
  alignas(64) std::atomic<uint32_t> reduced;
  alignas(64) std::atomic<uint32_t> done;
  alignas(64) std::atomic<uint64_t> position; // pair: bytes written / read
  // Peer access: `writable` holds the token of the call whose output the
  // other members may write into (0: none); `writingTo` is 1 + the index of
  // the member this one is writing into right now (0: none).
  alignas(64) std::atomic<uint32_t> writable;
  std::atomic<uint32_t> writingTo;
};

// What each member writes at the start of each slot it posts: the call it
// belongs to, so that members that disagree fail instead of mixing data.
struct RoundHeader {
  uint32_t op;
  uint32_t dtype;
  uint32_t reduce;
  uint32_t members;
  uint64_t call;
  uint64_t length;                        // bytes of this member's stream
  uint64_t pieceOffsets[kMaxMembers + 1]; // all_to_all: stream offsets
  // Peer access: addresses in this member's process of the call's input
  // and output (negotiation: of its probe), the probe's pattern and whether
  // this member can and will use peer access.
  uint64_t inputAddress;
  uint64_t outputAddress;
  uint64_t probeNonce;
  uint32_t peerAccess;
  // Where the input and output lie in the member's shared arena
  // (SharedHostArena.h), when `inArena` says they do (bit 0 the input, bit
  // 1 the output).
  uint32_t inArena;
  int32_t arenaFd;
  uint64_t arenaBytes;
  uint64_t inputOffset;
  uint64_t outputOffset;
};
static_assert(sizeof(RoundHeader) <= kPage, "round header fits a page");

// True while the process `pid` started at `startTime` runs (not a zombie).
bool processAlive(int32_t pid, uint64_t startTime);
uint64_t processStartTime(int32_t pid);

// A mapped segment. Group segments: `members` controls, then for every
// member kSlots slots of (RoundHeader page, input chunk, reduced chunk);
// round g uses slot g % kSlots. Pair
// segments: two controls (0 sender, 1 receiver) and a ring.
class Segment {
public:
  // Creates a segment and publishes it under `key`; `index` is the
  // creator's member index.
  static std::unique_ptr<Segment>
  create(KeyValueStore &store, const std::string &key, SegmentKind kind,
         const std::vector<int64_t> &ranks, size_t chunkBytes, size_t index);
  // Opens the segment published under `key` (waits up to `deadline`).
  static std::unique_ptr<Segment>
  attach(KeyValueStore &store, const std::string &key, SegmentKind kind,
         const std::vector<int64_t> &ranks, size_t chunkBytes, size_t index,
         std::chrono::milliseconds deadline);
  ~Segment();
  Segment(const Segment &) = delete;
  Segment &operator=(const Segment &) = delete;

  SegmentHeader &header() { return *header_; }
  size_t members() const { return members_; }
  size_t chunkBytes() const { return chunkBytes_; }
  MemberControl &control(size_t member);
  // Group segments.
  RoundHeader &roundHeader(size_t member, size_t slot);
  char *input(size_t member, size_t slot);
  char *reduced(size_t member, size_t slot);
  // Pair segments.
  char *ring();

  // Stores `value` into `counter` and wakes its waiters.
  void publish(std::atomic<uint32_t> &counter, uint32_t value);
  // Adds one to `counter` and wakes its waiters.
  void advance(std::atomic<uint32_t> &counter);
  // Wakes every waiter of every counter (after an abort).
  void wakeAll();

  // Waits until done() holds; `counter` is the word to sleep on (the
  // counter of a member not ready yet). Throws RuntimeError built by
  // `describe(why)` on the deadline (why names the ranks `missing()` lists),
  // an abort by another member or the death of any member's process.
  void waitFor(std::atomic<uint32_t> &counter,
               const std::function<bool()> &done,
               std::chrono::milliseconds deadline,
               const std::function<std::string(const std::string &)> &describe,
               const std::function<std::string()> &missing);

  // Marks the segment aborted with `reason` (the first one wins).
  void abort(const std::string &reason);

  // Ranks the controller declared dead (may be null): waitFor gives up as
  // soon as a member is among them, attached or not.
  void setHealth(const PeerHealth *health) { health_ = health; }

private:
  Segment() = default;
  void map(int fd, size_t bytes);
  void layout(SegmentKind kind, size_t members, size_t chunkBytes);
  void registerSelf(size_t index);

  int fd_ = -1;
  char *base_ = nullptr;
  size_t bytes_ = 0;
  size_t members_ = 0;
  size_t chunkBytes_ = 0;
  size_t controlsOffset_ = 0;
  size_t dataOffset_ = 0;
  size_t slotStride_ = 0;
  SegmentHeader *header_ = nullptr;
  const PeerHealth *health_ = nullptr;
};

// Bytes of a group segment for `members` and `chunkBytes` (for reports).
size_t groupSegmentBytes(size_t members, size_t chunkBytes);

} // namespace dtorch::rt::hostshm
