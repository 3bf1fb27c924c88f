// Collectives between ranks of DIFFERENT processes of one host that compute
// on the SAME device (a machine with fewer GPUs than worker processes), as
// device-to-device copies: NCCL refuses two ranks of one GPU, and the host
// path costs two PCIe crossings per member.
//
// Each rank exports one device arena (two slots of an input and a result
// area of `chunkBytes` each) and one interprocess event, through DeviceIpc
// (DeviceIpc.h: CUDA IPC on a GPU, host memory in tests), and publishes
// their handles in the rendezvous store (`prefix`/arena/RANK); a member
// opens another's arena and event the first time they share a group (a
// member of its own process: it uses them as they are, since CUDA opens no
// handle in the process that exported it). A
// group's members meet in a small host shared-memory segment (the
// hostshm segment of HostSharedMemoryCollectives, created by the group's
// first member, found through the store) whose counters sequence the rounds:
//   1. every member copies its round of bytes (its "stream": its input, or
//      the pieces it sends, laid out in order) into its slot, records its
//      event and posts the round;
//   2. once all have posted (host counters), each member's stream waits for
//      the others' events (device side, no host wait for the device) and
//      reads their slots: all_gather, all_to_all and broadcast copy the
//      pieces meant for it into its output; reduce_scatter reduces its piece
//      of every member's slot into its output; all_reduce of more than
//      `directReduceBytes` reduces the member's own share of the round (its
//      chunk: an n-th of the round) into its result area, posts that, and
//      then copies every member's reduced chunk into its output (each byte
//      reduced once), smaller ones reduce the whole round into the output;
//   3. it records its event and marks the round done; a slot is written
//      again only after every member is done with it: the next round on
//      the same group (also in the next call) waits for that round by
//      round, and a call on another group first waits until the members
//      of the last call's group are done with the arena.
// Reductions combine members in group order as reducePieces does, so the
// results are the bits of the host backends.
//
// send/recv: the sender copies the message, in chunks of `p2pChunkBytes`,
// into a buffer of four chunks it exports for that receiver, and returns
// once the last chunk is posted (it waits only for a free chunk); the
// receiver copies them out in order, keeping messages of other tags aside.
//
// A call returns once this rank's device work of it has finished (as the
// other device communicators do: the caller may reuse its input at once),
// polled with the deadline, so work stuck behind a dead peer's event is an
// error, not a hang.
//
// Every wait has `deadline`; a member that misses it is named, a member
// whose process died (pid and start time) or that `health` declares dead
// is reported at once, and a failure inside a call aborts the group's
// segment (the others stop waiting) and leaves the group unusable, as the
// host shared-memory backend does.
#pragma once

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/DeviceIpc.h"
#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/PeerHealth.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace dtorch::rt {

struct IpcDeviceOptions {
  // Deadline of every wait for a member (attaching included).
  std::chrono::milliseconds deadline{30000};
  // Bytes of each member's stream per round (rounded up to 4 KiB); every
  // member of a group must use the same value. The arena holds four.
  size_t chunkBytes = size_t(8) << 20;
  // all_reduce of at most this many bytes: every member reduces the whole
  // round (one wait per round) instead of its share (two).
  size_t directReduceBytes = size_t(256) << 10;
  // Bytes per chunk of a send; the sender's buffer per receiver holds four.
  size_t p2pChunkBytes = size_t(1) << 20;
  // Prefix of the keys in the rendezvous store.
  std::string prefix = "gpuipc";
  // When set, the prefix in force (a world restart changes it): a call that
  // sees a new value first drops every group, peer mapping and pair of the
  // old one and publishes its arena again under the new prefix.
  std::function<std::string()> currentPrefix;
  // Ranks the controller declared dead (may be null).
  std::shared_ptr<const PeerHealth> health;
};

// Counters of one communicator, for tests and benchmarks.
struct IpcDeviceStats {
  uint64_t collectives = 0;    // collective calls completed
  uint64_t rounds = 0;         // rounds of those calls
  uint64_t bytes = 0;          // bytes of this rank's streams
  uint64_t peersOpened = 0;    // peer arenas mapped (other processes)
  uint64_t peersInProcess = 0; // peers of this process, used as they are
  uint64_t messages = 0;       // sends and receives completed
};

class IpcDeviceCommunicator : public Communicator {
public:
  virtual IpcDeviceStats stats() const = 0;
};

// The communicator of global rank `rank` for tensors on `ipc.device()`.
// `store` is the rendezvous store shared by every process of the world.
// Nothing is allocated or published before the first call.
std::unique_ptr<IpcDeviceCommunicator>
makeIpcDeviceCommunicator(int rank, DeviceIpc &ipc,
                          std::shared_ptr<KeyValueStore> store,
                          const IpcDeviceOptions &options = {});

// False when $DTORCH_GPU_IPC is "0": the worker then carries the
// collectives of such groups through the host, as before.
bool ipcDeviceCollectivesWanted();

} // namespace dtorch::rt
