//===- ProgramEmitter.cpp - rank-dialect functions to wire programs ------===//
#include "ProgramEmitter.h"

#include "GpuKernelCodegen.h"

#include "KernelCodegen.h"
#include "OptimizerKernelCodegen.h"

#include "dtorch/runtime/ProgramValidator.h"
#include "rank/IR/Rank.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <charconv>
#include <cstring>

using namespace mlir;

namespace dtorch {

wire::DType toWireDType(Type t) {
  if (t.isF32())
    return wire::F32;
  if (t.isF64())
    return wire::F64;
  if (t.isF16())
    return wire::F16;
  if (t.isBF16())
    return wire::BF16;
  if (t.isInteger(1))
    return wire::BOOL;
  if (t.isInteger(32))
    return wire::I32;
  if (t.isInteger(64))
    return wire::I64;
  return wire::DTYPE_INVALID;
}

namespace {

/// Little-endian element bytes of a dense attribute in its element type.
FailureOr<std::string> denseBytes(DenseElementsAttr dense) {
  Type et = dense.getElementType();
  std::string out;
  if (auto ft = dyn_cast<FloatType>(et)) {
    for (APFloat v : dense.getValues<APFloat>()) {
      APInt bits = v.bitcastToAPInt();
      uint64_t word = bits.getZExtValue();
      out.append(reinterpret_cast<const char *>(&word), ft.getWidth() / 8);
    }
    return out;
  }
  if (auto it = dyn_cast<IntegerType>(et)) {
    unsigned bytes = it.getWidth() == 1 ? 1 : it.getWidth() / 8;
    for (APInt v : dense.getValues<APInt>()) {
      uint64_t word = it.getWidth() == 1 ? v.getZExtValue() : v.getSExtValue();
      out.append(reinterpret_cast<const char *>(&word), bytes);
    }
    return out;
  }
  return failure();
}

LogicalResult setAttr(Operation *op, wire::Instruction &inst, StringRef name,
                      Attribute value) {
  wire::Attr a;
  if (auto box = dyn_cast<rank::BoxOffsetAttr>(value)) {
    wire::MeshValue *m = a.mutable_mesh();
    m->set_kind(wire::MeshValue::BOX_OFFSET);
    for (int64_t s : box.getGlobalShape().asArrayRef())
      m->add_global_shape(s);
    for (int64_t d : box.getShardDims().asArrayRef())
      m->add_shard_dims(d);
    m->set_dim(box.getDim());
  } else if (auto chunk = dyn_cast<rank::ChunkOffsetAttr>(value)) {
    wire::MeshValue *m = a.mutable_mesh();
    m->set_kind(wire::MeshValue::CHUNK_OFFSET);
    m->set_axis(chunk.getAxis());
    m->set_extent(chunk.getExtent());
  } else if (auto coord = dyn_cast<rank::MeshCoordAttr>(value)) {
    wire::MeshValue *m = a.mutable_mesh();
    m->set_kind(wire::MeshValue::MESH_COORD);
    m->set_axis(coord.getAxis());
  } else if (auto i = dyn_cast<IntegerAttr>(value))
    a.set_i(i.getType().isInteger(1) ? i.getValue().getZExtValue()
                                     : i.getInt());
  else if (auto b = dyn_cast<BoolAttr>(value))
    a.set_i(b.getValue());
  else if (auto f = dyn_cast<FloatAttr>(value))
    a.set_f(f.getValueAsDouble());
  else if (auto s = dyn_cast<StringAttr>(value))
    a.set_s(s.getValue().str());
  else if (auto arr = dyn_cast<DenseI64ArrayAttr>(value)) {
    // Set the list even when it is empty (a reduction of a 0-d tensor has
    // no dims): an unset attribute reads as "empty" and fails validation.
    wire::IntList *ints = a.mutable_ints();
    for (int64_t v : arr.asArrayRef())
      ints->add_values(v);
  } else if (auto dense = dyn_cast<DenseElementsAttr>(value)) {
    FailureOr<std::string> bytes = denseBytes(dense);
    if (failed(bytes))
      return op->emitOpError("cannot emit dense attribute '") << name << "'";
    a.set_data(*bytes);
  } else
    return op->emitOpError("cannot emit attribute '")
           << name << "' = " << value;
  (*inst.mutable_attrs())[name.str()] = std::move(a);
  return success();
}

/// Writes `loc` as MLIR prints it into `out` (replacing its contents).
void writeLocation(Location loc, std::string &out) {
  // The common case, written directly into the instruction's field with one
  // allocation: printing through an AsmState per instruction cost more than
  // the rest of the emission, and building the text from temporaries (five
  // strings per instruction) about 0.02 us.
  if (auto file = dyn_cast<FileLineColLoc>(loc)) {
    StringRef name = file.getFilename().getValue();
    char numbers[32];
    char *end = numbers + sizeof numbers;
    char *p = std::to_chars(numbers, end, file.getLine()).ptr;
    *p++ = ':';
    p = std::to_chars(p, end, file.getColumn()).ptr;
    out.clear();
    out.reserve(name.size() + (p - numbers) + 9);
    out.append("loc(\"");
    out.append(name.data(), name.size());
    out.append("\":");
    out.append(numbers, p);
    out.push_back(')');
    return;
  }
  out.clear();
  llvm::raw_string_ostream os(out);
  loc.print(os);
}

} // namespace

FailureOr<wire::Program> emitProgram(func::FuncOp fn, StringRef cudaArch,
                                     bool generateOptimizerKernels) {
  auto mesh = fn->getAttrOfType<DenseI64ArrayAttr>(rank::kMeshAttrName);
  auto positions = fn->getAttrOfType<ArrayAttr>(rank::kPositionsAttrName);
  if (!mesh || !positions)
    return fn.emitOpError("is not a class program (no ")
           << rank::kMeshAttrName << " and " << rank::kPositionsAttrName << ")";
  if (!fn.getBody().hasOneBlock())
    return fn.emitOpError("must have a single block to be emitted");

  wire::Program program;
  program.set_version(wire::PROGRAM_FORMAT_VERSION);
  program.set_name(fn.getSymName().str());
  for (int64_t s : mesh.asArrayRef())
    program.add_mesh_shape(s);
  for (Attribute b : positions) {
    ArrayRef<int64_t> box = cast<DenseI64ArrayAttr>(b).asArrayRef();
    wire::MeshBox *out = program.add_positions();
    for (size_t a = 0; a + 1 < box.size(); a += 2) {
      out->add_lo(box[a]);
      out->add_hi(box[a + 1]);
    }
  }

  // Buffer planning (--rank-plan-buffers): each buffer's arena offset.
  auto arenaBytes = fn->getAttrOfType<IntegerAttr>(rank::kArenaBytesAttrName);
  bool planned = static_cast<bool>(arenaBytes);
  llvm::DenseMap<int32_t, int64_t> offsets;

  llvm::DenseMap<Value, int32_t> bufferOf;
  // Where each buffer was written: instruction index and stream.
  llvm::DenseMap<int32_t, std::pair<int, wire::Stream>> producer;
  auto addBuffer = [&](Value v) -> FailureOr<int32_t> {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    wire::DType dt = t ? toWireDType(t.getElementType()) : wire::DTYPE_INVALID;
    if (dt == wire::DTYPE_INVALID)
      return emitError(v.getLoc())
             << "cannot emit a value of type " << v.getType();
    wire::TensorSpec *spec = program.add_buffers();
    spec->set_dtype(dt);
    for (int64_t s : t.getShape())
      spec->add_shape(s);
    int32_t id = program.buffers_size() - 1;
    bufferOf[v] = id;
    return id;
  };

  for (BlockArgument arg : fn.getArguments()) {
    FailureOr<int32_t> id = addBuffer(arg);
    if (failed(id))
      return failure();
    program.add_inputs(*id);
  }

  bool scheduled = fn->hasAttr(rank::kScheduledAttrName);
  int lastCompute = -1; // the latest COMPUTE instruction emitted
  // Appends one instruction for `op` reading `inputs` and writing
  // `results` (all of op's operands and results, except for a batched
  // point-to-point op, which becomes one instruction per message).
  // `inst` is the program's last instruction, built in place (a message
  // built aside and moved in cost a swap of every field and a destructor).
  auto emitInstruction = [&](Operation &op, wire::Instruction &inst,
                             ValueRange inputs,
                             ValueRange results) -> LogicalResult {
    int self = program.instructions_size() - 1;
    // `inst` waits for instruction `index` (on the other stream) through an
    // event recorded there.
    auto waitFor = [&](int index) {
      wire::Instruction *src = program.mutable_instructions(index);
      if (src->record_event() < 0) {
        src->set_record_event(program.num_events());
        program.set_num_events(program.num_events() + 1);
      }
      bool seen = false;
      for (int32_t e : inst.wait_events())
        seen |= e == src->record_event();
      if (!seen)
        inst.add_wait_events(src->record_event());
    };
    for (Value v : inputs) {
      int32_t id = bufferOf.lookup(v);
      inst.add_inputs(id);
      // A value made on the other stream is waited for through an event.
      auto it = producer.find(id);
      if (it != producer.end() && it->second.second != inst.stream())
        waitFor(it->second.first);
    }
    // Collectives placed by --rank-schedule-collectives run no earlier than
    // the compute before them (what bounds prefetched gathers).
    if (scheduled && inst.stream() == wire::COMM && lastCompute >= 0)
      waitFor(lastCompute);
    if (inst.stream() == wire::COMPUTE)
      lastCompute = self;
    for (Value r : results) {
      FailureOr<int32_t> id = addBuffer(r);
      if (failed(id))
        return failure();
      if (planned)
        offsets[*id] =
            rank::arenaOffsetOf(&op, cast<OpResult>(r).getResultNumber());
      inst.add_outputs(*id);
      producer[*id] = {self, inst.stream()};
    }
    return success();
  };

  // The index of a generated kernel in the program's executables: a kernel
  // used twice in the program is shipped once (once per declared call: a
  // fused_adam kernel serves parameters of any shape with its element
  // counts).
  auto addExecutable = [&](const GeneratedKernel &kernel) -> int {
    auto sameCall = [&](const wire::Executable &e) {
      if (e.inputs_size() != kernel.inputs_size() ||
          e.outputs_size() != kernel.outputs_size())
        return false;
      for (int i = 0; i < e.inputs_size(); ++i)
        if (e.inputs(i).SerializeAsString() !=
            kernel.inputs(i).SerializeAsString())
          return false;
      for (int i = 0; i < e.outputs_size(); ++i)
        if (e.outputs(i).SerializeAsString() !=
            kernel.outputs(i).SerializeAsString())
          return false;
      return true;
    };
    for (int e = 0; e < program.executables_size(); ++e)
      if (program.executables(e).content_hash() == kernel.content_hash() &&
          sameCall(program.executables(e)))
        return e;
    *program.add_executables() = kernel;
    return program.executables_size() - 1;
  };

  for (Operation &op : fn.getBody().front()) {
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      for (Value v : ret.getOperands())
        program.add_outputs(bufferOf.lookup(v));
      // Donation (--rank-mark-donations): per output, the input whose
      // storage it may take.
      if (auto donors =
              fn->getAttrOfType<DenseI64ArrayAttr>(rank::kOutputDonorsAttrName);
          donors && donors.size() == static_cast<int64_t>(ret.getNumOperands()))
        for (int64_t d : donors.asArrayRef())
          program.add_output_donors(static_cast<int32_t>(d));
      continue;
    }
    if (auto batch = dyn_cast<rank::BatchSendRecvOp>(op)) {
      // Every send, then every receive (docs/program-format.md), each a
      // copy of the shared fields.
      wire::Instruction base;
      base.set_record_event(-1);
      writeLocation(op.getLoc(), *base.mutable_location());
      base.set_stream(wire::COMM);
      (*base.mutable_attrs())["axis"].set_i(batch.getAxis());
      (*base.mutable_attrs())["tag"].set_i(batch.getTag());
      for (auto [peer, v] :
           llvm::zip(batch.getSendPeers(), batch.getInputs())) {
        wire::Instruction &send = *program.add_instructions();
        send = base;
        send.set_op("send");
        (*send.mutable_attrs())["peer"].set_i(peer);
        if (failed(emitInstruction(op, send, ValueRange{v}, {})))
          return failure();
      }
      for (auto [peer, r] :
           llvm::zip(batch.getRecvPeers(), batch.getResults())) {
        wire::Instruction &recv = *program.add_instructions();
        recv = base;
        recv.set_op("recv");
        (*recv.mutable_attrs())["peer"].set_i(peer);
        if (failed(emitInstruction(op, recv, {}, ValueRange{r})))
          return failure();
      }
      continue;
    }
    wire::Instruction &inst = *program.add_instructions();
    inst.set_record_event(-1);
    writeLocation(op.getLoc(), *inst.mutable_location());
    if (auto k = dyn_cast<rank::KernelOp>(op)) {
      inst.set_op(k.getKernel().str());
      inst.set_stream(wire::COMPUTE);
    } else if (auto fused = dyn_cast<rank::FusedOp>(op)) {
      // One call of a generated kernel; a kernel used twice in the program
      // is shipped once.
      FailureOr<std::shared_ptr<const GeneratedKernel>> kernel =
          cudaArch.empty() ? generateFusedKernel(fused)
                           : generateFusedGpuKernel(fused, cudaArch);
      if (failed(kernel))
        return failure();
      inst.set_op("fused");
      inst.set_executable(addExecutable(**kernel));
      std::vector<double> scalars = fusedKernelScalars(fused);
      if (!scalars.empty())
        (*inst.mutable_attrs())["scalars"].set_data(
            std::string(reinterpret_cast<const char *>(scalars.data()),
                        scalars.size() * sizeof(double)));
      inst.set_stream(wire::COMPUTE);
    } else if (rank::optimizerGroupsOf(&op)) {
      // The runtime's multi-tensor kernel (fused_adam, fused_sgd), with the
      // op's attributes; or the kernel generated for its signature (always
      // on a CUDA mesh, which has no hand-written one), called with the
      // op's hyper-parameters as its scalars (attribute `generated` = 1).
      inst.set_op(op.getName().stripDialect().str());
      inst.set_stream(wire::COMPUTE);
      if (!cudaArch.empty() || generateOptimizerKernels) {
        std::vector<double> scalars;
        FailureOr<std::shared_ptr<const GeneratedKernel>> kernel =
            generateOptimizerKernel(&op, cudaArch, scalars);
        if (failed(kernel))
          return failure();
        inst.set_executable(addExecutable(**kernel));
        (*inst.mutable_attrs())[rt::kGeneratedKernelAttr].set_i(1);
        (*inst.mutable_attrs())["scalars"].set_data(
            std::string(reinterpret_cast<const char *>(scalars.data()),
                        scalars.size() * sizeof(double)));
      }
    } else if (op.getDialect() && isa<rank::RankDialect>(op.getDialect())) {
      inst.set_op(op.getName().stripDialect().str());
      inst.set_stream(wire::COMM);
    } else {
      return op.emitOpError("cannot be emitted into a per-rank program");
    }
    auto emitAttrs = [&](auto &&attrs) -> LogicalResult {
      for (NamedAttribute a : attrs) {
        if (a.getName() == "kernel" ||
            a.getName() == rank::kArenaOffsetAttrName)
          continue;
        if (failed(setAttr(&op, inst, a.getName(), a.getValue())))
          return failure();
      }
      return success();
    };
    // A kernel's only inherent attribute is its name: its attributes are
    // the discardable ones, read where they lie (getAttrs() would build a
    // dictionary with the inherent one for every op).
    if (failed(isa<rank::KernelOp>(op) ? emitAttrs(op.getDiscardableAttrs())
                                       : emitAttrs(op.getAttrs())))
      return failure();
    if (failed(emitInstruction(op, inst, op.getOperands(), op.getResults())))
      return failure();
  }
  if (planned) {
    program.set_arena_bytes(arenaBytes.getInt());
    for (int32_t id = 0; id < program.buffers_size(); ++id) {
      auto it = offsets.find(id);
      program.add_buffer_offsets(it == offsets.end() ? -1 : it->second);
    }
  }
  return program;
}

} // namespace dtorch
