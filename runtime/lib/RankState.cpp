#include "dtorch/runtime/RankState.h"

#include "dtorch/runtime/DevicePlacement.h"
#include "dtorch/runtime/ProgramValidator.h"

#include <algorithm>
#include <unordered_set>

namespace dtorch::rt {

RankState::RankState(int rank, Communicator *comm)
    : rank_(rank), trace_(std::make_unique<TraceBuffer>()), executor_(comm) {
  executor_.setTrace(trace_.get());
}

TraceChunk RankState::trace(TraceAction action, size_t capacity,
                            size_t maxEvents) {
  TraceChunk chunk;
  chunk.rank = rank_;
  if (action == TraceAction::Start)
    trace_->start(capacity);
  else
    trace_->drain(maxEvents, chunk);
  chunk.clockNs = traceClockNs();
  return chunk;
}

std::string RankState::prefixed(const std::string &message) const {
  return "rank " + std::to_string(rank_) + ": " + message;
}

void RankState::poisonAll(const std::vector<uint64_t> &handles,
                          const std::string &message) {
  for (uint64_t handle : handles)
    poison(handle, message);
}

std::shared_ptr<const ::dtorch::wire::Program> SharedPreparation::get(
    const ::dtorch::wire::Program *classProgram,
    const std::function<::dtorch::wire::Program()> &prepare,
    const std::function<void(const ::dtorch::wire::Program &)> &check) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = prepared_.find(classProgram);
  if (it == prepared_.end()) {
    std::shared_ptr<const ::dtorch::wire::Program> made;
    if (rankIndependent(*classProgram)) {
      if (owner_ && check) {
        // Its own resolution: checked where it lies, kept without a copy.
        check(*classProgram);
        made = std::shared_ptr<const ::dtorch::wire::Program>(owner_,
                                                              classProgram);
      } else {
        made = std::make_shared<const ::dtorch::wire::Program>(prepare());
      }
    }
    it = prepared_.emplace(classProgram, std::move(made)).first;
  }
  return it->second;
}

void RankState::upload(uint64_t programId, ::dtorch::wire::Program program) {
  if (speculation_ && speculationProgram_ == programId)
    dropSpeculation();
  Uploaded &uploaded = programs_[programId];
  uploaded.program =
      std::make_shared<const ::dtorch::wire::Program>(std::move(program));
  uploaded.invalid.clear();
  uploaded.plan.reset();
  try {
    executor_.validate(*uploaded.program);
  } catch (const std::exception &e) {
    uploaded.invalid = e.what();
  }
}

void RankState::upload(
    uint64_t programId,
    const std::vector<const ::dtorch::wire::Program *> &classes,
    const RankContext &context, SharedPreparation *shared, Device *device,
    bool deviceCollectives) {
  if (speculation_ && speculationProgram_ == programId)
    dropSpeculation();
  Uploaded &uploaded = programs_[programId];
  uploaded.program = std::make_shared<const ::dtorch::wire::Program>();
  uploaded.invalid.clear();
  uploaded.plan.reset();
  uploaded.device = device;
  uploaded.deviceCollectives = device && deviceCollectives;
  try {
    int index = programIndexAt(classes, context.coords);
    if (index < 0) {
      std::string where;
      for (size_t a = 0; a < context.coords.size(); ++a)
        where += (a ? ", " : "") + std::to_string(context.coords[a]);
      throw RuntimeError("no program of upload " + std::to_string(programId) +
                         " runs at mesh position (" + where + ")");
    }
    auto prepare = [&] { return executor_.prepare(*classes[index], context); };
    auto check = [&](const ::dtorch::wire::Program &program) {
      executor_.checkPrepared(program, context);
    };
    // A failed preparation throws out of get() and is not kept: every rank
    // then reports it itself.
    std::shared_ptr<const ::dtorch::wire::Program> common =
        shared ? shared->get(classes[index], prepare, check) : nullptr;
    uploaded.program =
        common ? std::move(common)
               : std::make_shared<const ::dtorch::wire::Program>(prepare());
  } catch (const std::exception &e) {
    uploaded.invalid = e.what();
  }
}

void RankState::reject(uint64_t programId, const std::string &reason) {
  if (speculation_ && speculationProgram_ == programId)
    dropSpeculation();
  Uploaded &uploaded = programs_[programId];
  uploaded.program = std::make_shared<const ::dtorch::wire::Program>();
  uploaded.invalid = reason;
  uploaded.plan.reset();
  uploaded.device = nullptr;
  uploaded.deviceCollectives = false;
}

void RankState::setDeviceCommunicator(Device &device,
                                      std::unique_ptr<Communicator> comm) {
  deviceComms_[&device] = std::move(comm);
}

void RankState::setSharedDeviceCommunicator(
    Device &device, std::unique_ptr<Communicator> comm) {
  sharedDeviceComms_[&device] = std::move(comm);
}

void RankState::replaceDeviceCommunicators(
    const std::function<std::unique_ptr<Communicator>(Device &)> &make) {
  dropSpeculation();
  std::vector<Device *> devices;
  for (auto &[device, comm] : deviceComms_)
    devices.push_back(device);
  for (Device *device : devices) {
    deviceComms_.erase(device); // the old world's, destroyed first
    if (std::unique_ptr<Communicator> comm = make(*device))
      deviceComms_[device] = std::move(comm);
  }
}

std::optional<std::string> RankState::run(uint64_t programId,
                                          const std::vector<uint64_t> &inputs,
                                          const std::vector<uint64_t> &outputs,
                                          const std::vector<int64_t> &seeds,
                                          const std::vector<uint64_t> &donated,
                                          uint64_t speculationId,
                                          int64_t receivedNs) {
  bool fast = executor_.fastSetup();
  SetupTrace &setup = executor_.setupTrace();
  setup.begin(trace_.get(), receivedNs);
  setup.mark("queue"); // from the receipt to this rank's thread
  // The setup's phases are recorded when the run ends, however it ends.
  struct Flush {
    SetupTrace &setup;
    ~Flush() { setup.flush(); }
  } flushSetup{setup};
  // A paused speculative run of this one continues; any other is dropped.
  std::unique_ptr<SpeculativeRun> continued =
      speculation_ ? takeSpeculation(speculationId, programId, inputs)
                   : nullptr;
  // Donated handles that the run reads (any other is ignored).
  std::vector<uint64_t> consumed;
  std::vector<bool> donatedInputs;
  if (!donated.empty() && fast) {
    // Sorted once: a binary search per input, not a scan of the list.
    std::vector<uint64_t> &sorted = scratch_.donated;
    sorted.assign(donated.begin(), donated.end());
    std::sort(sorted.begin(), sorted.end());
    donatedInputs.assign(inputs.size(), false);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (std::binary_search(sorted.begin(), sorted.end(), inputs[i])) {
        donatedInputs[i] = true;
        consumed.push_back(inputs[i]);
      }
    std::sort(consumed.begin(), consumed.end());
    consumed.erase(std::unique(consumed.begin(), consumed.end()),
                   consumed.end());
  } else if (!donated.empty()) {
    donatedInputs.assign(inputs.size(), false);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (std::find(donated.begin(), donated.end(), inputs[i]) !=
          donated.end()) {
        donatedInputs[i] = true;
        if (std::find(consumed.begin(), consumed.end(), inputs[i]) ==
            consumed.end())
          consumed.push_back(inputs[i]);
      }
  }
  auto fail = [&](const std::string &message) {
    poisonAll(outputs, message);
    // The run consumes its donated inputs, whether or not it got far.
    poisonAll(consumed, message);
    return std::optional<std::string>(message);
  };
  auto uploaded = programs_.find(programId);
  if (uploaded == programs_.end())
    return fail(prefixed("unknown program id " + std::to_string(programId)));
  if (!uploaded->second.invalid.empty())
    return fail(prefixed(uploaded->second.invalid));
  const ::dtorch::wire::Program &program = *uploaded->second.program;
  Device &device =
      uploaded->second.device ? *uploaded->second.device : cpuDevice();
  if (&executor_.device() != &device)
    executor_.setDevice(device);
  // Device collectives: the device communicator (NCCL); otherwise the
  // router of ranks sharing a GPU when there is one, else the host.
  auto &comms =
      uploaded->second.deviceCollectives ? deviceComms_ : sharedDeviceComms_;
  auto deviceComm = comms.find(&device);
  executor_.setDeviceCommunicator(
      deviceComm != comms.end() ? deviceComm->second.get() : nullptr);
  // The inputs' tensors: the rank's scratch with the fast setup (each
  // slot rebound in place and emptied after the run, its shape's capacity
  // kept), else the run's own.
  std::vector<Tensor> ownValues;
  std::vector<Tensor> &values = fast ? scratch_.values : ownValues;
  struct Unbind {
    std::vector<Tensor> &values;
    bool scratch;
    ~Unbind() {
      static const Tensor undefined;
      if (scratch)
        for (Tensor &value : values)
          value = undefined;
    }
  } unbindValues{values, fast};
  if (fast)
    values.resize(inputs.size());
  else
    values.reserve(inputs.size());
  // A confirmed speculation bound its leading inputs already, and checked
  // them: any put, poison or free of one since dropped it. The fast setup
  // looks up only those it donates (SpeculativeRun::finish reads no other).
  size_t boundAlready = fast && continued ? continued->boundInputs() : 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i < boundAlready && (donatedInputs.empty() || !donatedInputs[i]))
      continue;
    uint64_t handle = inputs[i];
    if (!poisoned_.empty())
      if (auto poison = poisoned_.find(handle); poison != poisoned_.end())
        return fail(poison->second); // the root cause, unchanged
    auto it = tensors_.find(handle);
    if (it == tensors_.end())
      return fail(prefixed("program '" + program.name() +
                           "' input tensor handle " + std::to_string(handle) +
                           " is unknown"));
    if (&it->second.device() != &device) {
      // Moved once (a put arrives in host memory): later runs find it there.
      try {
        it->second = device.kind() == DeviceKind::Cpu
                         ? copyToHostStaged(it->second)
                         : copyToDeviceStaged(it->second, device);
      } catch (const std::exception &e) {
        return fail(prefixed("input tensor handle " + std::to_string(handle) +
                             " to " + device.describe() + ": " + e.what()));
      }
    }
    if (fast)
      values[i] = it->second; // a copy assignment: no allocation
    else
      values.push_back(it->second);
  }
  if (static_cast<int>(outputs.size()) != program.outputs_size())
    return fail(prefixed("program '" + program.name() + "' has " +
                         std::to_string(program.outputs_size()) +
                         " output(s), run names " +
                         std::to_string(outputs.size())));
  std::vector<Tensor> results;
  setup.mark("lookup");
  // The table's bytes before the run: counted now, or (fast setup) after
  // the run, from the table and the consumed inputs, which the run does
  // not otherwise change.
  uint64_t before = fast ? 0 : tableBytes();
  // Donated inputs leave the table: `values` is then their only holder
  // unless another handle shares the storage.
  for (uint64_t handle : consumed)
    tensors_.erase(handle);
  setup.mark("consume");
  try {
    // The run's span on the compute lane holds its instructions' spans.
    std::optional<TraceSpan> span;
    if (trace_->enabled())
      span.emplace(trace_.get(), TraceLane::Compute, "run",
                   "run " + program.name(),
                   "program id " + std::to_string(programId));
    if (continued) {
      size_t ahead = continued->stepsRun();
      results = continued->finish(values, seeds, donatedInputs);
      ++speculationCounts_.confirmed;
      speculationCounts_.instructions += ahead;
      continued.reset();
    } else if (executor_.executionPlans()) {
      // The plan of an earlier run, unless the executor's device or the
      // kernel registry changed since.
      std::shared_ptr<ExecutionPlan> &plan = uploaded->second.plan;
      if (!plan || !executor_.canRun(*plan))
        plan = executor_.makePlan(uploaded->second.program);
      results = executor_.runPlanned(*plan, values, seeds, donatedInputs);
    } else {
      results = executor_.runValidated(program, values, seeds, donatedInputs);
    }
  } catch (const std::exception &e) {
    return fail(prefixed(e.what()));
  }
  setup.mark("run"); // the run's span: kernels, teardown, results
  if (fast) {
    before = tableBytesWith(inputs, values, consumed);
    setup.mark("table bytes");
  }
  RunMemory memory = executor_.lastRunMemory();
  lastRunArenaBytes_ = memory.arenaBytes;
  lastRunPeakBytes_ = before + executor_.arenaCapacity() + memory.ownBytes;
  lastRunDonatedBytes_ = memory.donatedBytes;
  peakBytes_ = std::max(peakBytes_, lastRunPeakBytes_);
  for (size_t i = 0; i < outputs.size(); ++i)
    put(outputs[i], std::move(results[i]));
  setup.mark("outputs");
  return std::nullopt;
}

std::shared_ptr<const ExecutionPlan>
RankState::planOf(uint64_t programId) const {
  auto it = programs_.find(programId);
  return it == programs_.end() ? nullptr : it->second.plan;
}

void RankState::setExecutionPlans(bool on) {
  dropSpeculation();
  executor_.setExecutionPlans(on);
  if (!on)
    for (auto &[id, uploaded] : programs_)
      uploaded.plan.reset();
}

void RankState::setFastSetup(bool on) {
  dropSpeculation();
  executor_.setFastSetup(on);
}

void RankState::put(uint64_t handle, Tensor value) {
  if (speculation_)
    dropSpeculationReading(&handle, 1);
  tensors_[handle] = std::move(value);
  poisoned_.erase(handle);
}

void RankState::poison(uint64_t handle, const std::string &message) {
  if (speculation_)
    dropSpeculationReading(&handle, 1);
  tensors_.erase(handle);
  poisoned_[handle] = message;
}

const Tensor &RankState::fetch(uint64_t handle) const {
  if (auto poison = poisoned_.find(handle); poison != poisoned_.end())
    throw RuntimeError(poison->second);
  auto it = tensors_.find(handle);
  if (it == tensors_.end())
    throw RuntimeError("unknown tensor handle " + std::to_string(handle) +
                       " on rank " + std::to_string(rank_));
  return it->second;
}

Tensor RankState::fetchToHost(uint64_t handle) const {
  return copyToHostStaged(fetch(handle));
}

void RankState::free(const std::vector<uint64_t> &handles) {
  if (speculation_)
    dropSpeculationReading(handles.data(), handles.size());
  for (uint64_t handle : handles) {
    tensors_.erase(handle);
    poisoned_.erase(handle);
  }
}

uint64_t RankState::tableBytesWith(const std::vector<uint64_t> &inputs,
                                   const std::vector<Tensor> &values,
                                   const std::vector<uint64_t> &consumed) {
  // tableBytes()'s count (each distinct data pointer once, with the bytes of
  // the first tensor found there) over the table and the consumed inputs,
  // without a node per storage: (pointer, order, bytes) sorted.
  std::vector<StorageBytes> &seen = scratch_.storages;
  seen.clear();
  auto add = [&](const Tensor &tensor) {
    uint64_t size = tensor.defined() ? tensor.nbytes() : 0;
    if (size != 0)
      seen.push_back({tensor.data(), seen.size(), size});
  };
  for (const auto &[handle, tensor] : tensors_)
    add(tensor);
  if (!consumed.empty())
    for (size_t i = 0; i < inputs.size(); ++i)
      if (std::binary_search(consumed.begin(), consumed.end(), inputs[i]))
        add(values[i]);
  std::sort(seen.begin(), seen.end(),
            [](const StorageBytes &a, const StorageBytes &b) {
              return a.data != b.data
                         ? std::less<const void *>()(a.data, b.data)
                         : a.order < b.order;
            });
  uint64_t bytes = 0;
  for (size_t i = 0; i < seen.size(); ++i)
    if (i == 0 || seen[i].data != seen[i - 1].data)
      bytes += seen[i].bytes;
  return bytes;
}

uint64_t RankState::tableBytes() const {
  uint64_t bytes = 0;
  std::unordered_set<const void *> storages;
  for (const auto &[handle, tensor] : tensors_) {
    uint64_t size = tensor.defined() ? tensor.nbytes() : 0;
    if (size != 0 && storages.insert(tensor.data()).second)
      bytes += size;
  }
  return bytes;
}

MemoryStats RankState::memoryStats() const {
  MemoryStats stats;
  stats.rank = rank_;
  stats.tensors = tensors_.size();
  stats.held.reserve(tensors_.size());
  std::unordered_set<const void *> storages;
  for (const auto &[handle, tensor] : tensors_) {
    uint64_t bytes = tensor.defined() ? tensor.nbytes() : 0;
    stats.held.push_back({handle, tensor.dtype(), bytes});
    // A storage shared by several handles (or an empty tensor) counts once.
    if (bytes == 0 || !storages.insert(tensor.data()).second)
      continue;
    stats.bytes += bytes;
    stats.bytesByDtype[tensor.dtype()] += bytes;
  }
  stats.arenaBytes = executor_.arenaCapacity();
  stats.lastRunArenaBytes = lastRunArenaBytes_;
  stats.lastRunPeakBytes = lastRunPeakBytes_;
  peakBytes_ = std::max(peakBytes_, stats.bytes + stats.arenaBytes);
  stats.peakBytes = peakBytes_;
  stats.speculationsStarted = speculationCounts_.started;
  stats.speculationsConfirmed = speculationCounts_.confirmed;
  stats.speculationsDropped = speculationCounts_.dropped;
  stats.speculativeInstructions = speculationCounts_.instructions;
  std::sort(stats.held.begin(), stats.held.end(),
            [](const HeldTensor &a, const HeldTensor &b) {
              return a.handle < b.handle;
            });
  return stats;
}

} // namespace dtorch::rt
