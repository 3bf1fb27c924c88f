// Execution plans (ExecutionPlan.h): what Executor::makePlan resolves once
// per program, and Executor::runPlanned, which binds a run's inputs and
// walks the plan. The rules for binding buffers are those of the run
// without a plan (Executor::runUnplanned), applied to what the plan
// precomputed, so both give the same buffers and the same results.
#include "dtorch/runtime/ExecutionPlan.h"

#include "ExecutorSupport.h"

#include "dtorch/runtime/DevicePlacement.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/Shape.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace dtorch::rt {

using ::dtorch::wire::Instruction;
using ::dtorch::wire::Program;

bool executionPlansByDefault() {
  static const bool on = [] {
    const char *value = std::getenv("DTORCH_EXEC_PLAN");
    return !(value && std::strcmp(value, "0") == 0);
  }();
  return on;
}

bool fastSetupByDefault() {
  static const bool on = [] {
    const char *value = std::getenv("DTORCH_FAST_SETUP");
    return !(value && std::strcmp(value, "0") == 0);
  }();
  return on;
}

void ExecutionPlan::Bindings::releaseArenaViews() {
  for (int32_t id : arenaIds)
    buffers[id] = Tensor();
  bound = false;
}

bool ExecutionPlan::arenaViewsBound() const { return bindings_->bound; }

bool Executor::canRun(const ExecutionPlan &plan) const {
  return plan.arenaOwner_ == arena_.get() && plan.device_ == device_ &&
         plan.registryGeneration_ == KernelRegistry::global().generation();
}

std::shared_ptr<ExecutionPlan>
Executor::makePlan(std::shared_ptr<const Program> shared) const {
  std::shared_ptr<ExecutionPlan> plan(new ExecutionPlan());
  const Program &program = *shared;
  plan->program_ = std::move(shared);
  plan->arenaOwner_ = arena_.get();
  plan->device_ = device_;
  plan->registryGeneration_ = KernelRegistry::global().generation();
  plan->prefix_ = "program '" + program.name() + "': ";
  bool onCpu = device_->kind() == DeviceKind::Cpu;
  plan->onCpu_ = onCpu;
  plan->planned_ = program.buffer_offsets_size() == program.buffers_size() &&
                   program.arena_bytes() > 0;
  plan->arenaBytes_ = program.arena_bytes();
  plan->numEvents_ = program.num_events();

  // Buffers: what each is, and which a run binds.
  size_t numBuffers = static_cast<size_t>(program.buffers_size());
  plan->bufferInfo_.resize(numBuffers);
  for (size_t id = 0; id < numBuffers; ++id) {
    const auto &spec = program.buffers(static_cast<int>(id));
    ExecutionPlan::BufferInfo &info = plan->bufferInfo_[id];
    info.dtype = spec.dtype();
    info.shape.assign(spec.shape().begin(), spec.shape().end());
    info.numel = 1;
    for (int64_t extent : info.shape)
      info.numel *= extent;
    info.offset =
        plan->planned_ ? program.buffer_offsets(static_cast<int>(id)) : -1;
  }
  std::vector<int32_t> inputIndexOf(numBuffers, -1);
  for (int i = 0; i < program.inputs_size(); ++i) {
    plan->inputIds_.push_back(program.inputs(i));
    inputIndexOf[program.inputs(i)] = i;
  }
  // Reshapes that may be views of their source (runUnplanned's
  // reshapeViewSources): a source with storage of its own, which for an
  // input holds while the input is not donated to the run. On the host
  // only.
  if (onCpu)
    for (const Instruction &inst : program.instructions()) {
      if (inst.stream() != ::dtorch::wire::COMPUTE || inst.op() != "reshape" ||
          inst.inputs_size() != 1 || inst.outputs_size() != 1)
        continue;
      int source = inst.inputs(0);
      ExecutionPlan::BufferInfo &out = plan->bufferInfo_[inst.outputs(0)];
      if (inputIndexOf[source] >= 0) {
        out.reshapeSource = source;
        out.reshapeSourceInput = inputIndexOf[source];
      } else if (plan->bufferInfo_[source].offset < 0) {
        out.reshapeSource = source;
      }
    }
  ExecutionPlan::Bindings &bindings = *plan->bindings_;
  bindings.buffers.resize(numBuffers);
  for (size_t id = 0; id < numBuffers; ++id) {
    const ExecutionPlan::BufferInfo &info = plan->bufferInfo_[id];
    if (inputIndexOf[id] >= 0)
      continue;
    if (info.reshapeSource < 0 && info.offset >= 0)
      bindings.arenaIds.push_back(static_cast<int32_t>(id));
    else
      plan->perRunIds_.push_back(static_cast<int32_t>(id));
  }
  for (int k = 0; k < program.outputs_size(); ++k) {
    int id = program.outputs(k);
    plan->outputIds_.push_back(id);
    bool later = false;
    for (int j = k + 1; j < program.outputs_size(); ++j)
      later |= program.outputs(j) == id;
    // An arena view stays bound; anything else is the run's to hand over.
    bool arena = inputIndexOf[id] < 0 &&
                 plan->bufferInfo_[id].reshapeSource < 0 &&
                 plan->bufferInfo_[id].offset >= 0;
    plan->outputMoves_.push_back(!later && !arena);
  }
  plan->donors_ = program.output_donors_size() > 0 &&
                  program.output_donors_size() == program.outputs_size();
  if (plan->donors_)
    plan->taken_.resize(numBuffers);

  // Instructions. The errors a run without a plan reports are kept, the
  // first in the order it finds them, for every run to report.
  std::string hostCodeError, resolveError;
  const std::string *lastOp = nullptr;
  DType lastDtype = ::dtorch::wire::DTYPE_INVALID;
  const Kernel *lastKernel = nullptr;
  for (int i = 0; i < program.instructions_size(); ++i) {
    const Instruction &inst = program.instructions(i);
    ExecutionPlan::Step step;
    step.index = i;
    step.instruction = &inst;
    step.firstOperand = static_cast<uint32_t>(plan->operands_.size());
    step.numInputs = static_cast<uint32_t>(inst.inputs_size());
    step.numOutputs = static_cast<uint32_t>(inst.outputs_size());
    plan->operands_.insert(plan->operands_.end(), inst.inputs().begin(),
                           inst.inputs().end());
    plan->operands_.insert(plan->operands_.end(), inst.outputs().begin(),
                           inst.outputs().end());
    step.firstWait = static_cast<uint32_t>(plan->waits_.size());
    step.numWaits = static_cast<uint32_t>(inst.wait_events_size());
    plan->waits_.insert(plan->waits_.end(), inst.wait_events().begin(),
                        inst.wait_events().end());
    step.recordEvent = inst.record_event();
    step.firstScalar = static_cast<uint32_t>(plan->scalars_.size());
    if (inst.stream() != ::dtorch::wire::COMPUTE) {
      step.kind = ExecutionPlan::StepKind::Collective;
      plan->comm_.push_back(step);
      continue;
    }
    if (callsGeneratedKernel(inst)) {
      const auto &exe = program.executables(inst.executable());
      if (exe.has_gpu()) {
        step.kind = ExecutionPlan::StepKind::DeviceGenerated;
        step.deviceCode = &exe;
        plan->deviceCode_ = true;
        if (resolveError.empty() && onCpu)
          resolveError = "generated kernel '" + exe.symbol() +
                         "' is GPU code (" + exe.target() +
                         "); this executor runs on the host's CPU";
        if (resolveError.empty() && !deviceKernelLauncher(device_->name()))
          resolveError =
              "no launcher of generated kernels for " + device_->describe();
      } else {
        step.kind = inst.op() == kFusedOp
                        ? ExecutionPlan::StepKind::Generated
                        : ExecutionPlan::StepKind::GeneratedMultiTensor;
        if (!onCpu) {
          if (hostCodeError.empty())
            hostCodeError = "generated kernel '" + exe.symbol() +
                            "' is host code; " + device_->describe() +
                            " runs GPU kernels (compile for a CUDA mesh)";
        } else {
          step.whole = loadExecutable(exe);
          step.rows = loadExecutableRows(exe);
        }
      }
      auto it = inst.attrs().find("scalars");
      if (it != inst.attrs().end()) {
        const std::string &bytes = it->second.data();
        size_t count = bytes.size() / sizeof(double);
        size_t first = plan->scalars_.size();
        plan->scalars_.resize(first + count);
        std::memcpy(plan->scalars_.data() + first, bytes.data(),
                    count * sizeof(double));
      }
    } else {
      DType dtype = plan->bufferInfo_[inst.outputs(0)].dtype;
      // A chain of like instructions asks the registry once.
      if (lastOp && dtype == lastDtype && inst.op() == *lastOp)
        step.kernel = lastKernel;
      else
        step.kernel = lookupKernel(inst.op(), dtype, device_->name());
      lastOp = &inst.op();
      lastDtype = dtype;
      lastKernel = step.kernel;
      if (!step.kernel && resolveError.empty())
        resolveError = describeInstruction(program, i) + ": no " +
                       device_->name() + " kernel for " + dtypeName(dtype);
    }
    plan->compute_.push_back(step);
  }
  plan->error_ = !hostCodeError.empty() ? hostCodeError : resolveError;
  return plan;
}

namespace detail {

// The trace's labels of every instruction (made once per plan, when a run
// is first traced; also by SpeculativeRun).
std::shared_ptr<const InstructionLabels>
makeLabels(const Program &program, const std::vector<int64_t> &bufferBytes) {
  auto labels = std::make_shared<InstructionLabels>();
  size_t n = static_cast<size_t>(program.instructions_size());
  labels->names.reserve(n);
  labels->locations.reserve(n);
  labels->details.reserve(n);
  for (int i = 0; i < program.instructions_size(); ++i) {
    const Instruction &inst = program.instructions(i);
    labels->names.push_back(inst.op());
    labels->locations.push_back(inst.location());
    labels->details.push_back(program.name() + " #" + std::to_string(i));
    int64_t in = 0, out = 0;
    for (int id : inst.inputs())
      in += bufferBytes[id];
    for (int id : inst.outputs())
      out += bufferBytes[id];
    labels->kernelBytes.push_back(out);
    labels->collectiveBytes.push_back(std::max(in, out));
  }
  return labels;
}

} // namespace detail

std::vector<Tensor> Executor::runPlanned(ExecutionPlan &plan,
                                         const std::vector<Tensor> &inputs,
                                         const std::vector<int64_t> &seeds,
                                         const std::vector<bool> &donated) {
  const Program &program = plan.program();
  if (!canRun(plan))
    return runUnplanned(program, inputs, seeds, donated);
  // One run at a time walks a plan; another one resolves the program.
  bool idle = false;
  if (!plan.busy_.compare_exchange_strong(idle, true))
    return runUnplanned(program, inputs, seeds, donated);
  struct Idle {
    ExecutionPlan &plan;
    ~Idle() { plan.busy_.store(false, std::memory_order_release); }
  } becomeIdle{plan};
  std::unique_lock<std::mutex> arenaLock;
  if (plan.planned_) {
    arenaLock = std::unique_lock<std::mutex>(arena_->mutex, std::try_to_lock);
    if (!arenaLock.owns_lock()) {
      // A concurrent run of this executor holds the arena: this one takes
      // an arena of its own, as a run without a plan does.
      return runUnplanned(program, inputs, seeds, donated);
    }
  }

  const std::string &prefix = plan.prefix_;
  if (inputs.size() != plan.inputIds_.size())
    throw RuntimeError(prefix + "expects " +
                       std::to_string(program.inputs_size()) +
                       " input(s), got " + std::to_string(inputs.size()));
  ExecutionPlan::Bindings &bindings = *plan.bindings_;
  std::vector<Tensor> &buffers = bindings.buffers;
  // What the run binds is dropped at its end (the arena views stay), so
  // the plan holds no input, output or donated storage between runs. A
  // copy of an undefined tensor keeps the slot's shape capacity, so the
  // next run binds its inputs without allocating.
  struct Unbind {
    ExecutionPlan &plan;
    ~Unbind() {
      static const Tensor undefined;
      std::vector<Tensor> &buffers = plan.bindings_->buffers;
      for (int32_t id : plan.inputIds_)
        buffers[id] = undefined;
      for (int32_t id : plan.perRunIds_)
        buffers[id] = undefined;
      for (int32_t id : plan.takenIds_)
        plan.taken_[id] = undefined;
      plan.takenIds_.clear();
    }
  } unbind{plan};

  // Donation, decided before binding adds a holder (runUnplanned).
  if (!donated.empty() && plan.donors_) {
    for (int k = 0; k < program.outputs_size(); ++k) {
      int donor = program.output_donors(k);
      if (donor < 0 || static_cast<size_t>(donor) >= donated.size() ||
          !donated[donor])
        continue;
      const Tensor &given = inputs[donor];
      if (!given.soleOwner() || &given.device() != device_)
        continue;
      int id = program.outputs(k);
      plan.taken_[id] = given;
      plan.takenIds_.push_back(id);
    }
  }
  for (size_t i = 0; i < plan.inputIds_.size(); ++i) {
    int id = plan.inputIds_[i];
    const ExecutionPlan::BufferInfo &info = plan.bufferInfo_[id];
    const Tensor &given = inputs[i];
    if (!given.defined() || given.dtype() != info.dtype ||
        given.shape() != info.shape)
      throw RuntimeError(prefix + "input " + std::to_string(i) + " (buffer " +
                         std::to_string(id) + ") must be " +
                         dtypeName(info.dtype) + shapeToString(info.shape) +
                         ", got " + given.describe());
    if (&given.device() == device_)
      buffers[id] = given; // a copy assignment: no allocation
    else
      buffers[id] = copyToDeviceStaged(given, *device_);
  }
  if (!plan.error_.empty())
    throw RuntimeError(prefix + plan.error_);
  setupTrace_.mark("bind inputs");

  RunMemory memory;
  try {
    if (plan.planned_) {
      memory.arenaBytes = static_cast<uint64_t>(plan.arenaBytes_);
      Tensor &kept = arena_->storage;
      if (!kept.defined() ||
          kept.nbytes() < static_cast<size_t>(plan.arenaBytes_)) {
        arena_->release(); // the old one (and plans' views) before growing
        kept =
            Tensor::empty(::dtorch::wire::BOOL, {plan.arenaBytes_}, *device_);
        ++memory.allocations;
      }
      if (!bindings.bound || bindings.generation != arena_->generation) {
        for (int32_t id : bindings.arenaIds) {
          const ExecutionPlan::BufferInfo &info = plan.bufferInfo_[id];
          buffers[id] = Tensor::viewOf(kept, static_cast<size_t>(info.offset),
                                       info.dtype, info.shape);
        }
        bindings.bound = true;
        bindings.generation = arena_->generation;
        auto &views = arena_->views;
        views.erase(
            std::remove_if(views.begin(), views.end(),
                           [](const auto &weak) { return weak.expired(); }),
            views.end());
        views.push_back(plan.bindings_);
      }
    }
    for (int32_t id : plan.perRunIds_) {
      const ExecutionPlan::BufferInfo &info = plan.bufferInfo_[id];
      if (info.reshapeSource >= 0 &&
          (info.reshapeSourceInput < 0 ||
           static_cast<size_t>(info.reshapeSourceInput) >= donated.size() ||
           !donated[info.reshapeSourceInput])) {
        const Tensor &source = buffers[info.reshapeSource]; // unbound: copied
        if (source.defined() && source.dtype() == info.dtype &&
            source.numel() == info.numel) {
          buffers[id].assignView(source, 0, info.dtype, info.shape, info.numel);
          ++memory.reshapeViews;
          continue;
        }
      }
      if (info.offset >= 0) {
        buffers[id].assignView(arena_->storage,
                               static_cast<size_t>(info.offset), info.dtype,
                               info.shape, info.numel);
        continue;
      }
      if (!plan.taken_.empty() && plan.taken_[id].defined()) {
        const Tensor &donor = plan.taken_[id];
        if (donor.dtype() == info.dtype && donor.shape() == info.shape)
          buffers[id] = donor;
        else
          buffers[id].assignView(donor, 0, info.dtype, info.shape, info.numel);
        ++memory.donations;
        memory.donatedBytes += buffers[id].nbytes();
        continue;
      }
      buffers[id].assignEmpty(info.dtype, info.shape, info.numel, *device_);
      memory.ownBytes += buffers[id].nbytes();
      ++memory.allocations;
    }
  } catch (const std::bad_alloc &) {
    throw RuntimeError(prefix + "out of memory allocating its buffers");
  }
  lastRun_ = memory;
  setupTrace_.mark("bind buffers");

  runSteps(plan, prefix, seeds);
  return plan.collectResults(buffers);
}

std::vector<Tensor>
ExecutionPlan::collectResults(std::vector<Tensor> &buffers) const {
  std::vector<Tensor> results;
  results.reserve(outputIds_.size());
  for (size_t k = 0; k < outputIds_.size(); ++k) {
    Tensor &buffer = buffers[outputIds_[k]];
    if (outputMoves_[k])
      results.push_back(std::move(buffer));
    else
      results.push_back(buffer);
  }
  return results;
}

void Executor::runSteps(ExecutionPlan &plan, const std::string &prefix,
                        const std::vector<int64_t> &seeds) {
  const Program &program = plan.program();
  std::vector<Tensor> &buffers = plan.bindings_->buffers;
  bool onCpu = plan.onCpu_;
  DeviceKernelLauncher launchOnDevice =
      plan.deviceCode_ ? deviceKernelLauncher(device_->name()) : nullptr;
  if (plan.deviceCode_ && !launchOnDevice)
    throw RuntimeError(prefix + "no launcher of generated kernels for " +
                       device_->describe());
  bool traced = trace_ && trace_->enabled();
  if (traced)
    plan.ensureLabels();
  detail::RunState state(plan.numEvents_);
  std::vector<Event *> deviceEvents;
  const int32_t *waits = plan.waits_.data();
  const double *scalars = plan.scalars_.data();
  auto runStream = [&](const std::vector<ExecutionPlan::Step> &steps,
                       TraceLane lane, std::vector<InstructionSpan> &spans,
                       ExecutionPlan::StepOperands &ops) {
    for (const ExecutionPlan::Step &step : steps) {
      try {
        for (uint32_t w = 0; w < step.numWaits; ++w)
          if (!state.waitFor(waits[step.firstWait + w]))
            return;
        if (state.failed())
          return;
        plan.bindStepOperands(step, buffers, ops);
        int64_t traceStart =
            traced && trace_->enabled() ? traceClockNs() : int64_t{-1};
        int64_t movedBytes = -1;
        switch (step.kind) {
        case ExecutionPlan::StepKind::Library:
        case ExecutionPlan::StepKind::Generated:
        case ExecutionPlan::StepKind::GeneratedMultiTensor:
          plan.runHostKernelStep(step, seeds, ops);
          break;
        case ExecutionPlan::StepKind::DeviceGenerated:
          ExecutionPlan::collectStepData(ops);
          launchOnDevice(*device_, *step.deviceCode, ops.inData.data(),
                         ops.outData.data(), scalars + step.firstScalar);
          break;
        case ExecutionPlan::StepKind::Collective:
          movedBytes = runCommInstruction(*step.instruction, ops.in, ops.out,
                                          deviceEvents);
          break;
        }
        if (traceStart >= 0)
          spans.push_back(
              {step.index, lane, traceStart, traceClockNs(), movedBytes});
        if (step.recordEvent >= 0)
          signalEvent(state, step.recordEvent, lane == TraceLane::Compute,
                      deviceEvents);
      } catch (...) {
        detail::failRunAt(state, prefix, program, step.index);
        return;
      }
    }
  };

  // The compute stream's operand lists: the plan's, kept between runs
  // (fast setup), or the run's own.
  ExecutionPlan::StepOperands runOps;
  ExecutionPlan::StepOperands &computeOps =
      fastSetup_ ? plan.stepScratch_ : runOps;
  std::vector<InstructionSpan> computeSpans, commSpans;
  if (traced)
    computeSpans.reserve(plan.compute_.size());
  bool hasComm = !plan.comm_.empty();
  if (hasComm && !onCpu)
    deviceEvents = prepareDeviceEvents(program);
  runStreams(
      hasComm, /*markHandOff=*/true,
      [&] {
        runStream(plan.compute_, TraceLane::Compute, computeSpans, computeOps);
      },
      [&] {
        ExecutionPlan::StepOperands commOps;
        runStream(plan.comm_, TraceLane::Comm, commSpans, commOps);
      });
  if (traced) {
    trace_->recordInstructions(plan.labels_, std::move(computeSpans));
    trace_->recordInstructions(plan.labels_, std::move(commSpans));
  }
  finishRun(state, prefix);
}

void ExecutionPlan::ensureLabels() {
  if (labels_)
    return;
  std::vector<int64_t> bytes;
  bytes.reserve(bufferInfo_.size());
  for (const BufferInfo &info : bufferInfo_)
    bytes.push_back(info.numel * static_cast<int64_t>(dtypeSize(info.dtype)));
  labels_ = detail::makeLabels(program(), bytes);
}

void ExecutionPlan::bindStepOperands(const Step &step,
                                     std::vector<Tensor> &buffers,
                                     StepOperands &ops) const {
  ops.in.clear();
  ops.out.clear();
  const int32_t *ids = operands_.data() + step.firstOperand;
  for (uint32_t j = 0; j < step.numInputs; ++j)
    ops.in.push_back(&buffers[ids[j]]);
  for (uint32_t j = 0; j < step.numOutputs; ++j)
    ops.out.push_back(&buffers[ids[step.numInputs + j]]);
}

void ExecutionPlan::collectStepData(StepOperands &ops) {
  ops.inData.clear();
  ops.outData.clear();
  for (const Tensor *t : ops.in)
    ops.inData.push_back(const_cast<void *>(t->data()));
  for (Tensor *t : ops.out)
    ops.outData.push_back(t->data());
}

bool ExecutionPlan::runHostKernelStep(const Step &step,
                                      const std::vector<int64_t> &seeds,
                                      StepOperands &ops) const {
  const double *scalars = scalars_.data() + step.firstScalar;
  switch (step.kind) {
  case StepKind::Library:
    step.kernel->run(AttrReader(step.instruction->attrs(), &seeds), ops.in,
                     ops.out);
    return true;
  case StepKind::Generated:
    collectStepData(ops);
    detail::runGenerated(step.whole, step.rows, ops.inData, ops.outData,
                         scalars, *ops.out.front());
    return true;
  case StepKind::GeneratedMultiTensor:
    collectStepData(ops);
    detail::runGeneratedMultiTensor(step.whole, step.rows, ops.inData,
                                    ops.outData, scalars, *step.instruction,
                                    ops.in, ops.out);
    return true;
  default:
    return false;
  }
}

} // namespace dtorch::rt
