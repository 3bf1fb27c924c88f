#include "dtorch/runtime/Executor.h"

#include "ExecutorSupport.h"

#include "dtorch/runtime/AllToAllV.h"
#include "dtorch/runtime/DevicePlacement.h"

#include "dtorch/runtime/Executable.h"

#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/OptimizerCalls.h"
#include "dtorch/runtime/ParallelFor.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/Shape.h"
#include "dtorch/runtime/Trace.h"

#include <condition_variable>
#include <cstring>
#include <exception>
#include <future>
#include <mutex>
#include <new>
#include <optional>

namespace dtorch::rt {

using ::dtorch::wire::Instruction;
using ::dtorch::wire::Program;

namespace detail {

int64_t runCollective(Communicator &comm, const Instruction &inst,
                      const std::vector<const Tensor *> &in,
                      const std::vector<Tensor *> &out) {
  AttrReader attrs(inst.attrs());
  const std::string &op = inst.op();
  if (op == "send") {
    comm.send(*in[0], attrs.getInt("peer"), attrs.getInt("tag"));
  } else if (op == "recv") {
    comm.recv(*out[0], attrs.getInt("peer"), attrs.getInt("tag"));
  } else if (op == "broadcast") {
    Tensor none;
    comm.broadcast(in.empty() ? none : *in[0], *out[0], attrs.getInts("group"),
                   attrs.getInt("root"));
  } else if (op == "all_reduce") {
    comm.all_reduce(*in[0], *out[0], attrs.getInts("group"),
                    parseReduceOp(attrs.getString("reduce")));
  } else if (op == "all_gather") {
    comm.all_gather(*in[0], *out[0], attrs.getInts("group"),
                    attrs.getInt("dim"), attrs.getInts("sizes"));
  } else if (op == "reduce_scatter") {
    comm.reduce_scatter(*in[0], *out[0], attrs.getInts("group"),
                        parseReduceOp(attrs.getString("reduce")),
                        attrs.getInt("dim"), attrs.getInts("sizes"));
  } else if (op == "all_to_all") {
    comm.all_to_all(*in[0], *out[0], attrs.getInts("group"),
                    attrs.getInt("split_dim"), attrs.getInts("split_sizes"),
                    attrs.getInt("concat_dim"), attrs.getInts("concat_sizes"));
  } else if (op == "all_to_all_v") {
    const Tensor &counts = *in[1];
    std::vector<int64_t> sendCounts(counts.data_as<int64_t>(),
                                    counts.data_as<int64_t>() + counts.numel());
    std::vector<int64_t> recvCounts;
    int64_t sent = -1;
    if (attrs.has("segment_rows"))
      sent = all_to_all_v_segments(comm, *in[0], sendCounts, *out[0],
                                   recvCounts, attrs.getInts("group"),
                                   attrs.getInt("segment_rows"));
    else
      all_to_all_v(comm, *in[0], sendCounts, *out[0], recvCounts,
                   attrs.getInts("group"));
    std::copy(recvCounts.begin(), recvCounts.end(), out[1]->data_as<int64_t>());
    return sent;
  } else {
    throw RuntimeError("unknown collective '" + op + "'");
  }
  return -1;
}

void runGenerated(GeneratedKernelFn whole, GeneratedRowsKernelFn rows,
                  const std::vector<void *> &in, const std::vector<void *> &out,
                  const double *scalars, const Tensor &first) {
  int64_t count = first.dim() > 0 ? first.shape()[0] : 0;
  int parts = rows ? kernelParts(count, first.nbytes()) : 1;
  if (parts <= 1) {
    whole(in.data(), out.data(), scalars);
    return;
  }
  parallelFor(parts, [&](int part) {
    int64_t begin = count * part / parts, end = count * (part + 1) / parts;
    rows(in.data(), out.data(), scalars, begin, end);
  });
}

void runGeneratedMultiTensor(GeneratedKernelFn whole,
                             GeneratedRowsKernelFn rows,
                             const std::vector<void *> &in,
                             const std::vector<void *> &out,
                             const double *scalars, const Instruction &inst,
                             const std::vector<const Tensor *> &inTensors,
                             const std::vector<Tensor *> &outTensors) {
  std::optional<OptimizerCallGroups> groups = optimizerCallGroups(inst);
  if (!groups)
    throw RuntimeError("'" + inst.op() +
                       "' calls a generated kernel but is no optimizer "
                       "update of whole parameter groups");
  int64_t count = 0, bytes = 0;
  for (int i = 0; i < groups->numParams; ++i)
    count += inTensors[groups->input(0, i)]->numel();
  for (const Tensor *t : outTensors)
    bytes += static_cast<int64_t>(t->nbytes());
  int parts = rows ? kernelParts(count, bytes) : 1;
  if (parts <= 1) {
    whole(in.data(), out.data(), scalars);
    return;
  }
  parallelFor(parts, [&](int part) {
    int64_t begin = count * part / parts, end = count * (part + 1) / parts;
    rows(in.data(), out.data(), scalars, begin, end);
  });
}

int64_t runCollectiveThroughHost(Communicator &comm, const Instruction &inst,
                                 const std::vector<const Tensor *> &in,
                                 const std::vector<Tensor *> &out) {
  std::vector<Tensor> hostIn, hostOut;
  hostIn.reserve(in.size());
  hostOut.reserve(out.size());
  for (const Tensor *t : in)
    hostIn.push_back(copyToHostStaged(*t));
  for (Tensor *t : out)
    hostOut.push_back(Tensor::empty(t->dtype(), t->shape()));
  std::vector<const Tensor *> inPointers;
  std::vector<Tensor *> outPointers;
  for (const Tensor &t : hostIn)
    inPointers.push_back(&t);
  for (Tensor &t : hostOut)
    outPointers.push_back(&t);
  int64_t movedBytes = runCollective(comm, inst, inPointers, outPointers);
  for (size_t i = 0; i < out.size(); ++i)
    copyIntoDeviceStaged(hostOut[i], *out[i]);
  return movedBytes;
}

void failRunAt(RunState &state, const std::string &prefix,
               const Program &program, int index) {
  try {
    throw;
  } catch (const std::exception &error) {
    state.fail(std::make_exception_ptr(
        RuntimeError(prefix + describeInstruction(program, index) +
                     " failed: " + error.what())));
  } catch (...) {
    state.fail(std::make_exception_ptr(
        RuntimeError(prefix + describeInstruction(program, index) +
                     " failed with an unknown exception")));
  }
}

} // namespace detail

void Executor::runStreams(bool hasComm, bool markHandOff,
                          const std::function<void()> &compute,
                          const std::function<void()> &comm) {
  bool onCpu = device_->kind() == DeviceKind::Cpu;
  // Kernels on a device with streams launch on the executor's compute
  // stream (this thread's current stream for the run).
  if (!onCpu && !computeStream_)
    computeStream_ = device_->newStream();
  detail::ScopedCurrentStream computeCurrent(
      *device_, onCpu ? nullptr : computeStream_.get());
  if (!hasComm) {
    if (markHandOff)
      setupTrace_.mark("hand-off");
    compute();
    return;
  }
  if (!commStream_)
    commStream_ = std::make_unique<StreamThread>();
  std::future<void> commDone = commStream_->post([&] {
    // On a device the collectives queue on the communication stream.
    detail::ScopedCurrentStream commCurrent(
        *device_, onCpu ? nullptr : commDeviceStream_.get());
    comm();
  });
  if (markHandOff)
    setupTrace_.mark("hand-off");
  compute();
  // The COMM task reads this run's buffers: wait for it even when the
  // compute stream failed (the failure woke its event waits).
  commDone.get();
}

int64_t Executor::runCommInstruction(const Instruction &inst,
                                     const std::vector<const Tensor *> &in,
                                     const std::vector<Tensor *> &out,
                                     const std::vector<Event *> &deviceEvents) {
  if (device_->kind() == DeviceKind::Cpu)
    return detail::runCollective(*comm_, inst, in, out);
  // The kernels that wrote the inputs end at the device events this
  // instruction waits for: the communication stream (this thread's current
  // stream, which the device communicator orders its work after) waits for
  // those alone, so the compute stream's later kernels run beside the
  // collective.
  for (int event : inst.wait_events())
    if (deviceEvents[event])
      commDeviceStream_->wait(*deviceEvents[event]);
  if (deviceComm_ && inst.op() != "all_to_all_v") // counts: host
    return detail::runCollective(*deviceComm_, inst, in, out);
  commDeviceStream_->synchronize(); // the inputs, for host copies
  return detail::runCollectiveThroughHost(*comm_, inst, in, out);
}

void Executor::signalEvent(detail::RunState &state, int event, bool onCompute,
                           const std::vector<Event *> &deviceEvents) {
  // On a device the event also marks the compute stream after this kernel,
  // for the communication stream to wait for.
  if (onCompute && !deviceEvents.empty() && deviceEvents[event])
    computeStream_->record(*deviceEvents[event]);
  state.signal(event);
}

void Executor::finishRun(detail::RunState &state, const std::string &prefix) {
  if (computeStream_ && device_->kind() != DeviceKind::Cpu) {
    try {
      computeStream_->synchronize(); // results ready, asynchronous errors seen
    } catch (const std::exception &error) {
      if (!state.error())
        throw RuntimeError(prefix + error.what());
    }
  }
  if (std::exception_ptr error = state.error())
    std::rethrow_exception(error);
}

namespace {

using detail::runGenerated;
using detail::runGeneratedMultiTensor;
using detail::RunState;

// Per buffer: the buffer that a reshape makes it from, when that reshape may
// be a view of it, else -1. It may when the source has storage of its own
// that nothing else is written into during the run: a program input that is
// not donated to the run, or an output or unplanned temporary (written once,
// by its producer, before the reshape reads it). A planned temporary's
// arena slot is reused, so a reshape of one stays a copy (or runs in place
// where the plan put it over its input).
std::vector<int> reshapeViewSources(const Program &program, size_t numInputs,
                                    const std::vector<bool> &donated) {
  size_t numBuffers = static_cast<size_t>(program.buffers_size());
  std::vector<int> source(numBuffers, -1);
  bool planned = program.buffer_offsets_size() == program.buffers_size() &&
                 program.arena_bytes() > 0;
  std::vector<bool> viewable(numBuffers, true);
  if (planned)
    for (size_t id = 0; id < numBuffers; ++id)
      viewable[id] = program.buffer_offsets(static_cast<int>(id)) < 0;
  for (int i = 0; i < program.inputs_size(); ++i)
    viewable[program.inputs(i)] =
        static_cast<size_t>(i) < numInputs &&
        (static_cast<size_t>(i) >= donated.size() || !donated[i]);
  for (const Instruction &inst : program.instructions())
    if (inst.stream() == ::dtorch::wire::COMPUTE && inst.op() == "reshape" &&
        inst.inputs_size() == 1 && inst.outputs_size() == 1 &&
        viewable[inst.inputs(0)])
      source[inst.outputs(0)] = inst.inputs(0);
  return source;
}

} // namespace

Executor::Executor(Communicator *comm) : comm_(comm) {}

void Executor::Arena::release() {
  storage = Tensor();
  ++generation;
  for (const auto &weak : views)
    if (std::shared_ptr<ExecutionPlan::Bindings> held = weak.lock())
      held->releaseArenaViews();
  views.clear();
}

uint64_t Executor::arenaCapacity() const {
  std::lock_guard<std::mutex> lock(arena_->mutex);
  return arena_->storage.nbytes();
}

std::vector<Event *> Executor::prepareDeviceEvents(const Program &program) {
  if (!commDeviceStream_)
    commDeviceStream_ = device_->newStream();
  // Kept across runs (a run records each before any wait for it); made for
  // the events a COMM instruction waits for and a COMPUTE one records.
  std::vector<bool> waited(static_cast<size_t>(program.num_events()), false);
  for (const auto &inst : program.instructions())
    if (inst.stream() == ::dtorch::wire::COMM)
      for (int event : inst.wait_events())
        waited[event] = true;
  if (deviceEvents_.size() < waited.size())
    deviceEvents_.resize(waited.size());
  std::vector<Event *> events(waited.size(), nullptr);
  for (const auto &inst : program.instructions()) {
    int event = inst.record_event();
    if (inst.stream() != ::dtorch::wire::COMPUTE || event < 0 || !waited[event])
      continue;
    if (!deviceEvents_[event])
      deviceEvents_[event] = device_->newEvent();
    events[event] = deviceEvents_[event].get();
  }
  return events;
}

void Executor::setDevice(Device &device) {
  if (&device == device_)
    return;
  device_ = &device;
  computeStream_.reset();
  commDeviceStream_.reset();
  deviceEvents_.clear();
  std::lock_guard<std::mutex> lock(arena_->mutex);
  arena_->release(); // the next run allocates it on the new device
}

std::thread::id Executor::commThreadId() const {
  return commStream_ ? commStream_->id() : std::thread::id();
}

std::vector<Tensor> Executor::run(const Program &program,
                                  const std::vector<Tensor> &inputs,
                                  const std::vector<int64_t> &seeds) {
  validate(program);
  return runValidated(program, inputs, seeds);
}

void Executor::validate(const Program &program) const {
  validateProgram(program, comm_ ? comm_->rank() : -1);
  // Generated kernels load when the program arrives: a corrupt one is an
  // error of the upload, not of a later run.
  for (const auto &exe : program.executables())
    checkExecutable(exe);
}

namespace {

void checkCommunicatorRank(const Communicator *comm, const Program &program,
                           const RankContext &context) {
  if (comm && comm->rank() != context.rank)
    throw RuntimeError(
        "program '" + program.name() + "' is prepared for rank " +
        std::to_string(context.rank) + " but the communicator is rank " +
        std::to_string(comm->rank()));
}

} // namespace

Program Executor::prepare(const Program &program,
                          const RankContext &context) const {
  checkCommunicatorRank(comm_, program, context);
  Program resolved = resolveForRank(program, context);
  validate(resolved);
  return resolved;
}

void Executor::checkPrepared(const Program &program,
                             const RankContext &context) const {
  checkCommunicatorRank(comm_, program, context);
  if (!rankIndependent(program))
    throw RuntimeError("program '" + program.name() +
                       "' depends on the rank: it must be resolved");
  checkClassProgramFor(program, context);
  validate(program);
}

std::vector<Tensor> Executor::runValidated(const Program &program,
                                           const std::vector<Tensor> &inputs,
                                           const std::vector<int64_t> &seeds,
                                           const std::vector<bool> &donated) {
  if (!executionPlans_)
    return runUnplanned(program, inputs, seeds, donated);
  // A plan for this run only: the program is the caller's (not shared).
  std::shared_ptr<ExecutionPlan> plan = makePlan(
      std::shared_ptr<const Program>(std::shared_ptr<const void>(), &program));
  return runPlanned(*plan, inputs, seeds, donated);
}

std::vector<Tensor> Executor::runUnplanned(const Program &program,
                                           const std::vector<Tensor> &inputs,
                                           const std::vector<int64_t> &seeds,
                                           const std::vector<bool> &donated) {

  const std::string prefix = "program '" + program.name() + "': ";
  if (inputs.size() != static_cast<size_t>(program.inputs_size()))
    throw RuntimeError(prefix + "expects " +
                       std::to_string(program.inputs_size()) +
                       " input(s), got " + std::to_string(inputs.size()));

  // Donation: an output takes its donor's storage when the caller gave the
  // input up and nothing else holds it (decided before binding adds a
  // holder). Checked by the validator: the donor has the output's bytes and
  // is dead, or read elementwise, when the output is written.
  std::vector<Tensor> takenStorage;
  if (!donated.empty() && program.output_donors_size() > 0 &&
      program.output_donors_size() == program.outputs_size()) {
    takenStorage.resize(static_cast<size_t>(program.buffers_size()));
    for (int k = 0; k < program.outputs_size(); ++k) {
      int donor = program.output_donors(k);
      if (donor < 0 || static_cast<size_t>(donor) >= donated.size() ||
          !donated[donor])
        continue;
      const Tensor &given = inputs[donor];
      if (!given.soleOwner() || &given.device() != device_)
        continue;
      takenStorage[program.outputs(k)] = given;
    }
  }

  // Bind inputs (shared, not copied) and allocate every other buffer.
  std::vector<Tensor> buffers(static_cast<size_t>(program.buffers_size()));
  for (int i = 0; i < program.inputs_size(); ++i) {
    int id = program.inputs(i);
    const auto &spec = program.buffers(id);
    Shape expected(spec.shape().begin(), spec.shape().end());
    const Tensor &given = inputs[i];
    if (!given.defined() || given.dtype() != spec.dtype() ||
        given.shape() != expected)
      throw RuntimeError(prefix + "input " + std::to_string(i) + " (buffer " +
                         std::to_string(id) + ") must be " +
                         dtypeName(spec.dtype()) + shapeToString(expected) +
                         ", got " + given.describe());
    // An input on another device (a host tensor given to a GPU executor)
    // is copied over.
    buffers[id] = &given.device() == device_
                      ? given
                      : copyToDeviceStaged(given, *device_);
  }
  bool onCpu = device_->kind() == DeviceKind::Cpu;
  if (!onCpu)
    for (const auto &inst : program.instructions()) {
      if (callsGeneratedKernel(inst) &&
          !program.executables(inst.executable()).has_gpu())
        throw RuntimeError(prefix + "generated kernel '" +
                           program.executables(inst.executable()).symbol() +
                           "' is host code; " + device_->describe() +
                           " runs GPU kernels (compile for a CUDA mesh)");
    }
  // A reshape of a buffer with storage of its own (reshapeViewSources) is a
  // view of it: the reshape's output has one writer, the reshape, whose copy
  // then sees the same memory and does nothing. Where a segment is cut, the
  // values the next segment reads are its inputs and the values the forward
  // keeps for the backward its outputs, and each reshape of them was a copy.
  // On the host only: a device's copy kernel is not asked to copy a buffer
  // onto itself.
  std::vector<int> reshapedInput =
      onCpu ? reshapeViewSources(program, inputs.size(), donated)
            : std::vector<int>(static_cast<size_t>(program.buffers_size()), -1);
  // Planned buffers are views into the arena (validated: they fit and never
  // overlap while live); the others get their own storage.
  RunMemory memory;
  std::unique_lock<std::mutex> arenaLock(arena_->mutex, std::defer_lock);
  Tensor runArena;
  bool planned = program.buffer_offsets_size() == program.buffers_size() &&
                 program.arena_bytes() > 0;
  try {
    if (planned) {
      memory.arenaBytes = static_cast<uint64_t>(program.arena_bytes());
      if (arenaLock.try_lock()) {
        Tensor &kept = arena_->storage;
        if (!kept.defined() ||
            kept.nbytes() < static_cast<size_t>(program.arena_bytes())) {
          arena_->release(); // the old one (and plans' views) before growing
          kept = Tensor::empty(::dtorch::wire::BOOL, {program.arena_bytes()},
                               *device_);
          ++memory.allocations;
        }
        runArena = kept;
      } else {
        runArena = Tensor::empty(::dtorch::wire::BOOL, {program.arena_bytes()},
                                 *device_);
        ++memory.allocations;
      }
    }
    for (int id = 0; id < program.buffers_size(); ++id) {
      if (buffers[id].defined())
        continue;
      const auto &spec = program.buffers(id);
      if (int source = reshapedInput[id]; source >= 0) {
        const Tensor &input = buffers[source]; // unbound yet: copied
        int64_t numel = 1;
        for (int64_t extent : spec.shape())
          numel *= extent;
        if (input.defined() && input.dtype() == spec.dtype() &&
            input.numel() == numel) {
          buffers[id] = Tensor::viewOf(
              input, 0, spec.dtype(),
              std::vector<int64_t>(spec.shape().begin(), spec.shape().end()));
          ++memory.reshapeViews;
          continue;
        }
      }
      int64_t offset = planned ? program.buffer_offsets(id) : -1;
      if (offset >= 0) {
        buffers[id] = Tensor::viewOf(
            runArena, static_cast<size_t>(offset), spec.dtype(),
            std::vector<int64_t>(spec.shape().begin(), spec.shape().end()));
        continue;
      }
      if (!takenStorage.empty() && takenStorage[id].defined()) {
        std::vector<int64_t> shape(spec.shape().begin(), spec.shape().end());
        const Tensor &donor = takenStorage[id];
        buffers[id] =
            donor.dtype() == spec.dtype() && donor.shape() == shape
                ? donor
                : Tensor::viewOf(donor, 0, spec.dtype(), std::move(shape));
        ++memory.donations;
        memory.donatedBytes += buffers[id].nbytes();
        continue;
      }
      buffers[id] = Tensor::empty(
          spec.dtype(),
          std::vector<int64_t>(spec.shape().begin(), spec.shape().end()),
          *device_);
      memory.ownBytes += buffers[id].nbytes();
      ++memory.allocations;
    }
  } catch (const std::bad_alloc &) {
    throw RuntimeError(prefix + "out of memory allocating its buffers");
  }
  lastRun_ = memory;

  // Resolve kernels up front (validation guarantees they exist).
  std::vector<const Kernel *> kernels(
      static_cast<size_t>(program.instructions_size()), nullptr);
  std::vector<GeneratedKernelFn> generated(
      static_cast<size_t>(program.instructions_size()), nullptr);
  std::vector<GeneratedRowsKernelFn> generatedRows(
      static_cast<size_t>(program.instructions_size()), nullptr);
  // Generated GPU kernels: launched through the device's launcher.
  std::vector<const ::dtorch::wire::Executable *> deviceCode(
      static_cast<size_t>(program.instructions_size()), nullptr);
  DeviceKernelLauncher launchOnDevice = nullptr;
  std::vector<std::vector<double>> scalars(
      static_cast<size_t>(program.instructions_size()));
  const std::string *lastOp = nullptr;
  DType lastDtype = ::dtorch::wire::DTYPE_INVALID;
  const Kernel *lastKernel = nullptr;
  for (int i = 0; i < program.instructions_size(); ++i) {
    const Instruction &inst = program.instructions(i);
    if (inst.stream() != ::dtorch::wire::COMPUTE)
      continue;
    if (callsGeneratedKernel(inst)) {
      const auto &exe = program.executables(inst.executable());
      if (exe.has_gpu()) {
        if (onCpu)
          throw RuntimeError(prefix + "generated kernel '" + exe.symbol() +
                             "' is GPU code (" + exe.target() +
                             "); this executor runs on the host's CPU");
        launchOnDevice = deviceKernelLauncher(device_->name());
        if (!launchOnDevice)
          throw RuntimeError(prefix + "no launcher of generated kernels for " +
                             device_->describe());
        deviceCode[i] = &exe;
      } else {
        generated[i] = loadExecutable(exe);
        generatedRows[i] = loadExecutableRows(exe);
      }
      auto it = inst.attrs().find("scalars");
      if (it != inst.attrs().end()) {
        const std::string &bytes = it->second.data();
        scalars[i].resize(bytes.size() / sizeof(double));
        std::memcpy(scalars[i].data(), bytes.data(),
                    scalars[i].size() * sizeof(double));
      }
    } else {
      DType dtype = buffers[inst.outputs(0)].dtype();
      // A chain of like instructions asks the registry (a lock and two
      // string hashes) once.
      if (lastOp && dtype == lastDtype && inst.op() == *lastOp)
        kernels[i] = lastKernel;
      else
        kernels[i] = lookupKernel(inst.op(), dtype, device_->name());
      lastOp = &inst.op();
      lastDtype = dtype;
      lastKernel = kernels[i];
      if (!kernels[i]) // validated for the CPU registry
        throw RuntimeError(prefix + describeInstruction(program, i) + ": no " +
                           device_->name() + " kernel for " + dtypeName(dtype));
    }
  }
  RunState state(program.num_events());
  // Device events of the compute instructions whose events collectives wait
  // for, by event id (prepareDeviceEvents); empty on the CPU.
  std::vector<Event *> deviceEvents;
  auto runStream = [&](::dtorch::wire::Stream stream) {
    // Operand lists reused from one instruction to the next.
    std::vector<const Tensor *> in;
    std::vector<Tensor *> out;
    for (int i = 0; i < program.instructions_size(); ++i) {
      const Instruction &inst = program.instructions(i);
      if (inst.stream() != stream)
        continue;
      try {
        for (int event : inst.wait_events())
          if (!state.waitFor(event))
            return;
        if (state.failed())
          return;
        in.clear();
        out.clear();
        for (int id : inst.inputs())
          in.push_back(&buffers[id]);
        for (int id : inst.outputs())
          out.push_back(&buffers[id]);
        int64_t traceStart = trace_ && trace_->enabled() ? traceClockNs() : -1;
        int64_t movedBytes = -1;
        if (deviceCode[i] || generated[i]) {
          std::vector<void *> inData, outData;
          for (const Tensor *t : in)
            inData.push_back(const_cast<void *>(t->data()));
          for (Tensor *t : out)
            outData.push_back(t->data());
          if (deviceCode[i])
            launchOnDevice(*device_, *deviceCode[i], inData.data(),
                           outData.data(), scalars[i].data());
          else if (inst.op() == kFusedOp)
            runGenerated(generated[i], generatedRows[i], inData, outData,
                         scalars[i].data(), *out.front());
          else
            runGeneratedMultiTensor(generated[i], generatedRows[i], inData,
                                    outData, scalars[i].data(), inst, in, out);
        } else if (stream == ::dtorch::wire::COMPUTE)
          kernels[i]->run(AttrReader(inst.attrs(), &seeds), in, out);
        else
          movedBytes = runCommInstruction(inst, in, out, deviceEvents);
        if (traceStart >= 0)
          recordInstruction(*trace_, program, i,
                            stream == ::dtorch::wire::COMM ? TraceLane::Comm
                                                           : TraceLane::Compute,
                            traceStart, in, out, movedBytes);
        if (inst.record_event() >= 0)
          signalEvent(state, inst.record_event(),
                      stream == ::dtorch::wire::COMPUTE, deviceEvents);
      } catch (...) {
        detail::failRunAt(state, prefix, program, i);
        return;
      }
    }
  };

  bool hasComm = false;
  for (const auto &inst : program.instructions())
    hasComm |= inst.stream() == ::dtorch::wire::COMM;
  if (hasComm && !onCpu)
    deviceEvents = prepareDeviceEvents(program);
  runStreams(
      hasComm, /*markHandOff=*/false,
      [&] { runStream(::dtorch::wire::COMPUTE); },
      [&] { runStream(::dtorch::wire::COMM); });
  finishRun(state, prefix);

  std::vector<Tensor> results;
  results.reserve(program.outputs_size());
  for (int id : program.outputs())
    results.push_back(buffers[id]);
  return results;
}

} // namespace dtorch::rt
