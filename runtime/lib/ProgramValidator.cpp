#include "dtorch/runtime/ProgramValidator.h"

#include "dtorch/BufferPlan.h"

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/OptimizerCalls.h"
#include "dtorch/runtime/Shape.h"
#include "dtorch/runtime/WireLimits.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <set>

namespace dtorch::rt {

using ::dtorch::wire::Instruction;
using ::dtorch::wire::Program;

bool isCollectiveOp(std::string_view op) {
  // Asked once per instruction of every validation: a few length compares
  // for a kernel's name, no allocation or tree walk.
  static constexpr std::array<std::string_view, 8> collectives = {
      "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
      "broadcast",  "send",       "recv",           "all_to_all_v"};
  return std::find(collectives.begin(), collectives.end(), op) !=
         collectives.end();
}

bool callsGeneratedKernel(const ::dtorch::wire::Instruction &inst) {
  if (inst.op() == kFusedOp)
    return true;
  auto it = inst.attrs().find(kGeneratedKernelAttr);
  return it != inst.attrs().end() && it->second.i() != 0;
}

std::string describeInstruction(const Program &program, int index) {
  std::string text = "instruction " + std::to_string(index);
  if (index < 0 || index >= program.instructions_size())
    return text;
  const Instruction &inst = program.instructions(index);
  text += " ('" + inst.op() + "'";
  if (!inst.location().empty())
    text += " at " + inst.location();
  return text + ")";
}

namespace {

constexpr int kStreams = 2;

Shape withExtent(Shape shape, int64_t dim, int64_t extent) {
  shape[dim] = extent;
  return shape;
}

int64_t checkedSum(const std::vector<int64_t> &sizes, size_t groupSize,
                   const char *what) {
  if (sizes.size() != groupSize)
    throw RuntimeError(std::string(what) + " has " +
                       std::to_string(sizes.size()) +
                       " entries for a group of " + std::to_string(groupSize));
  int64_t total = 0;
  for (int64_t size : sizes) {
    if (size < 0)
      throw RuntimeError(std::string(what) + " has a negative entry");
    total += size;
  }
  return total;
}

void requireShape(const TensorDesc &d, const TensorDesc &like,
                  const Shape &shape, const std::string &what) {
  if (d.dtype != like.dtype || d.shape != shape)
    throw RuntimeError(what + " must be " + dtypeName(like.dtype) +
                       shapeToString(shape) + ", got " + dtypeName(d.dtype) +
                       shapeToString(d.shape));
}

void requireArity(const Instruction &inst, int minInputs, int maxInputs,
                  int outputs) {
  if (inst.inputs_size() < minInputs || inst.inputs_size() > maxInputs)
    throw RuntimeError(
        "takes " +
        (minInputs == maxInputs
             ? std::to_string(minInputs)
             : std::to_string(minInputs) + " or " + std::to_string(maxInputs)) +
        " input(s), got " + std::to_string(inst.inputs_size()));
  if (inst.outputs_size() != outputs)
    throw RuntimeError("takes " + std::to_string(outputs) + " output(s), got " +
                       std::to_string(inst.outputs_size()));
}

void checkCollective(const Instruction &inst, const std::vector<TensorDesc> &in,
                     const std::vector<TensorDesc> &out, int64_t rank) {
  AttrReader attrs(inst.attrs());
  const std::string &op = inst.op();
  if (op == "send" || op == "recv") {
    requireArity(inst, op == "send" ? 1 : 0, op == "send" ? 1 : 0,
                 op == "send" ? 0 : 1);
    int64_t peer = attrs.getInt("peer");
    if (peer < 0)
      throw RuntimeError("peer must be a rank >= 0");
    if (rank >= 0 && peer == rank)
      throw RuntimeError("peer is the rank itself (" + std::to_string(rank) +
                         ")");
    if (attrs.getInt("tag") < 0)
      throw RuntimeError("tag must be >= 0");
    return;
  }
  Group group = attrs.getInts("group");
  size_t me = groupIndexOf(group, rank);
  for (int64_t member : group)
    if (member < 0)
      throw RuntimeError("group " + groupToString(group) +
                         " has a negative rank");
  if (op == "broadcast") {
    int64_t root = attrs.getInt("root");
    groupIndexOf(group, root);
    requireArity(inst, root == rank ? 1 : 0, 1, 1);
    if (!in.empty())
      requireShape(in[0], out[0], out[0].shape, "broadcast input");
    dtypeSize(out[0].dtype);
    return;
  }
  if (op == "all_to_all_v") {
    // (rows, send counts) -> (rows received, padded; receive counts).
    requireArity(inst, 2, 2, 2);
    const TensorDesc &x = in[0], &y = out[0];
    if (x.dtype != y.dtype)
      throw RuntimeError(std::string("input is ") + dtypeName(x.dtype) +
                         ", output is " + dtypeName(y.dtype));
    if (x.shape.empty() || x.shape.size() != y.shape.size() ||
        !std::equal(x.shape.begin() + 1, x.shape.end(), y.shape.begin() + 1))
      throw RuntimeError("all_to_all_v output " + shapeToString(y.shape) +
                         " and input " + shapeToString(x.shape) +
                         " must differ in dim 0 (the rows) alone");
    std::vector<int64_t> counts = {static_cast<int64_t>(group.size())};
    if (attrs.has("segment_rows")) {
      // Segmented: n * S counts, input and output n * S * segment_rows rows.
      int64_t segmentRows = attrs.getInt("segment_rows");
      const TensorDesc &c = in[1];
      int64_t n = static_cast<int64_t>(group.size());
      if (c.shape.size() != 1 || c.shape[0] % n != 0 || segmentRows < 0 ||
          x.shape != y.shape || x.shape[0] != c.shape[0] * segmentRows)
        throw RuntimeError(
            "all_to_all_v with segment_rows " + std::to_string(segmentRows) +
            ": input " + shapeToString(x.shape) + ", output " +
            shapeToString(y.shape) + " and counts " + shapeToString(c.shape) +
            " must be rows = counts * segment_rows, counts a multiple of " +
            std::to_string(n));
      counts = c.shape;
    }
    for (const TensorDesc *c : {&in[1], &out[1]})
      if (c->dtype != ::dtorch::wire::I64 || c->shape != counts)
        throw RuntimeError("all_to_all_v counts must be int64 " +
                           shapeToString(counts) + ", got " +
                           dtypeName(c->dtype) + " " + shapeToString(c->shape));
    return;
  }
  requireArity(inst, 1, 1, 1);
  const TensorDesc &x = in[0];
  const TensorDesc &y = out[0];
  if (x.dtype != y.dtype)
    throw RuntimeError(std::string("input is ") + dtypeName(x.dtype) +
                       ", output is " + dtypeName(y.dtype));
  int64_t rankOfX = static_cast<int64_t>(x.shape.size());
  if (op == "all_reduce") {
    checkReducible(x.dtype, parseReduceOp(attrs.getString("reduce")));
    requireShape(y, x, x.shape, "all_reduce output");
  } else if (op == "all_gather") {
    int64_t dim = normalizeDim(attrs.getInt("dim"), rankOfX, "all_gather dim");
    std::vector<int64_t> sizes = attrs.getInts("sizes");
    int64_t total = checkedSum(sizes, group.size(), "all_gather sizes");
    requireShape(x, x, withExtent(x.shape, dim, sizes[me]), "all_gather input");
    requireShape(y, x, withExtent(x.shape, dim, total), "all_gather output");
  } else if (op == "reduce_scatter") {
    checkReducible(x.dtype, parseReduceOp(attrs.getString("reduce")));
    int64_t dim =
        normalizeDim(attrs.getInt("dim"), rankOfX, "reduce_scatter dim");
    std::vector<int64_t> sizes = attrs.getInts("sizes");
    int64_t total = checkedSum(sizes, group.size(), "reduce_scatter sizes");
    requireShape(x, x, withExtent(x.shape, dim, total), "reduce_scatter input");
    requireShape(y, x, withExtent(x.shape, dim, sizes[me]),
                 "reduce_scatter output");
  } else if (op == "all_to_all") {
    int64_t splitDim = normalizeDim(attrs.getInt("split_dim"), rankOfX,
                                    "all_to_all split_dim");
    int64_t concatDim = normalizeDim(attrs.getInt("concat_dim"), rankOfX,
                                     "all_to_all concat_dim");
    int64_t splitTotal = checkedSum(attrs.getInts("split_sizes"), group.size(),
                                    "all_to_all split_sizes");
    int64_t concatTotal = checkedSum(attrs.getInts("concat_sizes"),
                                     group.size(), "all_to_all concat_sizes");
    if (x.shape[splitDim] != splitTotal)
      throw RuntimeError("all_to_all input extent " +
                         std::to_string(x.shape[splitDim]) +
                         " along split_dim differs from sum(split_sizes) " +
                         std::to_string(splitTotal));
    if (y.shape.size() != x.shape.size() || y.shape[concatDim] != concatTotal)
      throw RuntimeError("all_to_all output " + shapeToString(y.shape) +
                         " must have rank " + std::to_string(rankOfX) +
                         " and extent sum(concat_sizes) " +
                         std::to_string(concatTotal) + " along concat_dim");
    for (int64_t d = 0; d < rankOfX; ++d)
      if (d != splitDim && d != concatDim && x.shape[d] != y.shape[d])
        throw RuntimeError("all_to_all output " + shapeToString(y.shape) +
                           " and input " + shapeToString(x.shape) +
                           " differ outside split_dim and concat_dim");
  }
}

struct Validator {
  const Program &program;
  int communicatorRank;
  std::string prefix;
  // Scratch of checkInstruction, reused from one instruction to the next
  // (a program is thousands of instructions).
  mutable std::vector<TensorDesc> scratchIn, scratchOut;
  // The kernel of the last instruction checked, by op and output dtype:
  // a chain of like instructions asks the registry once.
  mutable std::string lastOp;
  mutable DType lastDtype = ::dtorch::wire::DTYPE_INVALID;
  mutable const Kernel *lastKernel = nullptr;

  [[noreturn]] void fail(const std::string &message) const {
    throw RuntimeError(prefix + message);
  }
  [[noreturn]] void failAt(int index, const std::string &message) const {
    throw RuntimeError(prefix + describeInstruction(program, index) + ": " +
                       message);
  }

  void checkHeader() const {
    if (program.version() != ::dtorch::wire::PROGRAM_FORMAT_VERSION)
      fail("unsupported program format version " +
           std::to_string(program.version()) + " (this runtime reads version " +
           std::to_string(
               static_cast<int>(::dtorch::wire::PROGRAM_FORMAT_VERSION)) +
           ")");
    if (program.num_events() < 0)
      fail("num_events is negative");
    // Counts first (WireLimits.h): the checks below allocate per item.
    if (program.num_events() > kMaxProgramEvents ||
        program.buffers_size() > kMaxProgramBuffers ||
        program.instructions_size() > kMaxProgramInstructions)
      fail("program of " + std::to_string(program.instructions_size()) +
           " instructions, " + std::to_string(program.buffers_size()) +
           " buffers and " + std::to_string(program.num_events()) +
           " events exceeds the limits (" +
           std::to_string(kMaxProgramInstructions) + ", " +
           std::to_string(kMaxProgramBuffers) + ", " +
           std::to_string(kMaxProgramEvents) + ")");
    // Each event is recorded by one instruction; the count sizes the
    // validator's and the executor's tables, so it is bounded by what the
    // message holds.
    if (program.num_events() > program.instructions_size())
      fail("num_events " + std::to_string(program.num_events()) +
           " exceeds the number of instructions (" +
           std::to_string(program.instructions_size()) + ")");
    for (int b = 0; b < program.buffers_size(); ++b) {
      const auto &spec = program.buffers(b);
      try {
        if (spec.shape_size() > kMaxTensorRank)
          throw RuntimeError("rank " + std::to_string(spec.shape_size()) +
                             " exceeds the limit of " +
                             std::to_string(kMaxTensorRank) + " dims");
        if (spec.dtype() == ::dtorch::wire::DTYPE_INVALID)
          throw RuntimeError("invalid dtype");
        size_t elementSize = dtypeSize(spec.dtype());
        int64_t numel =
            shapeNumel(Shape(spec.shape().begin(), spec.shape().end()));
        if (numel > kMaxTensorBytes / static_cast<int64_t>(elementSize))
          throw RuntimeError("too many elements: more than " +
                             std::to_string(kMaxTensorBytes) + " bytes");
      } catch (const RuntimeError &error) {
        fail("buffer " + std::to_string(b) + ": " + error.what());
      }
    }
    std::set<int> inputs;
    for (int id : program.inputs()) {
      if (id < 0 || id >= program.buffers_size())
        fail("input buffer id " + std::to_string(id) + " is out of range (" +
             std::to_string(program.buffers_size()) + " buffers)");
      if (!inputs.insert(id).second)
        fail("buffer " + std::to_string(id) + " is bound twice");
    }
    for (int id : program.outputs())
      if (id < 0 || id >= program.buffers_size())
        fail("output buffer id " + std::to_string(id) + " is out of range (" +
             std::to_string(program.buffers_size()) + " buffers)");
    bool hasCollectives = false;
    for (const auto &inst : program.instructions())
      hasCollectives |= isCollectiveOp(inst.op());
    if (hasCollectives) {
      if (communicatorRank < 0)
        fail("it has collectives but the executor has no communicator");
    }
  }

  TensorDesc descOf(int id) const {
    const auto &spec = program.buffers(id);
    return TensorDesc{spec.dtype(),
                      Shape(spec.shape().begin(), spec.shape().end())};
  }

  // The descriptions of buffers `ids` (checked in range) into `descs`,
  // reusing its storage.
  void describeInto(const google::protobuf::RepeatedField<int32_t> &ids,
                    std::vector<TensorDesc> &descs) const {
    descs.resize(static_cast<size_t>(ids.size()));
    for (int k = 0; k < ids.size(); ++k) {
      const auto &spec = program.buffers(ids[k]);
      descs[k].dtype = spec.dtype();
      descs[k].shape.assign(spec.shape().begin(), spec.shape().end());
    }
  }

  // The CPU kernel of `op` for `dtype`; throws when there is none.
  const Kernel *kernelFor(const std::string &op, DType dtype) const {
    if (lastKernel && dtype == lastDtype && op == lastOp)
      return lastKernel;
    const KernelRegistry &registry = KernelRegistry::global();
    const Kernel *kernel = registry.lookup(op, dtype, kCpuDevice);
    if (!kernel)
      throw RuntimeError("op '" + op + "' has no " + kCpuDevice +
                         " kernel for " + dtypeName(dtype));
    lastOp = op;
    lastDtype = dtype;
    lastKernel = kernel;
    return kernel;
  }

  void checkInstruction(int index) const {
    const Instruction &inst = program.instructions(index);
    if (inst.stream() != ::dtorch::wire::COMPUTE &&
        inst.stream() != ::dtorch::wire::COMM)
      failAt(index, "unknown stream " +
                        std::to_string(static_cast<int>(inst.stream())));
    for (int id : inst.inputs())
      if (id < 0 || id >= program.buffers_size())
        failAt(index, "input buffer id " + std::to_string(id) +
                          " is out of range (" +
                          std::to_string(program.buffers_size()) + " buffers)");
    for (int id : inst.outputs())
      if (id < 0 || id >= program.buffers_size())
        failAt(index, "output buffer id " + std::to_string(id) +
                          " is out of range (" +
                          std::to_string(program.buffers_size()) + " buffers)");
    for (int event : inst.wait_events())
      if (event < 0 || event >= program.num_events())
        failAt(index, "waits on event " + std::to_string(event) +
                          " outside [0, " +
                          std::to_string(program.num_events()) + ")");
    if (inst.record_event() < -1 || inst.record_event() >= program.num_events())
      failAt(index, "records event " + std::to_string(inst.record_event()) +
                        " outside [0, " + std::to_string(program.num_events()) +
                        ") (use -1 for none)");
    for (const auto &[name, attr] : inst.attrs())
      if (attr.value_case() == ::dtorch::wire::Attr::kMesh)
        failAt(index, "attribute '" + name +
                          "' is a mesh value: resolve the program for a rank "
                          "first");
    std::vector<TensorDesc> &in = scratchIn, &out = scratchOut;
    describeInto(inst.inputs(), in);
    describeInto(inst.outputs(), out);
    try {
      if (isCollectiveOp(inst.op())) {
        if (inst.stream() != ::dtorch::wire::COMM)
          throw RuntimeError("collectives run on the COMM stream");
        checkCollective(inst, in, out, communicatorRank);
        return;
      }
      if (inst.stream() != ::dtorch::wire::COMPUTE)
        throw RuntimeError("kernels run on the COMPUTE stream");
      if (inst.op() == kFusedOp) {
        checkFused(inst, in, out);
        return;
      }
      // A registry op calling its generated kernel: the call matches the
      // executable, and the op's own checks below hold too.
      if (callsGeneratedKernel(inst))
        checkFused(inst, in, out);
      bool known = (lastKernel && inst.op() == lastOp) ||
                   KernelRegistry::global().hasOp(inst.op());
      if (!known)
        throw RuntimeError("unknown op '" + inst.op() + "'");
      if (out.empty())
        throw RuntimeError("a kernel needs at least one output");
      const Kernel *kernel = kernelFor(inst.op(), out[0].dtype);
      // kVariadicInputs as numOutputs: one or more outputs (fused_adam).
      bool variadic = kernel->numInputs == kVariadicInputs;
      if ((variadic ? inst.inputs_size() < 1
                    : inst.inputs_size() != kernel->numInputs) ||
          (kernel->numOutputs == kVariadicInputs
               ? inst.outputs_size() < 1
               : inst.outputs_size() != kernel->numOutputs))
        throw RuntimeError("takes " +
                           (variadic ? std::string("1 or more")
                                     : std::to_string(kernel->numInputs)) +
                           " input(s) and " +
                           (kernel->numOutputs == kVariadicInputs
                                ? std::string("1 or more")
                                : std::to_string(kernel->numOutputs)) +
                           " output(s), got " +
                           std::to_string(inst.inputs_size()) + " and " +
                           std::to_string(inst.outputs_size()));
      if (kernel->check)
        kernel->check(AttrReader(inst.attrs()), in, out);
    } catch (const RuntimeError &error) {
      failAt(index, error.what());
    }
  }

  // A call of a generated kernel: its buffers match the executable's
  // declared signature exactly (count, dtype, shape).
  void checkFused(const Instruction &inst, const std::vector<TensorDesc> &in,
                  const std::vector<TensorDesc> &out) const {
    if (inst.executable() < 0 ||
        inst.executable() >= program.executables_size())
      throw RuntimeError("calls executable " +
                         std::to_string(inst.executable()) + " outside [0, " +
                         std::to_string(program.executables_size()) + ")");
    const ::dtorch::wire::Executable &exe =
        program.executables(inst.executable());
    if (in.size() != static_cast<size_t>(exe.inputs_size()) ||
        out.size() != static_cast<size_t>(exe.outputs_size()))
      throw RuntimeError("executable '" + exe.symbol() + "' takes " +
                         std::to_string(exe.inputs_size()) + " input(s) and " +
                         std::to_string(exe.outputs_size()) +
                         " output(s), got " + std::to_string(in.size()) +
                         " and " + std::to_string(out.size()));
    if (out.empty())
      throw RuntimeError("a fused kernel needs at least one output");
    auto check = [&](const TensorDesc &d,
                     const ::dtorch::wire::TensorSpec &spec,
                     const std::string &what) {
      Shape shape(spec.shape().begin(), spec.shape().end());
      if (d.dtype != spec.dtype() || d.shape != shape)
        throw RuntimeError(what + " is " + dtypeName(d.dtype) +
                           shapeToString(d.shape) + " but executable '" +
                           exe.symbol() + "' declares " +
                           dtypeName(spec.dtype()) + shapeToString(shape));
    };
    auto scalars = inst.attrs().find("scalars");
    size_t scalarBytes =
        scalars == inst.attrs().end() ? 0 : scalars->second.data().size();
    if (scalarBytes != static_cast<size_t>(exe.num_scalars()) * 8)
      throw RuntimeError("executable '" + exe.symbol() + "' takes " +
                         std::to_string(exe.num_scalars()) +
                         " scalar(s), the 'scalars' attribute holds " +
                         std::to_string(scalarBytes) + " bytes");
    for (size_t i = 0; i < in.size(); ++i)
      check(in[i], exe.inputs(static_cast<int>(i)),
            "input " + std::to_string(i));
    for (size_t i = 0; i < out.size(); ++i)
      check(out[i], exe.outputs(static_cast<int>(i)),
            "output " + std::to_string(i));
  }

  // Single writer per buffer, single recorder per event, every read ordered
  // after its write, and the two streams cannot deadlock on events.
  void checkDataflow() const {
    int numInstructions = program.instructions_size();
    std::vector<bool> isInput(program.buffers_size(), false);
    for (int id : program.inputs())
      isInput[id] = true;
    std::vector<int> writer(program.buffers_size(), -1);
    std::vector<int> recorder(program.num_events(), -1);
    std::array<std::vector<int>, kStreams> streamOrder;
    std::vector<int> positionInStream(numInstructions);
    for (int i = 0; i < numInstructions; ++i) {
      const Instruction &inst = program.instructions(i);
      for (int id : inst.outputs()) {
        if (isInput[id])
          failAt(i, "writes buffer " + std::to_string(id) +
                        ", which is a program input");
        if (writer[id] >= 0)
          failAt(i, "writes buffer " + std::to_string(id) +
                        ", already written by " +
                        describeInstruction(program, writer[id]));
        writer[id] = i;
      }
      if (inst.record_event() >= 0) {
        if (recorder[inst.record_event()] >= 0)
          failAt(i, "records event " + std::to_string(inst.record_event()) +
                        ", already recorded by " +
                        describeInstruction(program,
                                            recorder[inst.record_event()]));
        recorder[inst.record_event()] = i;
      }
      int stream = static_cast<int>(inst.stream());
      positionInStream[i] = static_cast<int>(streamOrder[stream].size());
      streamOrder[stream].push_back(i);
    }
    for (int i = 0; i < numInstructions; ++i)
      for (int event : program.instructions(i).wait_events())
        if (recorder[event] < 0)
          failAt(i, "waits on event " + std::to_string(event) +
                        ", which no instruction records");
    for (int id : program.outputs())
      if (!isInput[id] && writer[id] < 0)
        fail("output buffer " + std::to_string(id) + " is never written");

    // Simulate the two streams. A clock counts, per stream, how many of its
    // instructions are known to have finished.
    using Clock = std::array<int, kStreams>;
    std::vector<Clock> eventClock(program.num_events(), Clock{0, 0});
    std::vector<bool> recorded(program.num_events(), false);
    std::array<Clock, kStreams> streamClock{Clock{0, 0}, Clock{0, 0}};
    std::array<size_t, kStreams> next{0, 0};
    while (next[0] < streamOrder[0].size() || next[1] < streamOrder[1].size()) {
      bool progressed = false;
      for (int s = 0; s < kStreams; ++s) {
        while (next[s] < streamOrder[s].size()) {
          int i = streamOrder[s][next[s]];
          const Instruction &inst = program.instructions(i);
          bool ready = true;
          for (int event : inst.wait_events())
            ready = ready && recorded[event];
          if (!ready)
            break;
          Clock clock = streamClock[s];
          for (int event : inst.wait_events())
            for (int t = 0; t < kStreams; ++t)
              clock[t] = std::max(clock[t], eventClock[event][t]);
          for (int id : inst.inputs()) {
            if (isInput[id])
              continue;
            int w = writer[id];
            if (w < 0)
              failAt(i, "reads buffer " + std::to_string(id) +
                            ", which nothing writes");
            int ws = static_cast<int>(program.instructions(w).stream());
            if (clock[ws] <= positionInStream[w])
              failAt(i, "reads buffer " + std::to_string(id) +
                            " without being ordered after " +
                            describeInstruction(program, w) +
                            ", which writes it (missing event?)");
          }
          clock[s] = positionInStream[i] + 1;
          streamClock[s] = clock;
          if (inst.record_event() >= 0) {
            recorded[inst.record_event()] = true;
            eventClock[inst.record_event()] = clock;
          }
          ++next[s];
          progressed = true;
        }
      }
      if (!progressed) {
        std::string stuck;
        for (int s = 0; s < kStreams; ++s)
          if (next[s] < streamOrder[s].size()) {
            if (!stuck.empty())
              stuck += " and ";
            stuck += describeInstruction(program, streamOrder[s][next[s]]);
          }
        fail("deadlock: " + stuck + " wait on events recorded only after them");
      }
    }
  }

  // Buffer planning (Program.buffer_offsets): every planned buffer fits the
  // arena at an aligned offset, inputs and outputs keep their own storage,
  // and two buffers sharing arena memory are never live at the same time
  // (the live ranges of include/dtorch/BufferPlan.h, recomputed here from
  // the instructions and events) unless one is an elementwise instruction's
  // output written over an input that dies there, or a reshape's output at
  // its input's place (a view: both then count as one buffer, live until
  // the last use of either).
  void checkArena() const {
    namespace bp = ::dtorch::bufplan;
    int numBuffers = program.buffers_size();
    if (program.buffer_offsets_size() == 0) {
      if (program.arena_bytes() != 0)
        fail("arena_bytes is " + std::to_string(program.arena_bytes()) +
             " but no buffer is planned");
      return;
    }
    if (program.buffer_offsets_size() != numBuffers)
      fail("buffer_offsets has " +
           std::to_string(program.buffer_offsets_size()) + " entries for " +
           std::to_string(numBuffers) + " buffers");
    int64_t arena = program.arena_bytes();
    if (arena < 0 || arena > kMaxTensorBytes)
      fail("arena_bytes " + std::to_string(arena) + " is out of range");
    std::vector<int64_t> bytes(numBuffers, -1);
    for (int b = 0; b < numBuffers; ++b) {
      int64_t offset = program.buffer_offsets(b);
      if (offset == -1)
        continue;
      if (offset < 0 || offset % bp::kArenaAlignment != 0)
        fail("buffer " + std::to_string(b) + " has arena offset " +
             std::to_string(offset) + " (must be -1 or a multiple of " +
             std::to_string(bp::kArenaAlignment) + ")");
      TensorDesc desc = descOf(b);
      bytes[b] =
          shapeNumel(desc.shape) * static_cast<int64_t>(dtypeSize(desc.dtype));
      if (offset > arena || bytes[b] > arena - offset)
        fail("buffer " + std::to_string(b) + " (" + std::to_string(bytes[b]) +
             " bytes at offset " + std::to_string(offset) +
             ") does not fit in the arena of " + std::to_string(arena) +
             " bytes");
    }
    for (int id : program.inputs())
      if (bytes[id] >= 0)
        fail("input buffer " + std::to_string(id) + " is placed in the arena");
    for (int id : program.outputs())
      if (bytes[id] >= 0)
        fail("output buffer " + std::to_string(id) + " is placed in the arena");

    std::vector<int> recorder(program.num_events(), -1);
    for (int i = 0; i < program.instructions_size(); ++i)
      if (program.instructions(i).record_event() >= 0)
        recorder[program.instructions(i).record_event()] = i;
    std::vector<bp::Step> steps(program.instructions_size());
    for (int i = 0; i < program.instructions_size(); ++i) {
      const Instruction &inst = program.instructions(i);
      steps[i].stream = static_cast<int>(inst.stream());
      steps[i].reads.assign(inst.inputs().begin(), inst.inputs().end());
      steps[i].writes.assign(inst.outputs().begin(), inst.outputs().end());
      for (int event : inst.wait_events())
        steps[i].waitsOn.push_back(recorder[event]);
    }
    bp::StepOrder order(steps, kStreams);
    bp::Liveness live = bp::computeLiveness(steps, order, numBuffers);

    // Views: a reshape's output at its input's place shares the input's
    // memory for as long as either lives (bufplan::viewAliases merges their
    // live ranges and accesses), so the checks below see the group.
    std::vector<bp::ViewPair> views;
    for (int i = 0; i < program.instructions_size(); ++i) {
      const Instruction &inst = program.instructions(i);
      if (inst.stream() == ::dtorch::wire::COMPUTE && inst.inputs_size() == 1 &&
          inst.outputs_size() == 1 && bp::viewKernel(inst.op())) {
        int in = inst.inputs(0), out = inst.outputs(0);
        if (bytes[in] > 0 && bytes[out] == bytes[in] &&
            program.buffer_offsets(in) == program.buffer_offsets(out))
          views.push_back({in, out});
      }
    }
    if (!views.empty())
      bp::viewAliases(live, order, views);

    // In-place chains: an output at the same place as an input that dies at
    // its elementwise instruction joins the input's chain, as does a view.
    std::vector<int> chain(numBuffers);
    for (int b = 0; b < numBuffers; ++b)
      chain[b] = b;
    auto root = [&](int b) {
      while (chain[b] != b)
        b = chain[b] = chain[chain[b]];
      return b;
    };
    for (const bp::ViewPair &v : views)
      if (root(v.output) != root(v.input))
        chain[root(v.output)] = root(v.input);
    for (int i = 0; i < program.instructions_size(); ++i) {
      const Instruction &inst = program.instructions(i);
      if (inst.stream() != ::dtorch::wire::COMPUTE ||
          inst.outputs_size() != 1 || !bp::inPlaceKernel(inst.op()))
        continue;
      int out = inst.outputs(0);
      for (int in : inst.inputs())
        if (bytes[in] > 0 && bytes[out] == bytes[in] &&
            program.buffer_offsets(in) == program.buffer_offsets(out) &&
            bp::inPlaceLegal(live, order, in, i))
          chain[root(out)] = root(in);
    }

    // Each chain (a buffer alone, or an in-place chain: one place in the
    // arena) is live from its first write to its members' last range end.
    // Sweeping the chains by first step, the memory of those still live
    // must never overlap: each new one is checked against its neighbours
    // by offset.
    struct Unit {
      int64_t offset, size;
      int first, last, buffer;
    };
    std::vector<int> unitOf(numBuffers, -1);
    std::vector<Unit> units;
    for (int b = 0; b < numBuffers; ++b) {
      if (bytes[b] <= 0 || live.ranges[b].first < 0)
        continue;
      int r = root(b);
      if (unitOf[r] < 0) {
        unitOf[r] = static_cast<int>(units.size());
        units.push_back({program.buffer_offsets(b), bytes[b],
                         live.ranges[b].first, live.ranges[b].last, b});
      }
      Unit &unit = units[unitOf[r]];
      unit.first = std::min(unit.first, live.ranges[b].first);
      unit.last = std::max(unit.last, live.ranges[b].last);
      unit.size = std::max(unit.size, bytes[b]);
    }
    std::vector<int> byFirst(units.size());
    for (size_t u = 0; u < units.size(); ++u)
      byFirst[u] = static_cast<int>(u);
    std::sort(byFirst.begin(), byFirst.end(),
              [&](int a, int b) { return units[a].first < units[b].first; });
    std::map<int64_t, int> liveByOffset;
    std::set<std::pair<int, int>> liveByLast; // (last, unit)
    auto conflict = [&](const Unit &a, const Unit &b) {
      fail("buffers " + std::to_string(a.buffer) + " and " +
           std::to_string(b.buffer) +
           " share arena memory while both are live (instructions " +
           std::to_string(a.first) + ".." + std::to_string(a.last) + " and " +
           std::to_string(b.first) + ".." + std::to_string(b.last) + ")");
    };
    for (int u : byFirst) {
      const Unit &unit = units[u];
      while (!liveByLast.empty() && liveByLast.begin()->first < unit.first) {
        liveByOffset.erase(units[liveByLast.begin()->second].offset);
        liveByLast.erase(liveByLast.begin());
      }
      auto next = liveByOffset.lower_bound(unit.offset);
      if (next != liveByOffset.end() &&
          units[next->second].offset < unit.offset + unit.size)
        conflict(units[next->second], unit);
      if (next != liveByOffset.begin()) {
        const Unit &before = units[std::prev(next)->second];
        if (before.offset + before.size > unit.offset)
          conflict(before, unit);
      }
      liveByOffset[unit.offset] = u;
      liveByLast.insert({unit.last, u});
    }
  }

  // Donation (Program.output_donors): each entry names an input (at most
  // one output per input) of exactly its output's bytes; the output is
  // written by one instruction that the input's every other access happens
  // before, and which reads the input, if at all, elementwise (an in-place
  // kernel, or a generated kernel reading it at the output's dtype and
  // shape). The rules of include/dtorch/BufferPlan.h, as the compiler's
  // --rank-mark-donations applies them.
  /// Whether `out`, an output of a multi-tensor optimizer instruction
  /// (fused_adam, fused_sgd), belongs to the parameter whose group holds
  /// `in`: the kernel reads that group's elements before writing them.
  static bool optimizerGroupHolds(const Instruction &inst, int in, int out) {
    std::optional<OptimizerCallGroups> g = optimizerCallGroups(inst);
    if (!g)
      return false;
    int param = -1;
    for (int k = 0; k < inst.outputs_size(); ++k)
      if (inst.outputs(k) == out)
        param = k % g->numParams;
    for (int k = 0; param >= 0 && k < g->inputsPerParam; ++k)
      if (inst.inputs(g->input(k, param)) == in)
        return true;
    return false;
  }

  void checkOutputDonors() const {
    namespace bp = ::dtorch::bufplan;
    if (program.output_donors_size() == 0)
      return;
    if (program.output_donors_size() != program.outputs_size())
      fail("output_donors has " + std::to_string(program.output_donors_size()) +
           " entries for " + std::to_string(program.outputs_size()) +
           " outputs");
    int numBuffers = program.buffers_size();
    std::vector<int> writer(numBuffers, -1);
    std::vector<int> recorder(program.num_events(), -1);
    std::vector<bp::Step> steps(program.instructions_size());
    for (int i = 0; i < program.instructions_size(); ++i) {
      const Instruction &inst = program.instructions(i);
      if (inst.record_event() >= 0)
        recorder[inst.record_event()] = i;
      for (int id : inst.outputs())
        writer[id] = i;
    }
    for (int i = 0; i < program.instructions_size(); ++i) {
      const Instruction &inst = program.instructions(i);
      steps[i].stream = static_cast<int>(inst.stream());
      steps[i].reads.assign(inst.inputs().begin(), inst.inputs().end());
      steps[i].writes.assign(inst.outputs().begin(), inst.outputs().end());
      for (int event : inst.wait_events())
        steps[i].waitsOn.push_back(recorder[event]);
    }
    bp::StepOrder order(steps, kStreams);
    bp::Liveness live = bp::computeLiveness(steps, order, numBuffers);
    auto bytesOf = [&](int id) {
      TensorDesc desc = descOf(id);
      return shapeNumel(desc.shape) *
             static_cast<int64_t>(dtypeSize(desc.dtype));
    };
    std::vector<bool> given(program.inputs_size(), false);
    for (int k = 0; k < program.outputs_size(); ++k) {
      int donor = program.output_donors(k);
      if (donor == -1)
        continue;
      std::string what = "output " + std::to_string(k) + "'s donor ";
      if (donor < 0 || donor >= program.inputs_size())
        fail(what + std::to_string(donor) + " is not an input index");
      if (given[donor])
        fail(what + "input " + std::to_string(donor) +
             " is given to another output too");
      given[donor] = true;
      int in = program.inputs(donor), out = program.outputs(k);
      for (int other = 0; other < program.outputs_size(); ++other)
        if (other != k && program.outputs(other) == out)
          fail(what + "names an output returned twice");
      for (int id : program.inputs())
        if (id == out)
          fail(what + "names an output that is an input");
      if (bytesOf(in) != bytesOf(out))
        fail(what + "input " + std::to_string(donor) + " has " +
             std::to_string(bytesOf(in)) + " bytes, the output " +
             std::to_string(bytesOf(out)));
      int w = writer[out];
      if (w < 0)
        fail(what + "names an output that nothing writes");
      const Instruction &inst = program.instructions(w);
      bool reads = std::find(inst.inputs().begin(), inst.inputs().end(), in) !=
                   inst.inputs().end();
      if (reads) {
        TensorDesc a = descOf(in), b = descOf(out);
        bool elementwise =
            inst.stream() == ::dtorch::wire::COMPUTE &&
            ((inst.outputs_size() == 1 && bp::inPlaceKernel(inst.op()) &&
              a.dtype == b.dtype) ||
             (inst.op() == kFusedOp && a.dtype == b.dtype &&
              a.shape == b.shape) ||
             (a.dtype == b.dtype && a.shape == b.shape &&
              optimizerGroupHolds(inst, in, out)));
        if (!elementwise)
          fail(what + "input " + std::to_string(donor) + " is read by " +
               describeInstruction(program, w) +
               ", which writes the output and is not elementwise");
      }
      if (!bp::inPlaceLegal(live, order, in, w))
        fail(what + "input " + std::to_string(donor) +
             " is still accessed after " + describeInstruction(program, w) +
             " writes the output");
    }
  }
};

} // namespace

void validateMeshProgram(const Program &program) {
  const std::string prefix = "invalid program '" + program.name() + "': ";
  auto fail = [&](const std::string &message) {
    throw RuntimeError(prefix + message);
  };
  if (program.version() != ::dtorch::wire::PROGRAM_FORMAT_VERSION)
    fail("unsupported program format version " +
         std::to_string(program.version()) + " (this runtime reads version " +
         std::to_string(
             static_cast<int>(::dtorch::wire::PROGRAM_FORMAT_VERSION)) +
         ")");
  const auto &mesh = program.mesh_shape();
  int64_t axes = mesh.size();
  if (axes == 0)
    fail("it has no mesh_shape");
  for (int64_t extent : mesh)
    if (extent < 1)
      fail("mesh_shape has an extent below 1");
  if (program.positions_size() == 0)
    fail("it names no mesh positions");
  for (int b = 0; b < program.positions_size(); ++b) {
    const auto &box = program.positions(b);
    if (box.lo_size() != axes || box.hi_size() != axes)
      fail("position box " + std::to_string(b) + " needs " +
           std::to_string(axes) + " ranges (one per mesh axis)");
    for (int64_t a = 0; a < axes; ++a)
      if (box.lo(a) < 0 || box.lo(a) >= box.hi(a) || box.hi(a) > mesh[a])
        fail("position box " + std::to_string(b) + " range [" +
             std::to_string(box.lo(a)) + ", " + std::to_string(box.hi(a)) +
             ") of axis " + std::to_string(a) + " is not inside [0, " +
             std::to_string(mesh[a]) + ")");
  }
  auto checkAxis = [&](int64_t axis) {
    if (axis < 0 || axis >= axes)
      throw RuntimeError("mesh axis " + std::to_string(axis) +
                         " is out of range for a mesh of rank " +
                         std::to_string(axes));
  };
  for (int i = 0; i < program.instructions_size(); ++i) {
    const Instruction &inst = program.instructions(i);
    try {
      for (const auto &[name, attr] : inst.attrs()) {
        if (attr.value_case() != ::dtorch::wire::Attr::kMesh)
          continue;
        const ::dtorch::wire::MeshValue &value = attr.mesh();
        switch (value.kind()) {
        case ::dtorch::wire::MeshValue::BOX_OFFSET: {
          int64_t rank = value.global_shape_size();
          if (value.shard_dims_size() != axes)
            throw RuntimeError("mesh value '" + name + "' has " +
                               std::to_string(value.shard_dims_size()) +
                               " shard_dims for a mesh of rank " +
                               std::to_string(axes));
          for (int64_t extent : value.global_shape())
            if (extent < 0)
              throw RuntimeError("mesh value '" + name +
                                 "' has a negative global extent");
          for (int64_t d : value.shard_dims())
            if (d < -1 || d >= rank)
              throw RuntimeError("mesh value '" + name + "' shards dim " +
                                 std::to_string(d) + " of a rank-" +
                                 std::to_string(rank) + " tensor");
          if (value.dim() < -1 || value.dim() >= rank)
            throw RuntimeError("mesh value '" + name + "' dim " +
                               std::to_string(value.dim()) +
                               " is out of range");
          break;
        }
        case ::dtorch::wire::MeshValue::CHUNK_OFFSET:
          checkAxis(value.axis());
          if (value.extent() < 0)
            throw RuntimeError("mesh value '" + name +
                               "' has a negative extent");
          break;
        case ::dtorch::wire::MeshValue::MESH_COORD:
          checkAxis(value.axis());
          break;
        default:
          throw RuntimeError("mesh value '" + name + "' has unknown kind " +
                             std::to_string(static_cast<int>(value.kind())));
        }
      }
      if (!isCollectiveOp(inst.op()) || !inst.attrs().count("axis"))
        continue;
      AttrReader attrs(inst.attrs());
      if (attrs.has("group"))
        throw RuntimeError("names both a mesh axis and a group");
      int64_t axis = attrs.getInt("axis");
      checkAxis(axis);
      // Point to point in a class program: `peer` is a coordinate of
      // `axis` (resolveForRank makes it the global rank there).
      if (inst.op() == "send" || inst.op() == "recv") {
        int64_t peer = attrs.getInt("peer");
        if (peer < 0 || peer >= mesh[axis])
          throw RuntimeError("peer coordinate " + std::to_string(peer) +
                             " is out of range for mesh axis " +
                             std::to_string(axis) + " of " +
                             std::to_string(mesh[axis]) + " ranks");
        if (attrs.getInt("tag") < 0)
          throw RuntimeError("tag must be >= 0");
      }
      for (const char *sizes : {"sizes", "split_sizes", "concat_sizes"})
        if (attrs.has(sizes) &&
            static_cast<int64_t>(attrs.getInts(sizes).size()) != mesh[axis])
          throw RuntimeError(std::string(sizes) + " has " +
                             std::to_string(attrs.getInts(sizes).size()) +
                             " entries for mesh axis " + std::to_string(axis) +
                             " of " + std::to_string(mesh[axis]) + " ranks");
    } catch (const RuntimeError &error) {
      throw RuntimeError(prefix + describeInstruction(program, i) + ": " +
                         error.what());
    }
  }
}

void validateProgram(const Program &program, int communicatorRank) {
  Validator validator{program, communicatorRank,
                      "invalid program '" + program.name() + "': "};
  validator.checkHeader();
  for (int i = 0; i < program.instructions_size(); ++i)
    validator.checkInstruction(i);
  validator.checkDataflow();
  validator.checkArena();
  validator.checkOutputDonors();
}

} // namespace dtorch::rt
