// Collectives between ranks in different processes of one host, through
// shared memory (memfd segments mapped by every member; no socket on the data
// path). One segment per group (ordered list of ranks), created by the
// group's first member on its first collective and found by the others
// through the rendezvous store (the creator publishes its pid and the
// segment's descriptor; the others open /proc/PID/fd/FD). memfd segments have
// no name in /dev/shm, so nothing is left behind when a process dies.
//
// Data moves in rounds through a bounded per-member buffer (four slots of
// `chunkBytes`; members may run a few rounds apart), so memory does not grow
// with message size and large tensors are pipelined. A large all_reduce
// skips the buffer when the members' tensors lie in their shared arenas
// (SharedHostArena.h): each member reads the others' inputs and writes into
// their outputs in place, with two synchronisations per call
// (HostSharedMemoryOptions::peerAccessBytes). Members synchronise by
// counters in the segment: a short spin, then a futex wait. Reductions combine
// members in group order with reducePieces, so results are bitwise the same
// as the Gloo backend, SharedMemoryHub and FakeCollectiveHub.
//
// A member that does not arrive within the deadline makes the call throw
// RuntimeError naming it; a member whose process ended (checked by pid and
// start time while waiting) is reported at once. A failure inside a call
// marks the segment aborted (the other members stop waiting) and makes the
// group unusable for this communicator, as Gloo does.
#pragma once

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/PeerHealth.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace dtorch::rt {

struct HostSharedMemoryOptions {
  // Deadline of every wait for a member (without progress), attaching
  // included.
  std::chrono::milliseconds deadline{30000};
  // Bytes each member moves per round (rounded up to 4 KiB); every member of
  // a group must use the same value.
  size_t chunkBytes = size_t(256) << 10;
  // all_reduce of at most this many bytes in groups of up to 4: every member
  // reduces every element (one wait per round) instead of its share (less
  // memory traffic). Every member of a group must use the same value.
  size_t directReduceBytes = size_t(64) << 10;
  // all_reduce of at least this many bytes writes its output with
  // non-temporal stores (it would not stay in the cache anyway).
  size_t streamingBytes = size_t(4) << 20;
  // all_reduce of more than this many bytes goes through peer access: each
  // member reads the others' inputs and writes into their outputs in place,
  // two synchronisations per call, chunks of at most `chunkBytes` claimed
  // by whichever member runs. The buffers must lie in the members' shared
  // arenas (SharedHostArena.h, which dtorch-worker turns on), or else
  // `crossMemoryAttach` be on. A call whose buffers are out of reach, and
  // every call of a group where a member set $DTORCH_HOSTSHM_PEER_ACCESS=0,
  // goes through the rounds above. SIZE_MAX: never. Every member of a group
  // must use the same value.
  size_t peerAccessBytes = size_t(64) << 10;
  // Peer access to buffers outside the shared arenas through
  // process_vm_readv/writev (probed once per group; needs the ptrace
  // permission between the processes). Off by default: on the 2-core VM
  // measured, those calls copy at 3-3.5 GB/s of CPU against memcpy's 8,
  // which makes them slower than the rounds.
  bool crossMemoryAttach = false;
  // Capacity of the ring of one sender -> receiver pair (send/recv).
  size_t ringBytes = size_t(4) << 20;
  // Prefix of this world's keys in the rendezvous store.
  std::string prefix = "hostshm";
  // This process's host identity (empty: localHostIdentity()).
  std::string hostIdentity;
  // Ranks the controller declared dead (null: none are ever declared): a
  // call that needs one fails at once, and a wait for one gives up within
  // a few tens of milliseconds, instead of at the deadline.
  std::shared_ptr<const PeerHealth> health;
};

// What identifies "the same host" for shared memory: the hostname, the boot
// id and the IPC, mount, pid and network namespaces of this process (two
// processes with the same identity can map each other's memfd segments and
// see each other's pids; the network namespace keeps "hosts" simulated by
// namespaces that share one kernel apart, so they talk over their links).
// $DTORCH_HOST_ID, when set, replaces it (tests use it to simulate ranks on
// different hosts).
std::string localHostIdentity();

// Counters of one communicator, for tests and benchmarks.
struct HostSharedMemoryStats {
  uint64_t collectives = 0;     // collective calls completed
  uint64_t bytes = 0;           // payload bytes this rank contributed
  uint64_t segments = 0;        // group and pair segments mapped
  uint64_t peerAccessCalls = 0; // all_reduce calls through peer access
};

class HostSharedMemoryCommunicator : public Communicator {
public:
  // Publishes this rank's host identity in the store (publishIdentity).
  virtual void publishIdentity() = 0;
  // True when every member of `group` published the same host identity as
  // this rank (asks the store once per rank, waiting up to the deadline for
  // a member that has not published yet; a member that never does counts as
  // another host).
  virtual bool sameHost(const Group &group) = 0;
  virtual HostSharedMemoryStats stats() const = 0;
};

// The communicator of `rank`. `store` is the rendezvous store shared with
// every process of the world (the worker's is served by the controller).
// Nothing is published before publishIdentity().
std::unique_ptr<HostSharedMemoryCommunicator>
makeHostSharedMemoryCommunicator(int rank, std::shared_ptr<KeyValueStore> store,
                                 const HostSharedMemoryOptions &options = {});

// A rendezvous store in a directory, for processes started together by tests
// and benchmarks: set writes a file atomically (rename), get polls for it.
class FileKeyValueStore final : public KeyValueStore {
public:
  explicit FileKeyValueStore(std::string directory);
  void set(const std::string &key, const std::string &value) override;
  std::string get(const std::string &key,
                  std::chrono::milliseconds timeout) override;

private:
  std::string pathOf(const std::string &key) const;
  std::string directory_;
};

} // namespace dtorch::rt
