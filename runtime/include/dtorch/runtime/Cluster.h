//===- Cluster.h - the controller's handle on its workers ---------*- C++
//-*-===//
//
// The controller side of the runtime: starts local dtorch-worker processes
// (embedded mode) or connects to workers started by hand, and talks to them
// over ZeroMQ (ROUTER here, DEALER per worker process) with the messages of
// runtime/proto/dtorch_messages.proto. MLIR-free.
//
// Every call except fetch().get() and synchronize() returns without waiting
// for a worker. Errors of asynchronous work (a failing kernel, a dead worker)
// surface at the next fetch or synchronize as WorkerError, once: a failed
// fetch also clears the errors queued so far (other ranks' reports of the
// same failure).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/runtime/Checkpoint.h"
#include "dtorch/runtime/MemoryStats.h"
#include "dtorch/runtime/Tensor.h"
#include "dtorch/runtime/Trace.h"

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace dtorch::rt {

/// A worker died, stopped answering or reported an error.
///
/// Failing fast (docs/guide/faults.md): once the controller saw a worker
/// die or go silent, requests waiting on any rank whose earlier runs need
/// one of its ranks fail at once, runs that would need them are not sent
/// (their outputs fail when fetched), and the surviving workers are told
/// (PeersLost) so that their waits for the lost ranks give up.
class WorkerError : public RuntimeError {
public:
  WorkerError(int rank, std::string host, const std::string &what);
  int rank() const { return rank_; }
  const std::string &host() const { return host_; }

private:
  int rank_;
  std::string host_;
};

/// Names a tensor's per-rank buffer on the workers; chosen by the controller.
using TensorHandle = uint64_t;

struct ClusterOptions {
  /// Embedded mode: start `numProcesses` local `dtorch-worker` processes from
  /// `workerExecutable` hosting ranks 0..worldSize-1 in contiguous blocks.
  int worldSize = 4;
  int numProcesses = 2;
  std::string workerExecutable;
  /// Or connect to workers started by hand (`dtorch-worker --listen ADDR
  /// --token T`), in rank-block order; worldSize is then what they report.
  std::vector<std::string> workerAddresses;
  /// Or, dial-in mode: listen on this ZeroMQ endpoint ("tcp://0.0.0.0:29500")
  /// and admit the workers that connect to it (`dtorch-worker --controller
  /// HOST:PORT`, or `--dial-in` with MASTER_ADDR / MASTER_PORT): each says
  /// its ranks, world size and host in its Hello (DialInAdmission.h), and
  /// the cluster starts once every rank of `worldSize` (0: the first
  /// worker's world size) is held by exactly one worker. `token` must be
  /// the workers' token. CURVE: `curveSecretKey` is this controller's
  /// (server) key and `curveWorkerPublicKeys` the workers' keys it admits.
  std::string listenAddress;
  /// Dial-in mode: how long the start waits for every rank; then it fails
  /// with a WorkerError naming the ranks that never arrived.
  std::chrono::milliseconds admissionTimeout{60000};
  /// Shared secret every peer must present; empty: a fresh random one. The
  /// embedded cluster hands it to its workers through a pipe (descriptor 3,
  /// `--token-fd 3`), never on their command line.
  std::string token;
  /// CURVE encryption and key authentication with workers started by hand
  /// (Security.h): this controller's secret key (Z85) and the workers'
  /// public keys, one per address of `workerAddresses` or one for all.
  /// Empty: plain TCP (the token still authenticates). A worker that
  /// refuses the key, or a mechanism mismatch, fails the start with a
  /// WorkerError naming the worker's address.
  std::string curveSecretKey;
  std::vector<std::string> curveWorkerPublicKeys;
  /// How often each side sends a heartbeat (the workers started here are
  /// told to use it too; from their I/O thread, so a long kernel does not
  /// delay them).
  std::chrono::milliseconds heartbeatInterval{500};
  /// A worker from which nothing was heard for this long is declared
  /// unresponsive (and, when started here, killed): its ranks are lost.
  /// Embedded workers exit when the controller is silent this long (at
  /// most 3 s).
  std::chrono::milliseconds peerTimeout{2500};
  /// Deadline of every blocking collective on the workers started here.
  std::chrono::milliseconds collectiveTimeout{30000};
};

/// What Cluster::restart did.
struct RestartReport {
  /// Global ranks whose worker process was replaced (it had died, or did not
  /// become idle in time): their tensors and programs are gone. Sorted.
  std::vector<int> replacedRanks;
  /// Why each replaced worker process was replaced (its death reason).
  std::vector<std::string> reasons;
  /// The rendezvous generation every worker uses from now on.
  uint64_t generation = 0;
};

class Cluster {
public:
  explicit Cluster(const ClusterOptions &options);
  ~Cluster();
  Cluster(const Cluster &) = delete;
  Cluster &operator=(const Cluster &) = delete;

  int worldSize() const;
  std::string hostOf(int rank) const;
  /// The CUDA devices the worker process of `rank` reported in its Hello;
  /// when 0, `whyNone` says why (its words).
  int cudaDevicesOf(int rank, std::string &whyNone) const;

  /// Sends the class programs of a compiled function (of one mesh, whose
  /// global ranks in row-major order are `meshRanks`): one UploadProgram per
  /// worker process hosting ranks of the mesh, with the programs its ranks
  /// run; each rank keeps its own under `programId`. A `deviceType` other
  /// than "cpu" ("cuda") makes the rank at mesh position p compute on device
  /// `deviceOrdinals[p]` of its worker (one ordinal per position;
  /// DevicePlacement.h).
  void
  uploadPrograms(uint64_t programId,
                 const std::vector<const ::dtorch::wire::Program *> &programs,
                 const std::vector<int64_t> &meshRanks,
                 const std::string &deviceType = "cpu",
                 const std::vector<int32_t> &deviceOrdinals = {});
  /// Runs an uploaded program on `rank`: inputs bind to the program's inputs,
  /// outputs name the buffers it creates.
  void run(int rank, uint64_t programId,
           const std::vector<TensorHandle> &inputs,
           const std::vector<TensorHandle> &outputs);
  /// Runs the program each of `ranks` holds under `programId` with the same
  /// handles and random seeds (`seed_slot` values): one RunProgram message
  /// per worker process, naming its ranks.
  /// `donated` (handles among `inputs`) are consumed by the run on every
  /// rank (RankState::run, RunProgram.donated).
  void run(const std::vector<int64_t> &ranks, uint64_t programId,
           const std::vector<TensorHandle> &inputs,
           const std::vector<TensorHandle> &outputs,
           const std::vector<int64_t> &seeds = {},
           const std::vector<TensorHandle> &donated = {},
           uint64_t speculationId = 0);
  /// Speculation (docs/speculation.md, RunProgram.speculation_id): asks
  /// every rank of `ranks` to start running program `programId` on the
  /// leading inputs `inputs` of a run not sent yet, to bind more of them
  /// (`extend`), or, with `drop`, to discard the paused run. One Speculate
  /// message per worker process; nothing is awaited. Ignored where a worker
  /// is lost.
  void speculate(const std::vector<int64_t> &ranks, uint64_t speculationId,
                 uint64_t programId, const std::vector<TensorHandle> &inputs,
                 bool extend, bool drop = false);
  void put(int rank, TensorHandle handle, const Tensor &value);
  std::future<Tensor> fetch(int rank, TensorHandle handle);
  /// What `rank` holds (its buffer table), answered after every request
  /// sent to that rank before this one: it reflects their puts, runs and
  /// frees. Fails with WorkerError when the rank's worker is dead.
  std::future<MemoryStats> memoryStats(int rank);
  /// The profiler request of `rank` (RankState::trace), answered after
  /// every request sent to that rank before this one; the chunk names the
  /// worker's host and its clock when it answered.
  std::future<TraceChunk> trace(int rank, TraceAction action, size_t capacity,
                                size_t maxEvents);
  /// A checkpoint request for `request.rank()` (Checkpoint.h: write its
  /// pieces, or read regions of saved chunks), answered after every request
  /// sent to that rank before this one. A failed write or read is a reply
  /// with ok = false; a dead worker fails the future with WorkerError.
  std::future<::dtorch::wire::CheckpointReply>
  checkpoint(const ::dtorch::wire::CheckpointRequest &request);
  void free(int rank, const std::vector<TensorHandle> &handles);
  /// Frees `handles` on every rank of `ranks`: one message per process.
  void free(const std::vector<int64_t> &ranks,
            const std::vector<TensorHandle> &handles);
  /// Waits until every worker finished all work sent so far.
  void synchronize();
  /// True when the worker hosting one of `ranks` died or stopped answering.
  bool anyRankLost(const std::vector<int64_t> &ranks) const;
  /// Stops the workers this cluster started (within 2 s) and closes sockets.
  void shutdown();
  /// Makes the cluster whole again after a worker died (or at any time):
  /// every surviving worker finishes the work sent before, then rebuilds its
  /// communicators under a new rendezvous generation and keeps its tensors
  /// and programs; a survivor that does not do so within `idleBound` (it is
  /// stuck, e.g. in a collective with a dead peer) is killed: the silent
  /// ones (no heartbeat) first, then, when a further round still leaves
  /// some unanswered, the busy ones. Every dead or
  /// killed worker process is then replaced by a fresh one hosting the same
  /// ranks (new handshake, nothing uploaded), and errors queued so far are
  /// dropped. Waits for all of it (up to 30 s for a new process's handshake).
  /// Workers started by hand cannot be replaced: when one of them is gone,
  /// this throws WorkerError naming it and its address before doing
  /// anything (when none is gone their communicators are reset as above,
  /// and one that is stuck makes it throw). Throws WorkerError when a
  /// replacement fails to start.
  RestartReport restart(
      std::chrono::milliseconds idleBound = std::chrono::milliseconds(2000));
  /// Whether a worker process is known to be dead (died, or was declared
  /// dead as silent) and not yet replaced by restart(). Cheap: no lock.
  bool hasDeadWorker() const;

  /// For tests: messages sent to workers, and requests whose reply was awaited.
  uint64_t messagesSent() const;
  uint64_t roundTrips() const;
  /// For tests: the operating-system pid of the worker process hosting `rank`.
  int64_t pidOf(int rank) const;

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
};

} // namespace dtorch::rt
