// all_reduce through peer access (internal to runtime/collectives): every
// member reads the other members' inputs and writes into their outputs
// directly, in place where they lie in the members' shared arenas
// (SharedHostArena.h, mapped into every member), else with cross-memory
// attach (process_vm_readv / process_vm_writev), so a call needs two
// synchronisations (all members posted their buffers'
// addresses; all chunks completed) instead of a few per round of the staged
// path.
//
// The tensor is cut into chunks that members claim from a counter in the
// segment: the claimer reads the chunk of every member's input, reduces them
// in group order (reducePieces, so the bits are those of every other
// transport) into its own output and writes the result into every other
// member's output. Whoever runs does the work: on a busy host a member that
// is descheduled does not hold the others up.
//
// A member's output accepts writes only while its `writable` token is the
// call's; a writer announces itself in `writingTo` before checking the token
// and a member leaving a call (normally or not) clears the token, then waits
// for announced writers, so no write lands in memory the member has given
// back.
//
// Whether a group may use it is negotiated once per group: every member
// probes reading and writing every other member (ptrace access mode: same
// user, no Yama restriction, no seccomp filter) and the group uses it only
// when all succeed and no member turned it off ($DTORCH_HOSTSHM_PEER_ACCESS
// set to 0).
#pragma once

#include "HostSharedMemorySegment.h"

#include "dtorch/runtime/Collectives.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace dtorch::rt::hostshm {

// memcpy into memory that will not be read again soon (the output of a
// large all_reduce): non-temporal stores, so the destination is not read
// into the cache first. The caller ends with streamFence().
void streamCopy(char *dst, const char *src, size_t bytes);
// Orders the non-temporal stores before anything that follows.
void streamFence();

// False when $DTORCH_HOSTSHM_PEER_ACCESS is "0" (forces the staged path).
bool peerAccessWanted();

// Copies `bytes` between this process and process `pid` at its address
// `remote` (memcpy when `pid` is this process). Throw RuntimeError with the
// system's reason.
void readFromProcess(int32_t pid, uint64_t remote, void *local, size_t bytes);
void writeToProcess(int32_t pid, uint64_t remote, const void *local,
                    size_t bytes);

// What a member exposes while the group negotiates: `pattern` filled from
// the nonce it publishes, `scratch` for the others' probe writes.
struct PeerProbe {
  alignas(64) uint64_t pattern[8];
  uint64_t scratch[8];
  void fill(uint64_t nonce);
};

// True when this process can read the probe of process `pid` at `address`
// (and find the pattern of `nonce`) and write into its scratch.
bool probePeer(int32_t pid, uint64_t address, uint64_t nonce);

// Bytes per chunk of an all_reduce of `bytes` over `members`: a few chunks
// per member (so that work can move to whoever runs), at most `maxChunk`,
// whole pages, a multiple of every element size.
uint64_t peerChunkBytes(uint64_t bytes, size_t members, uint64_t maxChunk);

// One all_reduce call, once every member posted its addresses.
struct PeerAllReduce {
  Segment *segment = nullptr;
  size_t me = 0;
  std::vector<int32_t> pids;     // per member
  std::vector<uint64_t> inputs;  // per member, in its process
  std::vector<uint64_t> outputs; // per member, in its process
  // Per member, its input and output in this process's address space (its
  // shared arena mapped here; this member's own buffers), or null: then
  // through process_vm_readv/writev.
  std::vector<const char *> inputViews;
  std::vector<char *> outputViews;
  uint32_t token = 0; // the call's `writable` token
  DType dtype = ::dtorch::wire::DTYPE_INVALID;
  ReduceOp op = ReduceOp::Sum;
  uint64_t count = 0;         // elements
  uint64_t chunkElements = 0; // per chunk (the last may be shorter)
  uint32_t firstChunk = 0;    // the claim counter at the call's start
  // Large tensors: the two-member sums write with non-temporal stores.
  bool streaming = false;
  uint64_t chunks() const {
    return count == 0 ? 0 : (count + chunkElements - 1) / chunkElements;
  }
  uint32_t endChunk() const {
    return firstChunk + static_cast<uint32_t>(chunks());
  }
};

// Claims chunks of `call` until none is left and does each (see above);
// returns without waiting for the chunks others claimed. `scratch` holds
// one chunk per other member (resized here). Throws RuntimeError when a
// copy fails or a member left the call.
// `beforeFirstChunk` runs once this member claimed its first chunk (it may
// fill the views).
void reduceClaimedChunks(PeerAllReduce &call, std::vector<char> &scratch,
                         const std::function<void()> &beforeFirstChunk);

// Another process's shared arena (SharedHostArena.h) mapped into this one.
class MappedArena {
public:
  // Opens /proc/PID/fd/FD and maps `bytes` of it; throws RuntimeError.
  MappedArena(int32_t pid, int32_t fd, uint64_t bytes);
  ~MappedArena();
  MappedArena(const MappedArena &) = delete;
  MappedArena &operator=(const MappedArena &) = delete;
  char *at(uint64_t offset) const { return base_ + offset; }

private:
  char *base_ = nullptr;
  uint64_t bytes_ = 0;
};

// This member's output stops accepting writes: clears its token, then waits
// (at most `deadline`) until no live member is writing into it.
void closeForWrites(Segment &segment, size_t me,
                    std::chrono::milliseconds deadline);

} // namespace dtorch::rt::hostshm
