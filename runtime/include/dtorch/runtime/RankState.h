// What one rank keeps between the controller's requests: its live tensors by
// handle, the programs uploaded to it (validated once, when they arrive) and
// the errors that poisoned tensors. The worker process
// (runtime/distributed/Worker.cpp) and the client's in-process backend
// (lib/Client/InProcessBackend.cpp) both hold one per rank, so a run, a
// failure and a fetch behave the same whichever backend serves them.
//
// Failure poisoning: when a run fails (unknown or invalid program, a poisoned
// or unknown input, a kernel or collective error), every output handle of the
// run is poisoned with the message. A later run that reads a poisoned tensor
// fails with the original message (so the root cause travels down the chain),
// and fetching a poisoned tensor raises it. put() and a successful run clear
// the poison of the handles they write; free() forgets both.
//
// Not thread-safe: one rank thread owns each RankState.
#pragma once

#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/MemoryStats.h"
#include "dtorch/runtime/SpeculativeRun.h"
#include "dtorch/runtime/Tensor.h"
#include "dtorch/runtime/Trace.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace dtorch::wire {
class Speculate;
} // namespace dtorch::wire

namespace dtorch::rt {

// Rank-independent class programs prepared once for all ranks of a process
// that run them: a class program with no mesh value, no mesh axis and no
// collective resolves to itself for every rank, so the first rank to need
// it validates it and the others share that copy. One per upload, shared by
// the ranks it reaches (thread-safe). Given the `owner` of the class
// programs (the upload message they lie in), a rank-independent one is
// not copied at all: it is checked where it lies and shared, the owner
// kept alive by every rank that holds it.
class SharedPreparation {
public:
  explicit SharedPreparation(std::shared_ptr<const void> owner = nullptr)
      : owner_(std::move(owner)) {}
  // The prepared program for `classProgram`, made by `prepare` on the first
  // call (or, with an owner and `check`, the class program itself once
  // `check` accepted it); nullptr when the program depends on the rank
  // (then every rank prepares its own).
  std::shared_ptr<const ::dtorch::wire::Program>
  get(const ::dtorch::wire::Program *classProgram,
      const std::function<::dtorch::wire::Program()> &prepare,
      const std::function<void(const ::dtorch::wire::Program &)> &check =
          nullptr);

private:
  std::shared_ptr<const void> owner_;
  std::mutex mutex_;
  // nullptr: rank-dependent.
  std::unordered_map<const ::dtorch::wire::Program *,
                     std::shared_ptr<const ::dtorch::wire::Program>>
      prepared_;
};

class RankState {
public:
  // `comm` runs the collectives of this rank's programs (nullptr when they
  // have none); not owned, must outlive this object.
  RankState(int rank, Communicator *comm);

  int rank() const { return rank_; }

  // Keeps `program` under `programId`, replacing an earlier upload with that
  // id, and validates it now (never again per run). A program that fails
  // validation is kept with the reason: every run of it fails with that
  // reason.
  void upload(uint64_t programId, ::dtorch::wire::Program program);

  // Keeps, under `programId`, this rank's program of a compiled function:
  // the class program of `classes` that runs at the context's coordinates,
  // resolved for them (Executor::prepare). When none runs there, or it is
  // invalid, every run of the id fails with the reason. With `shared`, a
  // rank-independent class program is prepared once for all the ranks that
  // pass the same `shared`. With a `device` (the mesh's: a GPU), the program
  // computes there: its inputs move to the device at their first run (the
  // table then keeps them there) and its outputs stay there.
  void upload(uint64_t programId,
              const std::vector<const ::dtorch::wire::Program *> &classes,
              const RankContext &context, SharedPreparation *shared = nullptr,
              Device *device = nullptr, bool deviceCollectives = false);

  // The communicator for tensors on `device` (NCCL for a GPU) that programs
  // uploaded with `deviceCollectives` run their collectives on; the others
  // on `device` carry theirs through host copies. Owned from now on.
  void setDeviceCommunicator(Device &device,
                             std::unique_ptr<Communicator> comm);
  bool hasDeviceCommunicator(Device &device) const {
    return deviceComms_.count(&device) != 0;
  }
  // The communicator that programs uploaded without device collectives (some
  // ranks of their mesh share a GPU) run their collectives on for tensors
  // on `device`: a DeviceCollectiveRouter (SharedDeviceCollectives.h) that
  // copies device to device among ranks of this process on one GPU and
  // carries the other groups through the host. Without one, all their
  // collectives go through the host. Owned from now on.
  void setSharedDeviceCommunicator(Device &device,
                                   std::unique_ptr<Communicator> comm);
  bool hasSharedDeviceCommunicator(Device &device) const {
    return sharedDeviceComms_.count(&device) != 0;
  }
  // A world restart (new rendezvous generation): every device communicator
  // is destroyed (NCCL: its communicators torn down with their peers of the
  // old world) before `make` builds its replacement for the same device
  // (the new generation's keys); a device for which `make` gives nullptr
  // is left without one (its collectives then go through the host). The
  // programs uploaded with device collectives use the new ones.
  void replaceDeviceCommunicators(
      const std::function<std::unique_ptr<Communicator>(Device &)> &make);

  // Keeps `programId` as refused: every run of it fails with `reason`.
  void reject(uint64_t programId, const std::string &reason);

  // Runs program `programId` on the tensors of `inputs` and stores its
  // outputs under `outputs`. On failure every handle of `outputs` is
  // poisoned and the message is returned ("rank R: ..." for the failures of
  // this run; the original message when an input was already poisoned).
  // `seeds` fill the program's random seed slots (`seed_slot`).
  // `donated` (handles among `inputs`) are consumed by the run: they leave
  // the table when it starts (a failed run poisons them like its outputs),
  // and an output the program pairs with one (Program.output_donors) takes
  // its storage when no other handle shares it (Executor::runValidated).
  // `speculationId` (non-zero): the run confirms that speculation
  // (speculate): when this rank holds it paused, for this program and with
  // a prefix of `inputs`, the paused run is finished instead of a new one
  // started. Any other run first drops a paused one. `receivedNs`
  // (traceClockNs(); negative: unknown) is when the message arrived, where
  // the run's "setup" trace spans begin (Trace.h: SetupTrace).
  std::optional<std::string> run(uint64_t programId,
                                 const std::vector<uint64_t> &inputs,
                                 const std::vector<uint64_t> &outputs,
                                 const std::vector<int64_t> &seeds = {},
                                 const std::vector<uint64_t> &donated = {},
                                 uint64_t speculationId = 0,
                                 int64_t receivedNs = -1);

  // Speculation (SpeculativeRun.h, docs/speculation.md, RankSpeculation.cpp):
  // starts running program `programId` on the tensors of `inputs` (the
  // leading inputs of a run still being recorded) as far as they allow,
  // and keeps the run paused under `speculationId` (one at a time: a
  // paused one is dropped first). Nothing starts when a handle is unknown
  // or poisoned, or the program cannot be speculated; the confirming run
  // then runs as usual. Returns whether a run is paused now.
  bool speculate(uint64_t speculationId, uint64_t programId,
                 const std::vector<uint64_t> &inputs);
  // Binds `inputs` as the paused run's next inputs and runs on; ignored
  // unless speculation `speculationId` is paused.
  void extendSpeculation(uint64_t speculationId,
                         const std::vector<uint64_t> &inputs);
  // Discards the paused run (`speculationId` 0: whichever is paused).
  void dropSpeculation(uint64_t speculationId = 0);
  struct SpeculationCounts {
    uint64_t started = 0, confirmed = 0, dropped = 0;
    // Instructions run while paused runs waited (confirmed ones only).
    uint64_t instructions = 0;
  };
  SpeculationCounts speculationCounts() const { return speculationCounts_; }
  bool speculating() const { return speculation_ != nullptr; }

  // Stores `value` under `handle` and clears any poison on it.
  void put(uint64_t handle, Tensor value);

  // Marks `handle` as failed: its tensor is dropped, and fetching it or
  // running a program that reads it fails with `message`.
  void poison(uint64_t handle, const std::string &message);

  // The tensor under `handle` (shared storage). Throws RuntimeError with the
  // poisoning message, or naming the handle when it is unknown.
  const Tensor &fetch(uint64_t handle) const;
  // The same in host memory: a tensor on a device is copied out through a
  // pinned staging buffer (DevicePlacement.h).
  Tensor fetchToHost(uint64_t handle) const;

  // Forgets the tensors and poisons of `handles` (unknown ones are ignored).
  void free(const std::vector<uint64_t> &handles);

  // The execution plan kept for `programId` (nullptr: none yet, or plans
  // are off), for tests.
  std::shared_ptr<const ExecutionPlan> planOf(uint64_t programId) const;
  // Whether runs go through kept plans (Executor::setExecutionPlans;
  // default DTORCH_EXEC_PLAN). Off drops the kept ones.
  void setExecutionPlans(bool on);
  // Whether runs take the fast setup (Executor::fastSetup, default
  // DTORCH_FAST_SETUP); the same results and errors either way.
  bool fastSetup() const { return executor_.fastSetup(); }
  void setFastSetup(bool on);

  // Tensors held (poisoned handles are not counted).
  size_t liveTensors() const { return tensors_.size(); }
  bool isPoisoned(uint64_t handle) const { return poisoned_.count(handle); }

  // The buffer table: live tensors, their bytes (distinct storages) in all
  // and by dtype, and every handle with its size. Reflects every put, run
  // and free handled so far.
  MemoryStats memoryStats() const;

  // The profiler (Trace.h): Start clears this rank's trace buffer and
  // records every run and instruction from now on (at most `capacity`
  // events, the rest counted dropped); Drain stops recording and hands over
  // up to `maxEvents` of them (the rest stay for the next Drain). The chunk
  // carries this process's clock at the answer.
  TraceChunk trace(TraceAction action, size_t capacity, size_t maxEvents);
  // The buffer the executor records into (for the backends and tests).
  TraceBuffer &traceBuffer() { return *trace_; }

private:
  struct Uploaded {
    std::shared_ptr<const ::dtorch::wire::Program> program;
    std::string invalid;      // why validation refused it; empty when valid
    Device *device = nullptr; // where it computes; nullptr: the CPU
    bool deviceCollectives = false;
    // Made by its first run (Executor::makePlan), kept for the next ones;
    // dropped when the id gets another program.
    std::shared_ptr<ExecutionPlan> plan;
  };
  std::unordered_map<Device *, std::unique_ptr<Communicator>> deviceComms_;
  std::unordered_map<Device *, std::unique_ptr<Communicator>>
      sharedDeviceComms_;
  std::string prefixed(const std::string &message) const;
  void poisonAll(const std::vector<uint64_t> &handles,
                 const std::string &message);

  int rank_;
  std::unique_ptr<TraceBuffer> trace_;
  Executor executor_;
  std::unordered_map<uint64_t, Tensor> tensors_;
  std::unordered_map<uint64_t, std::string> poisoned_; // handle -> error
  std::unordered_map<uint64_t, Uploaded> programs_;
  // Bytes of the distinct storages of the table.
  uint64_t tableBytes() const;
  // The same after a run (fast setup): of the table and of the run's
  // consumed inputs (`consumed` sorted; `values` by input), which it no
  // longer holds.
  uint64_t tableBytesWith(const std::vector<uint64_t> &inputs,
                          const std::vector<Tensor> &values,
                          const std::vector<uint64_t> &consumed);
  // What a run reuses with the fast setup (Executor::fastSetup), so that
  // its setup allocates nothing of its own: the inputs' tensors, the
  // donated handles sorted, and tableBytesWith's storages.
  struct StorageBytes {
    const void *data;
    size_t order;
    uint64_t bytes;
  };
  struct RunScratch {
    std::vector<Tensor> values;
    std::vector<uint64_t> donated;
    std::vector<StorageBytes> storages;
  } scratch_;
  // Memory of the last run and the high-water mark (MemoryStats).
  uint64_t lastRunArenaBytes_ = 0;
  uint64_t lastRunPeakBytes_ = 0;
  uint64_t lastRunDonatedBytes_ = 0;
  mutable uint64_t peakBytes_ = 0;

  // The paused speculative run, its id, program and bound input handles;
  // dropped before anything could change what it read. Last: it holds the
  // executor's arena, so it goes first.
  std::unique_ptr<SpeculativeRun> speculation_;
  uint64_t speculationId_ = 0;
  uint64_t speculationProgram_ = 0;
  std::vector<uint64_t> speculationInputs_;
  SpeculationCounts speculationCounts_;
  // Drops the paused run when it read one of `handles`.
  void dropSpeculationReading(const uint64_t *handles, size_t count);
  // The paused run when `run` continues it, else nullptr (dropped).
  std::unique_ptr<SpeculativeRun>
  takeSpeculation(uint64_t speculationId, uint64_t programId,
                  const std::vector<uint64_t> &inputs);
};

// Serves one Speculate message of the worker protocol on `state`
// (RankSpeculation.cpp): START, EXTEND or DROP.
void serveSpeculate(RankState &state, const ::dtorch::wire::Speculate &message);

} // namespace dtorch::rt
