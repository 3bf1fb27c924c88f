// Runs one per-rank program: a COMPUTE stream (kernels from the registry, on
// the calling thread) and a COMM stream (collectives through the
// Communicator, on the executor's communication thread, started once and
// kept across runs), instructions of a stream in program order, synchronized
// only by the program's events.
#pragma once

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/ExecutionPlan.h"
#include "dtorch/runtime/MeshContext.h"
#include "dtorch/runtime/StreamThread.h"
#include "dtorch/runtime/Tensor.h"
#include "dtorch/runtime/Trace.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dtorch::rt {

namespace detail {
class RunState;
} // namespace detail

// What the last run of an executor allocated.
struct RunMemory {
  // The program's arena_bytes: the peak bytes of its planned temporaries
  // (0 for a program without buffer planning).
  uint64_t arenaBytes = 0;
  // Bytes of the buffers that had their own storage allocated by the run
  // (outputs, and every temporary of a program without planning).
  uint64_t ownBytes = 0;
  // Allocations made for the run: one per own buffer, plus one when the
  // arena had to grow (never one per planned temporary).
  uint64_t allocations = 0;
  // Outputs that took a donated input's storage instead of their own, and
  // their bytes (not counted in ownBytes).
  uint64_t donations = 0;
  uint64_t donatedBytes = 0;
  // Reshapes run as views of their input (an input or a buffer with storage
  // of its own; no copy, no storage of their own).
  uint64_t reshapeViews = 0;
};

class Executor {
public:
  // `comm` may be nullptr when the program has no collectives. Not owned.
  explicit Executor(Communicator *comm);
  Executor(Executor &&) = default;
  Executor &operator=(Executor &&) = default;

  // Validates the program (ProgramValidator.h), binds `inputs` to
  // program.inputs() in order (dtype and shape are checked), runs it and
  // returns the output buffers in program.outputs() order. Throws
  // RuntimeError whose message names the failing instruction index, its op
  // and its location field. `seeds` are the run's random seeds: a random
  // instruction with a `seed_slot` attribute reads its seed from them.
  std::vector<Tensor> run(const ::dtorch::wire::Program &program,
                          const std::vector<Tensor> &inputs,
                          const std::vector<int64_t> &seeds = {});

  // The two halves of run(), for callers that keep programs: validate once
  // when a program arrives, then run it as often as asked without
  // re-validating (the steady-state path of a training loop).
  void validate(const ::dtorch::wire::Program &program) const;

  // A class program made ready for the rank of `context` (MeshContext.h):
  // checked, resolved for the rank's coordinates and validated. Throws
  // RuntimeError. The communicator, when there is one, must be that rank's.
  ::dtorch::wire::Program prepare(const ::dtorch::wire::Program &program,
                                  const RankContext &context) const;
  // What prepare checks, for a class program that resolves to itself
  // (rankIndependent): the same errors, without making a copy.
  void checkPrepared(const ::dtorch::wire::Program &program,
                     const RankContext &context) const;
  // `donated` (empty, or one flag per input): inputs the caller gives up.
  // An output that Program.output_donors pairs with a donated input whose
  // storage no other Tensor shares (Tensor::soleOwner, counting `inputs`'
  // own copy as the one holder) is written into that storage instead of
  // its own; otherwise it gets its own as usual, so results are the same.
  std::vector<Tensor> runValidated(const ::dtorch::wire::Program &program,
                                   const std::vector<Tensor> &inputs,
                                   const std::vector<int64_t> &seeds = {},
                                   const std::vector<bool> &donated = {});

  // A plan of `program` (ExecutionPlan.h) for this executor and its
  // current device; `program` must be validated (validate, prepare) and
  // outlives the plan (which shares it). Throws RuntimeError where a run
  // would (a host kernel on a device, a kernel missing for the device).
  std::shared_ptr<ExecutionPlan>
  makePlan(std::shared_ptr<const ::dtorch::wire::Program> program) const;
  // Whether `plan` was made by this executor for its current device and
  // the kernel registry as it is (else make another).
  bool canRun(const ExecutionPlan &plan) const;
  // runValidated of the plan's program, walking the plan. Falls back to
  // resolving the program anew when the plan is in use by another run or
  // the arena is (a concurrent run of this executor).
  std::vector<Tensor> runPlanned(ExecutionPlan &plan,
                                 const std::vector<Tensor> &inputs,
                                 const std::vector<int64_t> &seeds = {},
                                 const std::vector<bool> &donated = {});
  // Whether runValidated goes through a plan made for the run (default:
  // executionPlansByDefault(), DTORCH_EXEC_PLAN). RankState keeps plans
  // across runs when this is on.
  bool executionPlans() const { return executionPlans_; }
  void setExecutionPlans(bool on) { executionPlans_ = on; }

  // The memory of the last run (runValidated), and the bytes of the arena
  // the executor keeps between runs.
  RunMemory lastRunMemory() const { return lastRun_; }
  uint64_t arenaCapacity() const;
  // The communication stream's thread, the same for every run (a default id
  // before the first run with collectives).
  std::thread::id commThreadId() const;
  // Where each instruction run is recorded while `trace` is recording
  // (Trace.h); nullptr: nowhere. Not owned.
  void setTrace(TraceBuffer *trace) { trace_ = trace; }
  // The phases of the current run's setup (Trace.h: "setup" spans): the
  // caller begins it at the message's receipt, the executor marks its
  // binding phases and the hand-off to the first kernel.
  SetupTrace &setupTrace() { return setupTrace_; }
  // Whether runs take the fast setup (fastSetupByDefault(),
  // DTORCH_FAST_SETUP); the same results either way.
  bool fastSetup() const { return fastSetup_; }
  void setFastSetup(bool on) { fastSetup_ = on; }

  // The device the executor computes on (the CPU unless set): its buffers
  // and arena live there, inputs on another device are copied over, kernels
  // are looked up under the device's name, and on a device with streams the
  // compute instructions run on a stream of the executor's, synchronized at
  // the end of each run. Collectives on such a device run on a
  // communication stream that waits, through device events, for the kernels
  // that wrote their inputs (not for later ones); they go to the device
  // communicator when one is set (setDeviceCommunicator: NCCL, which orders
  // its own stream after the calling thread's), else to the host
  // communicator through pinned host copies (after those kernels).
  // Generated GPU kernels go to the launcher the device registered
  // (registerDeviceKernelLauncher). Not owned.
  void setDevice(Device &device);
  Device &device() const { return *device_; }
  // A communicator that takes tensors in the memory of the executor's
  // device (nullptr: none, collectives go through host copies). It must be
  // for the same rank as the host communicator. Not owned.
  void setDeviceCommunicator(Communicator *comm) { deviceComm_ = comm; }

private:
  friend class SpeculativeRun; // SpeculativeRun.h: binds as runPlanned does
  // Planned buffers (Program.buffer_offsets) are views into one arena that
  // the executor keeps across runs and grows to the largest arena_bytes it
  // has run, so a cached program allocates no temporaries. A run that finds
  // it in use (a concurrent run of the same executor) uses its own.
  // Plans keep views into it (ExecutionPlan::Bindings): replacing the
  // storage bumps `generation` and releases their views.
  struct Arena {
    std::mutex mutex;
    Tensor storage;
    uint64_t generation = 0;
    std::vector<std::weak_ptr<ExecutionPlan::Bindings>> views;
    // Drops the storage (and every plan's view of it); under `mutex`.
    void release();
  };

  // The run before plans: resolves `program` anew.
  std::vector<Tensor> runUnplanned(const ::dtorch::wire::Program &program,
                                   const std::vector<Tensor> &inputs,
                                   const std::vector<int64_t> &seeds,
                                   const std::vector<bool> &donated);
  // Runs the plan's instructions on its bound buffers (runPlanned).
  void runSteps(ExecutionPlan &plan, const std::string &prefix,
                const std::vector<int64_t> &seeds);
  // What both ways of running share. runStreams: `compute` on this thread
  // (on a device, with the compute stream current) and, with `hasComm`,
  // `comm` on the communication thread beside it (with the communication
  // stream current), marking the hand-off in the setup trace when
  // `markHandOff`; returns when both ended, even when one failed.
  void runStreams(bool hasComm, bool markHandOff,
                  const std::function<void()> &compute,
                  const std::function<void()> &comm);
  // One COMM instruction: on the host, or on a device after the kernels
  // that wrote its inputs (`deviceEvents`, by event id); returns the bytes
  // it moved when they depend on the data, else -1.
  int64_t runCommInstruction(const ::dtorch::wire::Instruction &inst,
                             const std::vector<const Tensor *> &in,
                             const std::vector<Tensor *> &out,
                             const std::vector<Event *> &deviceEvents);
  // Signals `event`, recorded by an instruction of the compute stream
  // (`onCompute`) or the communication one; on a device the compute
  // stream also records its device event for the collectives waiting.
  void signalEvent(detail::RunState &state, int event, bool onCompute,
                   const std::vector<Event *> &deviceEvents);
  // After the streams ran: waits for a device's compute stream (its
  // asynchronous errors) and rethrows the run's first failure.
  void finishRun(detail::RunState &state, const std::string &prefix);

  Communicator *comm_;
  Communicator *deviceComm_ = nullptr;
  std::shared_ptr<Arena> arena_ = std::make_shared<Arena>();
  RunMemory lastRun_;
  // Started by the first run whose program has COMM instructions.
  std::unique_ptr<StreamThread> commStream_;
  TraceBuffer *trace_ = nullptr;
  SetupTrace setupTrace_;
  bool executionPlans_ = executionPlansByDefault();
  bool fastSetup_ = fastSetupByDefault();
  Device *device_ = &cpuDevice();
  std::unique_ptr<Stream> computeStream_; // non-CPU devices
  // On a device: the stream the COMM instructions queue on (the current
  // stream of the communication thread), and one event per event id that a
  // COMPUTE instruction records and a COMM one waits for, recorded on the
  // compute stream after the kernel and waited for by this stream, so a
  // collective waits for the kernels that wrote its inputs and nothing
  // later (NCCL overlapping compute).
  std::unique_ptr<Stream> commDeviceStream_;
  std::vector<std::unique_ptr<Event>> deviceEvents_;
  // The events of this run by event id (null where none is needed).
  std::vector<Event *>
  prepareDeviceEvents(const ::dtorch::wire::Program &program);
};

} // namespace dtorch::rt
