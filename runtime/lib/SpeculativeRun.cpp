//===- SpeculativeRun.cpp - a plan's run started before its inputs
//---------===//
//
// SpeculativeRun (SpeculativeRun.h): binds what Executor::runPlanned binds,
// but input by input, runs the plan's COMPUTE steps in order as far as the
// bound inputs and the effect limit allow, and finishes or drops the run
// later. Kept apart from runPlanned so the steady-state path stays as it is.
//
//===----------------------------------------------------------------------===//
#include "dtorch/runtime/SpeculativeRun.h"

#include "ExecutorSupport.h"

#include "dtorch/runtime/Attrs.h"
#include "dtorch/runtime/DevicePlacement.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/Shape.h"
#include "dtorch/runtime/Trace.h"

#include <algorithm>

namespace dtorch::rt {

using ::dtorch::wire::Instruction;
using ::dtorch::wire::Program;

SpeculationLimits analyzeSpeculation(const ExecutionPlan &plan) {
  SpeculationLimits limits;
  const Program &program = plan.program();
  if (!plan.comm_.empty())
    limits.refused = "it has collectives";
  else if (!plan.onCpu_)
    limits.refused = "it runs on a device";
  else if (!plan.error_.empty())
    limits.refused = plan.error_;
  size_t numBuffers = plan.bufferInfo_.size();
  std::vector<int32_t> inputIndexOf(numBuffers, -1);
  for (size_t i = 0; i < plan.inputIds_.size(); ++i)
    inputIndexOf[plan.inputIds_[i]] = static_cast<int32_t>(i);
  std::vector<bool> donorOutput(numBuffers, false);
  if (plan.donors_)
    for (int k = 0; k < program.outputs_size(); ++k)
      if (program.output_donors(k) >= 0)
        donorOutput[program.outputs(k)] = true;
  limits.firstEffect = plan.compute_.size();
  limits.inputsNeeded.reserve(plan.compute_.size());
  for (size_t s = 0; s < plan.compute_.size(); ++s) {
    const ExecutionPlan::Step &step = plan.compute_[s];
    const int32_t *ids = plan.operands_.data() + step.firstOperand;
    int32_t needed = 0;
    for (uint32_t j = 0; j < step.numInputs; ++j)
      needed = std::max(needed, inputIndexOf[ids[j]] + 1);
    limits.inputsNeeded.push_back(needed);
    bool effect = step.instruction->attrs().count("seed_slot") != 0;
    for (uint32_t j = 0; j < step.numOutputs; ++j)
      effect |= donorOutput[ids[step.numInputs + j]];
    if (effect && limits.firstEffect == plan.compute_.size())
      limits.firstEffect = s;
  }
  limits.deferred.assign(numBuffers, false);
  limits.donorInput.assign(plan.inputIds_.size(), false);
  if (plan.donors_)
    for (int k = 0; k < program.outputs_size(); ++k)
      if (int donor = program.output_donors(k); donor >= 0) {
        limits.deferred[program.outputs(k)] = true;
        if (static_cast<size_t>(donor) < limits.donorInput.size())
          limits.donorInput[donor] = true;
      }
  for (int32_t id : plan.perRunIds_) {
    const ExecutionPlan::BufferInfo &info = plan.bufferInfo_[id];
    if (limits.deferred[id] ||
        (info.reshapeSource >= 0 && limits.deferred[info.reshapeSource])) {
      limits.deferred[id] = true;
      limits.deferredIds.push_back(id);
    }
  }
  return limits;
}

std::unique_ptr<SpeculativeRun>
SpeculativeRun::start(Executor &executor, std::shared_ptr<ExecutionPlan> plan,
                      const std::vector<Tensor> &known, std::string *why) {
  auto refuse = [&](const std::string &reason) {
    if (why)
      *why = reason;
    return std::unique_ptr<SpeculativeRun>();
  };
  if (!plan || !executor.canRun(*plan))
    return refuse("no plan for this executor");
  if (known.size() > plan->inputIds_.size())
    return refuse("more inputs than the program has");
  std::unique_ptr<SpeculativeRun> run(new SpeculativeRun(executor, plan));
  if (!executor.fastSetup())
    run->limits_ =
        std::make_shared<const SpeculationLimits>(analyzeSpeculation(*plan));
  else {
    if (!plan->speculationLimits_)
      plan->speculationLimits_ =
          std::make_shared<const SpeculationLimits>(analyzeSpeculation(*plan));
    run->limits_ = plan->speculationLimits_;
  }
  if (!run->limits_->refused.empty())
    return refuse(run->limits_->refused);
  run->effectLimit_ = run->limits_->firstEffect;
  executor.setupTrace_.mark("analyze");
  bool idle = false;
  if (!plan->busy_.compare_exchange_strong(idle, true))
    return refuse("the plan is in use");
  run->holdsPlan_ = true;
  if (plan->planned_) {
    run->arenaLock_ =
        std::unique_lock<std::mutex>(executor.arena_->mutex, std::try_to_lock);
    if (!run->arenaLock_.owns_lock())
      return refuse("the arena is in use");
  }
  try {
    run->bindInputs(known, 0);
    executor.setupTrace_.mark("bind inputs");
    run->bindBuffers();
    executor.setupTrace_.mark("bind buffers");
  } catch (const std::exception &e) {
    return refuse(e.what());
  }
  executor.setupTrace_.mark("hand-off");
  run->runSteps(run->effectLimit_, {});
  return run;
}

SpeculativeRun::~SpeculativeRun() {
  if (!holdsPlan_)
    return;
  // As runPlanned's end: what the run bound goes, the arena views stay.
  static const Tensor undefined;
  std::vector<Tensor> &buffers = plan_->bindings_->buffers;
  for (int32_t id : plan_->inputIds_)
    buffers[id] = undefined;
  for (int32_t id : plan_->perRunIds_)
    buffers[id] = undefined;
  for (int32_t id : plan_->takenIds_)
    plan_->taken_[id] = undefined;
  plan_->takenIds_.clear();
  plan_->busy_.store(false, std::memory_order_release);
}

void SpeculativeRun::bindInputs(const std::vector<Tensor> &inputs,
                                size_t from) {
  const std::string &prefix = plan_->prefix_;
  std::vector<Tensor> &buffers = plan_->bindings_->buffers;
  Device &device = *executor_.device_;
  for (size_t i = from; i < inputs.size(); ++i) {
    int id = plan_->inputIds_[i];
    const ExecutionPlan::BufferInfo &info = plan_->bufferInfo_[id];
    const Tensor &given = inputs[i];
    if (!given.defined() || given.dtype() != info.dtype ||
        given.shape() != info.shape)
      throw RuntimeError(prefix + "input " + std::to_string(i) + " (buffer " +
                         std::to_string(id) + ") must be " +
                         dtypeName(info.dtype) + shapeToString(info.shape) +
                         ", got " + given.describe());
    buffers[id] =
        &given.device() == &device ? given : copyToDeviceStaged(given, device);
  }
  bound_ = std::max(bound_, inputs.size());
}

void SpeculativeRun::bindBuffers() {
  ExecutionPlan &plan = *plan_;
  ExecutionPlan::Bindings &bindings = *plan.bindings_;
  std::vector<Tensor> &buffers = bindings.buffers;
  Executor::Arena &arena = *executor_.arena_;
  Device &device = *executor_.device_;
  RunMemory memory;
  try {
    if (plan.planned_) {
      memory.arenaBytes = static_cast<uint64_t>(plan.arenaBytes_);
      Tensor &kept = arena.storage;
      if (!kept.defined() ||
          kept.nbytes() < static_cast<size_t>(plan.arenaBytes_)) {
        arena.release();
        kept = Tensor::empty(::dtorch::wire::BOOL, {plan.arenaBytes_}, device);
        ++memory.allocations;
      }
      if (!bindings.bound || bindings.generation != arena.generation) {
        for (int32_t id : bindings.arenaIds) {
          const ExecutionPlan::BufferInfo &info = plan.bufferInfo_[id];
          buffers[id] = Tensor::viewOf(kept, static_cast<size_t>(info.offset),
                                       info.dtype, info.shape);
        }
        bindings.bound = true;
        bindings.generation = arena.generation;
        auto &views = arena.views;
        views.erase(
            std::remove_if(views.begin(), views.end(),
                           [](const auto &weak) { return weak.expired(); }),
            views.end());
        views.push_back(plan.bindings_);
      }
    }
    // Outputs paired with an input (output_donors) are bound at the
    // confirmation, which decides donation; so are reshape views of them
    // (limits: deferred). No step before the effect limit touches them.
    // Inputs an output may take (limits: donorInput): a reshape of one is a
    // copy, as runPlanned makes it when the input is donated, so the
    // confirmation may still donate it.
    const std::vector<bool> &deferred = limits_->deferred;
    const std::vector<bool> &donorInput = limits_->donorInput;
    // The fast setup rebinds each slot in place (its shape's capacity
    // kept), as runPlanned does; else a new tensor per slot.
    bool inPlace = executor_.fastSetup();
    // A reshape of an input bound now is a view of it (no input is donated
    // to a speculative run); of one not bound yet, a copy.
    for (int32_t id : plan.perRunIds_) {
      const ExecutionPlan::BufferInfo &info = plan.bufferInfo_[id];
      if (deferred[id])
        continue;
      if (info.reshapeSource >= 0 && (info.reshapeSourceInput < 0 ||
                                      !donorInput[info.reshapeSourceInput])) {
        const Tensor &source = buffers[info.reshapeSource];
        if (source.defined() && source.dtype() == info.dtype &&
            source.numel() == info.numel) {
          if (inPlace)
            buffers[id].assignView(source, 0, info.dtype, info.shape,
                                   info.numel);
          else
            buffers[id] = Tensor::viewOf(source, 0, info.dtype, info.shape);
          ++memory.reshapeViews;
          continue;
        }
      }
      if (info.offset >= 0) {
        if (inPlace)
          buffers[id].assignView(arena.storage,
                                 static_cast<size_t>(info.offset), info.dtype,
                                 info.shape, info.numel);
        else
          buffers[id] =
              Tensor::viewOf(arena.storage, static_cast<size_t>(info.offset),
                             info.dtype, info.shape);
        continue;
      }
      if (inPlace)
        buffers[id].assignEmpty(info.dtype, info.shape, info.numel, device);
      else
        buffers[id] = Tensor::empty(info.dtype, info.shape, device);
      memory.ownBytes += buffers[id].nbytes();
      ++memory.allocations;
    }
  } catch (const std::bad_alloc &) {
    throw RuntimeError(plan.prefix_ + "out of memory allocating its buffers");
  }
  executor_.lastRun_ = memory;
}

void SpeculativeRun::extend(const std::vector<Tensor> &more) {
  if (bound_ + more.size() > plan_->inputIds_.size())
    throw RuntimeError(plan_->prefix_ + "speculation binds " +
                       std::to_string(bound_ + more.size()) + " inputs of " +
                       std::to_string(plan_->inputIds_.size()));
  std::vector<Tensor> all(bound_);
  all.insert(all.end(), more.begin(), more.end());
  bindInputs(all, bound_);
  runSteps(effectLimit_, {});
}

void SpeculativeRun::runSteps(size_t limit, const std::vector<int64_t> &seeds) {
  ExecutionPlan &plan = *plan_;
  std::vector<Tensor> &buffers = plan.bindings_->buffers;
  ExecutionPlan::StepOperands runOps;
  ExecutionPlan::StepOperands &ops =
      executor_.fastSetup() ? plan.stepScratch_ : runOps;
  limit = std::min(limit, plan.compute_.size());
  // Traced as runPlanned traces: one span per instruction.
  TraceBuffer *trace = executor_.trace_;
  bool traced = trace && trace->enabled();
  if (traced)
    plan.ensureLabels();
  std::vector<InstructionSpan> spans;
  struct Record {
    TraceBuffer *trace;
    const std::shared_ptr<const InstructionLabels> &labels;
    std::vector<InstructionSpan> &spans;
    ~Record() {
      if (trace && !spans.empty())
        trace->recordInstructions(labels, std::move(spans));
    }
  } record{traced ? trace : nullptr, plan.labels_, spans};
  while (!error_ && next_ < limit &&
         static_cast<size_t>(limits_->inputsNeeded[next_]) <= bound_) {
    const ExecutionPlan::Step &step = plan.compute_[next_];
    int64_t traceStart = traced ? traceClockNs() : int64_t{-1};
    try {
      plan.bindStepOperands(step, buffers, ops);
      // Other kinds are refused by analyzeSpeculation.
      if (!plan.runHostKernelStep(step, seeds, ops))
        throw RuntimeError("not a host kernel");
    } catch (const std::exception &e) {
      error_ = std::make_exception_ptr(RuntimeError(
          plan.prefix_ + describeInstruction(plan.program(), step.index) +
          " failed: " + e.what()));
      return;
    }
    if (traceStart >= 0)
      spans.push_back(
          {step.index, TraceLane::Compute, traceStart, traceClockNs(), -1});
    ++next_;
  }
}

std::vector<Tensor> SpeculativeRun::finish(const std::vector<Tensor> &inputs,
                                           const std::vector<int64_t> &seeds,
                                           const std::vector<bool> &donated) {
  ExecutionPlan &plan = *plan_;
  const Program &program = plan.program();
  if (inputs.size() != plan.inputIds_.size())
    throw RuntimeError(plan.prefix_ + "expects " +
                       std::to_string(program.inputs_size()) +
                       " input(s), got " + std::to_string(inputs.size()));
  if (error_)
    std::rethrow_exception(error_);
  bindInputs(inputs, bound_);
  executor_.setupTrace_.mark("bind inputs");
  std::vector<Tensor> &buffers = plan.bindings_->buffers;
  bool inPlace = executor_.fastSetup(); // slots rebound in place
  // Donation, deferred to here: an output paired with a donated input takes
  // its storage when nothing else holds it (runPlanned's rule: the caller's
  // `inputs` are its one holder) and no reshape view of it was bound (the
  // output would overwrite what the view reads). The limits kept the output
  // unwritten so far.
  if (!donated.empty() && plan.donors_) {
    for (int k = 0; k < program.outputs_size(); ++k) {
      int donor = program.output_donors(k);
      if (donor < 0 || static_cast<size_t>(donor) >= donated.size() ||
          !donated[donor])
        continue;
      // No reshape of it is a view (bindBuffers): nothing reads its storage
      // after the output overwrote it.
      int inputId = plan.inputIds_[donor];
      // The binding is (a copy of) the caller's input, or of its copy on
      // this device: dropped for the check, bound again after it.
      if (&inputs[donor].device() != executor_.device_)
        continue;
      // The fast setup empties the slot keeping its shape's capacity, so
      // binding it again allocates nothing.
      static const Tensor undefined;
      if (inPlace)
        buffers[inputId] = undefined;
      else
        buffers[inputId] = Tensor();
      bool sole = inputs[donor].soleOwner();
      buffers[inputId] = inputs[donor];
      if (!sole || &inputs[donor].device() != executor_.device_)
        continue;
      int id = program.outputs(k);
      const ExecutionPlan::BufferInfo &info = plan.bufferInfo_[id];
      if (info.offset >= 0 || info.reshapeSource >= 0)
        continue;
      const Tensor &donorTensor = inputs[donor];
      bool same = donorTensor.dtype() == info.dtype &&
                  donorTensor.shape() == info.shape;
      if (inPlace && same)
        buffers[id] = donorTensor; // a copy assignment: no allocation
      else if (inPlace)
        buffers[id].assignView(donorTensor, 0, info.dtype, info.shape,
                               info.numel);
      else
        buffers[id] =
            same ? donorTensor
                 : Tensor::viewOf(donorTensor, 0, info.dtype, info.shape);
      ++executor_.lastRun_.donations;
      executor_.lastRun_.donatedBytes += buffers[id].nbytes();
    }
  }
  // The deferred buffers not donated get storage of their own; reshape
  // views of them are views (ascending ids: a source before its views, as
  // in runPlanned's binding order).
  try {
    for (int32_t id : limits_->deferredIds) {
      if (buffers[id].defined())
        continue;
      const ExecutionPlan::BufferInfo &info = plan.bufferInfo_[id];
      if (info.reshapeSource >= 0) {
        const Tensor &source = buffers[info.reshapeSource];
        if (source.defined() && source.dtype() == info.dtype &&
            source.numel() == info.numel) {
          if (inPlace)
            buffers[id].assignView(source, 0, info.dtype, info.shape,
                                   info.numel);
          else
            buffers[id] = Tensor::viewOf(source, 0, info.dtype, info.shape);
          ++executor_.lastRun_.reshapeViews;
          continue;
        }
      }
      if (inPlace)
        buffers[id].assignEmpty(info.dtype, info.shape, info.numel,
                                *executor_.device_);
      else
        buffers[id] = Tensor::empty(info.dtype, info.shape, *executor_.device_);
      executor_.lastRun_.ownBytes += buffers[id].nbytes();
      ++executor_.lastRun_.allocations;
    }
  } catch (const std::bad_alloc &) {
    throw RuntimeError(plan.prefix_ + "out of memory allocating its buffers");
  }
  executor_.setupTrace_.mark("bind buffers");
  // Not held now: the buffers of a donated input's output are the caller's.
  effectLimit_ = plan.compute_.size();
  executor_.setupTrace_.mark("hand-off");
  runSteps(plan.compute_.size(), seeds);
  if (error_)
    std::rethrow_exception(error_);
  return plan.collectResults(buffers);
}

} // namespace dtorch::rt
