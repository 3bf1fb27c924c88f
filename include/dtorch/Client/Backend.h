//===- Backend.h - where the controller runs per-rank programs ----*- C++
//-*-===//
//
// The controller drives workers through this interface. Two backends:
// the real one over rt::Cluster (worker processes, ZeroMQ) and an in-process
// one (one thread per rank, fake collectives) for tests and quick runs.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/runtime/Checkpoint.h"
#include "dtorch/runtime/MemoryStats.h"
#include "dtorch/runtime/Tensor.h"
#include "dtorch/runtime/Trace.h"

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

namespace dtorch::client {

using Handle = uint64_t;

class Backend {
public:
  virtual ~Backend() = default;
  virtual int worldSize() const = 0;
  virtual std::string hostOf(int rank) const = 0;
  /// CUDA devices the process of `rank` has; when 0, `whyNone` says why.
  /// Backends without workers run on the CPU.
  virtual int cudaDevicesOf(int rank, std::string &whyNone) const {
    whyNone = "ranks of this backend run in the client process, on the CPU";
    return 0;
  }
  /// Uploads the class programs of one compiled function (each names the
  /// mesh positions that run it) for the mesh whose global ranks, in
  /// row-major order, are `meshRanks`; every rank of the mesh keeps its own
  /// program under `programId`.
  virtual void uploadPrograms(uint64_t programId,
                              const std::vector<wire::Program> &programs,
                              const std::vector<int64_t> &meshRanks) = 0;
  /// The same for a mesh whose ranks compute on devices of `deviceType`
  /// ("cuda"): the rank at mesh position p on device `deviceOrdinals[p]` of
  /// its worker. Backends without workers have no such device.
  virtual void uploadProgramsOnDevice(
      uint64_t programId, const std::vector<wire::Program> &programs,
      const std::vector<int64_t> &meshRanks, const std::string &deviceType,
      const std::vector<int32_t> &deviceOrdinals);
  /// Runs, on every rank of `ranks`, the program that rank holds under
  /// `programId`, with the same handles and random seeds (the values of the
  /// programs' `seed_slot`s). A step of a training loop is this one call:
  /// one message per worker process.
  virtual void run(const std::vector<int64_t> &ranks, uint64_t programId,
                   const std::vector<Handle> &inputs,
                   const std::vector<Handle> &outputs,
                   const std::vector<int64_t> &seeds) = 0;
  /// run() whose `donated` inputs (handles among `inputs` that the caller
  /// names nowhere else, freed by it afterwards as usual) the run consumes:
  /// an output that its program pairs with one (Program.output_donors)
  /// takes that input's storage (rt::RankState::run). A backend that cannot
  /// donate runs as run() does.
  virtual void runDonating(const std::vector<int64_t> &ranks,
                           uint64_t programId,
                           const std::vector<Handle> &inputs,
                           const std::vector<Handle> &outputs,
                           const std::vector<int64_t> &seeds,
                           const std::vector<Handle> &donated) {
    (void)donated;
    run(ranks, programId, inputs, outputs, seeds);
  }
  /// Speculation (docs/speculation.md): asks every rank of `ranks` to start
  /// running program `programId` on `inputs`, the leading inputs of a run
  /// not sent yet (`extend`: to bind them as the next ones and go on; `drop`:
  /// to discard the paused run). A backend without it ignores the request;
  /// the run that follows is then an ordinary one.
  virtual void speculate(const std::vector<int64_t> &ranks,
                         uint64_t speculationId, uint64_t programId,
                         const std::vector<Handle> &inputs, bool extend,
                         bool drop) {
    (void)ranks, (void)speculationId, (void)programId, (void)inputs,
        (void)extend, (void)drop;
  }
  /// runDonating() that confirms speculation `speculationId` (non-zero): a
  /// rank holding it paused for this program finishes it.
  virtual void runSpeculated(const std::vector<int64_t> &ranks,
                             uint64_t programId,
                             const std::vector<Handle> &inputs,
                             const std::vector<Handle> &outputs,
                             const std::vector<int64_t> &seeds,
                             const std::vector<Handle> &donated,
                             uint64_t speculationId) {
    (void)speculationId;
    runDonating(ranks, programId, inputs, outputs, seeds, donated);
  }
  /// One rank, no seeds.
  void run(int rank, uint64_t programId, const std::vector<Handle> &inputs,
           const std::vector<Handle> &outputs) {
    run(std::vector<int64_t>{rank}, programId, inputs, outputs, {});
  }
  virtual void put(int rank, Handle handle, const rt::Tensor &value) = 0;
  virtual std::future<rt::Tensor> fetch(int rank, Handle handle) = 0;
  /// What `rank` holds (its buffer table, rt::MemoryStats), answered in
  /// order with the requests sent to that rank before: every put, run and
  /// free before it is reflected. The simulated backend keeps no per-rank
  /// values: it answers `known = false` with zero counts.
  virtual std::future<rt::MemoryStats> memoryStats(int rank) = 0;
  /// The profiler request of `rank` (rt::RankState::trace), answered in
  /// order with the requests sent to that rank before. The simulated
  /// backend runs nothing: it answers `supported = false`, no events.
  virtual std::future<rt::TraceChunk> trace(int rank, rt::TraceAction action,
                                            size_t capacity,
                                            size_t maxEvents) = 0;
  /// A checkpoint request (rt::serveCheckpointRequest) on
  /// `request.rank()`, answered in order with the requests sent to that
  /// rank before. A failed write or read is a reply with ok = false. The
  /// simulated backend holds no values: it throws DTorchError.
  virtual std::future<wire::CheckpointReply>
  checkpoint(const wire::CheckpointRequest &request);
  /// Frees `handles` on every rank of `ranks` (one message per process).
  virtual void free(const std::vector<int64_t> &ranks,
                    const std::vector<Handle> &handles) = 0;
  void free(int rank, const std::vector<Handle> &handles) {
    free(std::vector<int64_t>{rank}, handles);
  }
  virtual void synchronize() = 0;
  /// True when the worker of one of `ranks` died or stopped answering: the
  /// controller then compiles and uploads nothing for a segment on those
  /// ranks, and run() only marks its results lost (fetching one raises
  /// WorkerError naming the lost worker).
  virtual bool anyRankLost(const std::vector<int64_t> &ranks) const {
    (void)ranks;
    return false;
  }
  virtual void shutdown() = 0;
  /// Makes the backend whole after a worker failed (rt::Cluster::restart):
  /// survivors keep their values and programs, replaced worker processes
  /// lose theirs. Returns the global ranks that lost them (sorted); errors
  /// queued before are dropped. A survivor not idle within `idleBound` is
  /// replaced too. Backends without worker processes lose nothing.
  virtual std::vector<int> restart(std::chrono::milliseconds idleBound) {
    (void)idleBound;
    return {};
  }
  /// Whether a worker is known to be dead and not yet replaced (what an
  /// automatic restart waits for). Called before every controller request:
  /// must be cheap.
  virtual bool hasDeadWorker() const { return false; }
  virtual uint64_t messagesSent() const = 0;
  virtual uint64_t roundTrips() const = 0;
};

/// Ranks as threads of this process with the fake collective backend.
std::unique_ptr<Backend> makeInProcessBackend(int worldSize);

/// Local worker processes (or given ones) through rt::Cluster.
struct ClusterConfig {
  int worldSize = 4;
  int numProcesses = 2;
  std::string workerExecutable;
  std::vector<std::string> workerAddresses;
  std::string token;
  /// Dial-in mode (rt::ClusterOptions::listenAddress, admissionTimeout;
  /// 0: its default).
  std::string listenAddress;
  int64_t admissionTimeoutMs = 0;
  std::string curveSecretKey;
  std::vector<std::string> curveWorkerPublicKeys;
  /// Fault detection (rt::ClusterOptions; 0: its default): heartbeat
  /// interval, silence after which a worker is declared unresponsive, and
  /// the deadline of every collective on the workers started here.
  int64_t heartbeatIntervalMs = 0;
  int64_t peerTimeoutMs = 0;
  int64_t collectiveTimeoutMs = 0;
};
std::unique_ptr<Backend> makeClusterBackend(const ClusterConfig &config);

/// Simulated workers: every request is answered at once and nothing runs.
/// Uploaded programs are validated (rt::validateProgram, as a worker does),
/// runs of invalid or unknown programs poison their outputs, and a fetch
/// returns zeros of the piece's local shape and dtype (from the program's
/// output buffer, or the put value). messagesSent() counts the messages a
/// cluster of `numProcesses` processes (contiguous rank blocks) would get.
/// For measuring the controller alone at any world size.
std::unique_ptr<Backend> makeSimulatedBackend(int worldSize, int numProcesses);

/// "cluster", "inprocess" or "simulated" (the in-process one uses only
/// config.worldSize).
std::unique_ptr<Backend> makeBackend(const std::string &kind,
                                     const ClusterConfig &config);

} // namespace dtorch::client
