// What an executor resolves once per uploaded program instead of on every
// run (Executor::makePlan, Executor::runPlanned): each instruction's kernel
// (a registry entry, a generated kernel's entry points, a device kernel),
// its operand buffer ids, its decoded scalars and events, the instructions
// of each stream, every buffer's dtype, shape and arena offset, and which
// buffers a run binds anew (inputs, outputs, reshape views, donations)
// rather than keeping (views into the executor's arena, bound once per
// arena). RankState keeps one per uploaded program, next to the program,
// so a cached step binds its inputs and walks the plan. MLIR-free.
//
// `DTORCH_EXEC_PLAN=0` turns plans off (executionPlansByDefault): every run
// then resolves the program anew, as before plans; the results are the
// same bit for bit either way.
#pragma once

#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/Tensor.h"
#include "dtorch/runtime/Trace.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtorch::rt {

class Device;
class Executor;
class ExecutionPlan;
struct SpeculationLimits; // SpeculativeRun.h
SpeculationLimits analyzeSpeculation(const ExecutionPlan &plan);

// Whether a new Executor runs programs through plans: false when
// DTORCH_EXEC_PLAN is "0" (read once per process), else true.
bool executionPlansByDefault();

// Whether a run's setup (RankState::run, Executor::runPlanned,
// SpeculativeRun) reuses per-plan and per-rank scratch instead of
// allocating per run, keeps a plan's speculation limits, and counts the
// table's bytes after the run rather than before its first kernel: false
// when DTORCH_FAST_SETUP is "0" (read once per process), else true. The
// same buffers, results and errors either way.
bool fastSetupByDefault();

class ExecutionPlan {
public:
  const ::dtorch::wire::Program &program() const { return *program_; }
  // Instructions resolved: kernels, generated kernels and collectives.
  size_t instructionCount() const { return compute_.size() + comm_.size(); }
  // Buffers that every run binds anew (inputs, and buffers outside the
  // arena or that a run may bind otherwise), and the arena views the plan
  // keeps between runs while the arena stays the same.
  size_t perRunBufferCount() const {
    return inputIds_.size() + perRunIds_.size();
  }
  size_t keptArenaViewCount() const { return bindings_->arenaIds.size(); }
  // Whether the arena views are bound now (false before the first run and
  // after the executor replaced its arena).
  bool arenaViewsBound() const;

  ExecutionPlan(const ExecutionPlan &) = delete;
  ExecutionPlan &operator=(const ExecutionPlan &) = delete;

private:
  friend class Executor;
  friend class SpeculativeRun; // SpeculativeRun.h: a run started early
  friend SpeculationLimits analyzeSpeculation(const ExecutionPlan &plan);
  ExecutionPlan() = default;

  enum class StepKind : uint8_t {
    Library,              // a registry kernel
    Generated,            // a generated host kernel
    GeneratedMultiTensor, // a generated host multi-tensor optimizer kernel
    DeviceGenerated,      // a generated GPU kernel (the device's launcher)
    Collective,           // the COMM stream
  };
  struct Step {
    StepKind kind = StepKind::Library;
    int32_t index = 0; // the instruction's index in the program
    const ::dtorch::wire::Instruction *instruction = nullptr;
    const Kernel *kernel = nullptr;
    GeneratedKernelFn whole = nullptr;
    GeneratedRowsKernelFn rows = nullptr;
    const ::dtorch::wire::Executable *deviceCode = nullptr;
    uint32_t firstOperand = 0; // into operands_: inputs, then outputs
    uint32_t numInputs = 0;
    uint32_t numOutputs = 0;
    uint32_t firstScalar = 0; // into scalars_
    uint32_t firstWait = 0;   // into waits_
    uint32_t numWaits = 0;
    int32_t recordEvent = -1;
  };
  struct BufferInfo {
    DType dtype = ::dtorch::wire::DTYPE_INVALID;
    std::vector<int64_t> shape;
    int64_t numel = 0;
    int64_t offset = -1; // in the arena; -1: storage of its own
    // A reshape that may bind this buffer as a view of `reshapeSource`
    // (-1: none); when the source is an input, only while the input of
    // index `reshapeSourceInput` is not donated to the run.
    int32_t reshapeSource = -1;
    int32_t reshapeSourceInput = -1;
  };
  // The buffers a run binds: the arena views, bound once per arena, and
  // the rest, bound by each run and dropped at its end. The executor's
  // arena keeps a weak reference and drops the views when it replaces its
  // storage, so an old arena is not kept alive by plans. The views are
  // touched only under the arena's mutex.
  struct Bindings {
    std::vector<Tensor> buffers; // by buffer id
    std::vector<int32_t> arenaIds;
    uint64_t generation = 0;
    bool bound = false;
    void releaseArenaViews();
  };

  std::shared_ptr<const ::dtorch::wire::Program> program_;
  std::string prefix_; // "program '<name>': ", for errors
  // What every run of the plan fails with, once its inputs are bound (a
  // kernel missing for the device, host code on a GPU, ...); empty: none.
  std::string error_;
  const void *arenaOwner_ = nullptr; // the executor's arena it was made for
  Device *device_ = nullptr;
  uint64_t registryGeneration_ = 0;
  bool onCpu_ = true;
  bool planned_ = false; // buffer planning: the arena holds temporaries
  int64_t arenaBytes_ = 0;
  int numEvents_ = 0;

  std::vector<Step> compute_;
  std::vector<Step> comm_;
  std::vector<int32_t> operands_;
  std::vector<double> scalars_;
  std::vector<int32_t> waits_;
  // The COMPUTE instructions whose event a COMM one waits for (devices).
  std::vector<bool> commWaited_;
  bool deviceCode_ = false;

  std::vector<BufferInfo> bufferInfo_;
  std::vector<int32_t> inputIds_;  // program.inputs()
  std::vector<int32_t> perRunIds_; // ascending: bound by each run
  // The arena's buffers (bindings_->arenaIds): bound once per arena.
  std::vector<int32_t> outputIds_; // program.outputs()
  // Per output: whether results may take its buffer (its last mention).
  std::vector<bool> outputMoves_;
  bool donors_ = false; // output_donors pairs outputs with inputs

  // State of a run (one at a time: busy_), kept to allocate nothing.
  std::atomic<bool> busy_{false};
  std::shared_ptr<Bindings> bindings_ = std::make_shared<Bindings>();
  std::vector<Tensor> taken_; // donated storage by output buffer
  std::vector<int32_t> takenIds_;
  std::shared_ptr<const InstructionLabels> labels_; // made when traced

  // What running one step needs besides the plan, kept by the caller for
  // the whole run so that no step allocates.
  struct StepOperands {
    std::vector<const Tensor *> in;
    std::vector<Tensor *> out;
    std::vector<void *> inData, outData;
  };
  // Kept between runs (fast setup): the step operands of a run, and the
  // plan's speculation limits (SpeculativeRun.h), made at its first
  // speculation.
  StepOperands stepScratch_;
  std::shared_ptr<const SpeculationLimits> speculationLimits_;

  // Makes labels_ (the trace's instruction labels) when it is missing.
  void ensureLabels();
  // The run's outputs from the bound buffers, in program order: a buffer
  // an output names for the last time is moved out unless it is an arena
  // view (kept bound); anything else is copied. Runs planned and
  // speculative (SpeculativeRun::finish) end with it.
  std::vector<Tensor> collectResults(std::vector<Tensor> &buffers) const;
  // Points `ops.in`/`ops.out` at `step`'s buffers.
  void bindStepOperands(const Step &step, std::vector<Tensor> &buffers,
                        StepOperands &ops) const;
  // Fills `ops.inData`/`ops.outData` with the bound buffers' data.
  static void collectStepData(StepOperands &ops);
  // Runs a host kernel step (Library, Generated, GeneratedMultiTensor) on
  // its bound operands; false for any other kind, which it leaves alone.
  bool runHostKernelStep(const Step &step, const std::vector<int64_t> &seeds,
                         StepOperands &ops) const;
};

} // namespace dtorch::rt
