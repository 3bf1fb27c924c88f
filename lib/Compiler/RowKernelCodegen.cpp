//===- RowKernelCodegen.cpp - fused groups that end in row reductions -----===//
//
// A rank.fused group may hold reductions (`sum`, `max`, `min`) over the
// innermost dims of its row type [outer..., inner...] (softmax, layer_norm,
// log_softmax: --rank-fuse-elementwise). Its kernel computes 8 rows at a
// time (then the rest one by one):
//
//   for each block of rows:
//     sweep 0: for each row, for j in [0, inner): compute the row values that
//              read no reduction; write those that sweep 0 reduces to a
//              scratch row, store the group's results among them (loops
//              without a carried value: they vectorize)
//              for j in [0, inner): add (max, min) element j of every
//              scratch row into its accumulator (8 rows side by side:
//              independent chains, each row in order)
//     (the reductions of sweep 0 are finished; the per-row values that read
//      them are computed)
//     sweep 1: the same for values that read sweep 0's reductions
//     ...
//     store the per-row results
//
// A row value is computed again in each sweep that needs it (an exp is
// evaluated once per sweep rather than written to memory and read back).
// Rows longer than kChunkElements go a chunk at a time (the scratch stays
// small, at most kScratchBytes on the caller's stack; accumulators carry
// over). Measured on 1 rank (float32, us per
// call, unfused -> fused): softmax 2048x32 530 -> 116, layer_norm 512x64
// 220 -> 27, log_softmax 512x65 336 -> 42.
//
// Results are bitwise those of the runtime's kernels run one after the
// other (runtime/lib/ReductionKernels.cpp): each row is summed in increasing
// order in float64 (the library sums 8 rows side by side, each still in
// order, which gives the same bits), the sum is multiplied by `scale` in
// float64 and rounded to the element type through float32; max and min keep
// the first of equal values (so -0 and +0 come out as the library's) and
// propagate the first NaN. Elementwise ops are the ones of the elementwise
// generator (emitScalar), rounded to the storage type after every op.
//
//===----------------------------------------------------------------------===//
#include "KernelCodegenSupport.h"

#include "rank/IR/FusibleKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

using namespace mlir;

namespace dtorch::codegen {
namespace {

bool isRowReduction(Operation &op) {
  auto kernel = dyn_cast<rank::KernelOp>(op);
  if (!kernel)
    return false;
  StringRef name = kernel.getKernel();
  return name == "sum" || name == "max" || name == "min";
}

/// Rows whose reductions run side by side, and the elements of a row
/// computed before they are reduced.
constexpr int64_t kRowLanes = 8;
constexpr int64_t kChunkElements = 1024;
/// At most this many bytes of scratch rows, on the stack of the caller.
constexpr int64_t kScratchBytes = 64 * 1024;

int64_t numElements(Type t) {
  return cast<RankedTensorType>(t).getNumElements();
}

/// Builds the kernel of one group; state shared by the emission helpers.
class RowKernelBuilder {
public:
  RowKernelBuilder(rank::FusedOp op, MLIRContext *ctx, bool forGpu)
      : op(op), ctx(ctx), forGpu(forGpu), body(op.getBody().front()),
        yield(cast<rank::YieldOp>(body.getTerminator())), b(ctx),
        loc(UnknownLoc::get(ctx)) {}

  FailureOr<OwningOpRef<ModuleOp>> build(StringRef implName);

private:
  LogicalResult classify();
  Value toCompute(OpBuilder &nb, Value v) const;
  Value toStorage(OpBuilder &nb, Value v) const;
  Value flatIndexOf(OpBuilder &nb, ArrayRef<int64_t> shape, Value row,
                    Value j) const;
  Value emitRowValue(OpBuilder &nb, Value v, Value row, Value j,
                     llvm::DenseMap<Value, Value> &sweep);
  void emitReadyRowScalars();
  LogicalResult emitRows(ArrayRef<Value> rows, ArrayRef<Value> outs,
                         int64_t lastSweep);
  LogicalResult emitGpuSweep(Value row, ArrayRef<Value> outs,
                             MutableArrayRef<rank::KernelOp> reductions,
                             ArrayRef<std::pair<unsigned, Value>> stores);
  Value initialAccumulator(rank::KernelOp red);
  Value accumulate(OpBuilder &nb, rank::KernelOp red, Value acc, Value x);
  Value finishReduction(rank::KernelOp red, Value acc);

  rank::FusedOp op;
  MLIRContext *ctx;
  // The GPU form: one thread per row (buildRowKernelModule's comment).
  bool forGpu;
  Block &body;
  rank::YieldOp yield;
  OpBuilder b;
  Location loc;

  RankedTensorType rowType;
  int64_t reducedDims = 0;
  int64_t outer = 1, inner = 1;
  ElementTypes et;
  // Row values (the row type) and per-row values (a reduction's result
  // type, either form); the sweep that can first compute each value.
  llvm::DenseSet<Value> perRow;
  llvm::DenseMap<Value, int64_t> level;
  // Kernel arguments: the body's block arguments as flat memrefs.
  llvm::DenseMap<Value, Value> memrefOf;
  llvm::DenseMap<Operation *, Value> constants;
  // Per-row values known in the row being emitted (storage type).
  llvm::DenseMap<Value, Value> *rowScalars = nullptr;
  // The values a sweep reduces, before they are reduced: `chunk` elements
  // of a row per reduction and lane.
  Value scratch;
  int64_t chunk = 1;
  bool failed = false;
};

LogicalResult RowKernelBuilder::classify() {
  for (Operation &inner : body.without_terminator())
    if (isRowReduction(inner)) {
      rowType = cast<RankedTensorType>(inner.getOperand(0).getType());
      reducedDims = static_cast<int64_t>(
          inner.getAttrOfType<DenseI64ArrayAttr>("dims").size());
      break;
    }
  if (!rowType)
    return op.emitOpError("holds no row reduction");
  RankedTensorType keep = rank::rowReducedType(rowType, reducedDims, true);
  RankedTensorType drop = rank::rowReducedType(rowType, reducedDims, false);
  outer = keep.getNumElements();
  inner = outer == 0 ? 0 : rowType.getNumElements() / outer;
  et = elementTypesFor(rowType.getElementType(), ctx);
  if (!et.isFloat)
    return op.emitOpError("row reductions are generated for floats only");
  auto isPerRowType = [&](Type t) { return t == keep || t == drop; };
  for (BlockArgument arg : body.getArguments()) {
    level[arg] = 0;
    if (isPerRowType(arg.getType()) && arg.getType() != rowType)
      perRow.insert(arg);
  }
  for (Operation &inner : body.without_terminator()) {
    auto kernel = cast<rank::KernelOp>(inner);
    Value r = kernel.getResult();
    int64_t l = 0;
    for (Value v : kernel.getInputs())
      l = std::max(l, level.lookup(v));
    if (isRowReduction(inner)) {
      if (kernel.getInputs()[0].getType() != rowType ||
          inner.getAttrOfType<DenseI64ArrayAttr>("dims").size() !=
              reducedDims ||
          !isPerRowType(r.getType()))
        return kernel.emitOpError("is not a reduction of the group's rows");
      level[r] = l + 1;
      perRow.insert(r);
      continue;
    }
    level[r] = l;
    if (r.getType() == rowType)
      continue;
    if (!isPerRowType(r.getType()) || kernel.getKernel() == "broadcast_to")
      return kernel.emitOpError("has type ")
             << r.getType() << ", neither the group's rows " << rowType
             << " nor their reduction";
    perRow.insert(r);
  }
  return success();
}

Value RowKernelBuilder::toCompute(OpBuilder &nb, Value v) const {
  if (v.getType() == et.compute)
    return v;
  if (et.isBF16)
    return bf16BitsToF32(nb, loc, v);
  return arith::ExtFOp::create(nb, loc, et.compute, v);
}

Value RowKernelBuilder::toStorage(OpBuilder &nb, Value v) const {
  if (v.getType() == et.storage)
    return v;
  if (et.isBF16)
    return f32ToBF16Bits(nb, loc, v);
  return arith::TruncFOp::create(nb, loc, et.storage, v);
}

/// The flat index into a tensor of `shape` (numpy-broadcast to the row
/// type) of the element at (row, j).
Value RowKernelBuilder::flatIndexOf(OpBuilder &nb, ArrayRef<int64_t> shape,
                                    Value row, Value j) const {
  ArrayRef<int64_t> full = rowType.getShape();
  int64_t rank = rowType.getRank();
  int64_t lead = rank - static_cast<int64_t>(shape.size());
  // Strides of `shape` seen from the row type's dims (0: broadcast, absent
  // or of extent 1).
  SmallVector<int64_t> stride(rank, 0);
  int64_t s = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] != 1)
      stride[lead + d] = s;
    s *= shape[d];
  }
  auto constant = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(nb, loc, v);
  };
  // What `linear`, the index over the row type's dims [from, to), adds to
  // the flat index: nothing when they are all broadcast, `linear * unit`
  // when `shape` lays them out as the row type does, else the sum over the
  // dims, decomposed one by one.
  auto part = [&](Value linear, int64_t from, int64_t to) -> Value {
    bool allBroadcast = true, alike = true;
    int64_t unit = 0, expect = 0;
    for (int64_t d = to - 1; d >= from; --d) {
      if (full[d] == 1)
        continue;
      allBroadcast &= stride[d] == 0;
      if (unit == 0 && stride[d] != 0) {
        unit = expect = stride[d];
      }
      alike &= stride[d] == expect && expect != 0;
      expect *= full[d];
    }
    if (allBroadcast)
      return {};
    if (alike)
      return unit == 1 ? linear
                       : arith::MulIOp::create(nb, loc, linear, constant(unit))
                             .getResult();
    Value sum, rest = linear;
    for (int64_t d = to - 1; d >= from; --d) {
      if (full[d] == 1)
        continue;
      Value idx =
          arith::RemUIOp::create(nb, loc, rest, constant(full[d])).getResult();
      rest = arith::DivUIOp::create(nb, loc, rest, constant(full[d]));
      if (stride[d] == 0)
        continue;
      Value term = stride[d] == 1 ? idx
                                  : arith::MulIOp::create(nb, loc, idx,
                                                          constant(stride[d]))
                                        .getResult();
      sum = sum ? arith::AddIOp::create(nb, loc, sum, term).getResult() : term;
    }
    return sum;
  };
  int64_t firstInner = rank - reducedDims;
  Value outerPart = part(row, 0, firstInner);
  Value innerPart = part(j, firstInner, rank);
  if (outerPart && innerPart)
    return arith::AddIOp::create(nb, loc, outerPart, innerPart);
  if (outerPart)
    return outerPart;
  if (innerPart)
    return innerPart;
  return constant(0);
}

/// Row value `v` at (row, j), in the storage type, computed once per sweep.
Value RowKernelBuilder::emitRowValue(OpBuilder &nb, Value v, Value row, Value j,
                                     llvm::DenseMap<Value, Value> &sweep) {
  if (Value known = sweep.lookup(v))
    return known;
  Value result;
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    Value index = flatIndexOf(
        nb, cast<RankedTensorType>(arg.getType()).getShape(), row, j);
    result = memref::LoadOp::create(nb, loc, memrefOf.lookup(arg),
                                    ValueRange{index});
  } else {
    auto kernel = cast<rank::KernelOp>(v.getDefiningOp());
    StringRef name = kernel.getKernel();
    if (name == "broadcast_to") {
      // A per-row value of the group spread over its row, or an input (any
      // shape numpy broadcasts to the rows) read through its strides.
      Value in = kernel.getInputs()[0];
      if (!isa<BlockArgument>(in) && perRow.contains(in))
        result = rowScalars->lookup(in);
      else
        result = emitRowValue(nb, in, row, j, sweep);
    } else if (name == "full") {
      result = constants.lookup(kernel);
    } else {
      SmallVector<Value> args;
      for (Value in : kernel.getInputs())
        args.push_back(toCompute(nb, emitRowValue(nb, in, row, j, sweep)));
      Value r = emitScalar(nb, loc, name, args, et);
      if (!r) {
        kernel.emitOpError("has no generated form for ")
            << rowType.getElementType();
        failed = true;
        r = arith::ConstantOp::create(nb, loc, nb.getZeroAttr(et.compute));
      }
      result = toStorage(nb, r);
    }
  }
  sweep[v] = result;
  return result;
}

/// Computes, in body order, every per-row elementwise value whose operands
/// are known (at the row loop's level, after a sweep).
void RowKernelBuilder::emitReadyRowScalars() {
  bool progress = true;
  while (progress) {
    progress = false;
    for (Operation &innerOp : body.without_terminator()) {
      auto kernel = cast<rank::KernelOp>(innerOp);
      Value r = kernel.getResult();
      if (!perRow.contains(r) || rowScalars->count(r) ||
          isRowReduction(innerOp))
        continue;
      if (kernel.getKernel() == "full") {
        (*rowScalars)[r] = constants.lookup(kernel);
        progress = true;
        continue;
      }
      if (!llvm::all_of(kernel.getInputs(),
                        [&](Value in) { return rowScalars->count(in) != 0; }))
        continue;
      SmallVector<Value> args;
      for (Value in : kernel.getInputs())
        args.push_back(toCompute(b, rowScalars->lookup(in)));
      Value v = emitScalar(b, loc, kernel.getKernel(), args, et);
      if (!v) {
        kernel.emitOpError("has no generated form for ")
            << rowType.getElementType();
        failed = true;
        v = arith::ConstantOp::create(b, loc, b.getZeroAttr(et.compute));
      }
      (*rowScalars)[r] = toStorage(b, v);
      progress = true;
    }
  }
}

/// The start of a reduction's accumulator: 0 in float64 for a sum, -inf
/// (+inf) in the compute type for max (min).
Value RowKernelBuilder::initialAccumulator(rank::KernelOp red) {
  if (red.getKernel() == "sum")
    return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(0));
  return arith::ConstantOp::create(
      b, loc,
      b.getFloatAttr(et.compute,
                     red.getKernel() == "max"
                         ? -std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::infinity()));
}

/// `acc` after element `x` (storage type) of the row: a sum adds it in
/// float64; max and min keep the first NaN, else a strictly better value
/// replaces the running one (equal values keep the first).
Value RowKernelBuilder::accumulate(OpBuilder &nb, rank::KernelOp red, Value acc,
                                   Value x) {
  Type f64 = Float64Type::get(ctx);
  if (red.getKernel() == "sum") {
    Value wide =
        x.getType() == f64
            ? x
            : arith::ExtFOp::create(nb, loc, f64, toCompute(nb, x)).getResult();
    return arith::AddFOp::create(nb, loc, acc, wide);
  }
  Value c = toCompute(nb, x);
  Value accNaN =
      arith::CmpFOp::create(nb, loc, arith::CmpFPredicate::UNO, acc, acc);
  Value xNaN = arith::CmpFOp::create(nb, loc, arith::CmpFPredicate::UNO, c, c);
  Value better =
      red.getKernel() == "max"
          ? arith::CmpFOp::create(nb, loc, arith::CmpFPredicate::OLT, acc, c)
                .getResult()
          : arith::CmpFOp::create(nb, loc, arith::CmpFPredicate::OLT, c, acc)
                .getResult();
  Value take = arith::OrIOp::create(nb, loc, xNaN, better);
  Value replaced = arith::SelectOp::create(nb, loc, take, c, acc);
  return arith::SelectOp::create(nb, loc, accNaN, acc, replaced);
}

/// One sweep of `row` in the GPU form: a single loop over the row's
/// elements computes each value, stores the sweep's results and adds the
/// values into the reductions' accumulators in increasing order (no
/// scratch: a thread holds one row, so there are no lanes to interleave).
/// The reductions' results become per-row values of the row.
LogicalResult
RowKernelBuilder::emitGpuSweep(Value row, ArrayRef<Value> outs,
                               MutableArrayRef<rank::KernelOp> reductions,
                               ArrayRef<std::pair<unsigned, Value>> stores) {
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value innerBound = arith::ConstantIndexOp::create(b, loc, inner);
  SmallVector<Value> init;
  for (rank::KernelOp red : reductions)
    init.push_back(initialAccumulator(red));
  auto sweep = scf::ForOp::create(b, loc, zero, innerBound, one, init);
  Block *loopBody = sweep.getBody();
  if (!loopBody->empty() && isa<scf::YieldOp>(loopBody->back()))
    loopBody->back().erase();
  OpBuilder nb = OpBuilder::atBlockEnd(loopBody);
  Value j = sweep.getInductionVar();
  llvm::DenseMap<Value, Value> values;
  SmallVector<Value> next;
  for (auto [k, red] : llvm::enumerate(reductions)) {
    Value x = emitRowValue(nb, red.getInputs()[0], row, j, values);
    next.push_back(accumulate(nb, red, sweep.getRegionIterArgs()[k], x));
  }
  for (auto [i, v] : stores) {
    Value x = emitRowValue(nb, v, row, j, values);
    Value index = arith::AddIOp::create(
        nb, loc, arith::MulIOp::create(nb, loc, row, innerBound), j);
    memref::StoreOp::create(nb, loc, x, outs[i], ValueRange{index});
  }
  scf::YieldOp::create(nb, loc, next);
  for (auto [k, red] : llvm::enumerate(reductions))
    (*rowScalars)[red.getResult()] =
        finishReduction(red, sweep.getResult(static_cast<unsigned>(k)));
  emitReadyRowScalars();
  return success();
}

/// A reduction's accumulator turned into its result (storage type), as the
/// runtime's kernel: sum * scale in float64, rounded through float32.
Value RowKernelBuilder::finishReduction(rank::KernelOp red, Value acc) {
  if (red.getKernel() != "sum")
    return toStorage(b, acc);
  double scale = 1.0;
  if (auto attr = red->getAttrOfType<FloatAttr>("scale"))
    scale = attr.getValueAsDouble();
  Value scaled = arith::MulFOp::create(
      b, loc, acc,
      arith::ConstantOp::create(b, loc, b.getF64FloatAttr(scale)).getResult());
  if (et.storage.isF64())
    return scaled;
  Value f32 = arith::TruncFOp::create(b, loc, Float32Type::get(ctx), scaled);
  return toStorage(b, f32);
}

FailureOr<OwningOpRef<ModuleOp>> RowKernelBuilder::build(StringRef implName) {
  if (mlir::failed(classify()))
    return failure();
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  // Every buffer as a flat memref: the caller passes bare pointers.
  SmallVector<Type> argTypes;
  for (Value in : op.getInputs())
    argTypes.push_back(
        MemRefType::get({numElements(in.getType())}, et.storage));
  for (Type t : op.getResultTypes())
    argTypes.push_back(MemRefType::get({numElements(t)}, et.storage));
  int64_t numFulls = 0;
  for (Operation &inner : body.without_terminator())
    numFulls += cast<rank::KernelOp>(inner).getKernel() == "full";
  if (forGpu)
    argTypes.append(numFulls, Float64Type::get(ctx));
  else
    argTypes.push_back(MemRefType::get({numFulls}, Float64Type::get(ctx)));
  auto fn =
      func::FuncOp::create(b, loc, implName, b.getFunctionType(argTypes, {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  size_t numInputs = op.getInputs().size();
  for (size_t i = 0; i < numInputs; ++i)
    memrefOf[body.getArgument(i)] = entry->getArgument(i);
  SmallVector<Value> outs(
      entry->getArguments().slice(numInputs, op.getNumResults()));
  if (!forGpu)
    constants =
        emitFullConstants(b, loc, body, entry->getArguments().back(), et);

  // Which sweep accumulates each reduction and stores each row result.
  int64_t lastSweep = 0;
  for (Operation &inner : body.without_terminator())
    if (isRowReduction(inner))
      lastSweep = std::max(lastSweep, level.lookup(inner.getOperand(0)));
  for (Value v : yield.getValues())
    if (!perRow.contains(v))
      lastSweep = std::max(lastSweep, level.lookup(v));

  if (forGpu) {
    // One parallel loop over the rows (mapped to threads by the GPU
    // generator); everything a thread needs, the group's constants
    // included, is computed inside it, so that the kernel's operands are
    // the function's arguments alone.
    Value zero = arith::ConstantIndexOp::create(b, loc, 0);
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    Value outerBound = arith::ConstantIndexOp::create(b, loc, outer);
    auto rowLoop = scf::ParallelOp::create(
        b, loc, ValueRange{zero}, ValueRange{outerBound}, ValueRange{one});
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(rowLoop.getBody()->getTerminator());
    unsigned firstScalar =
        static_cast<unsigned>(numInputs) + op.getNumResults();
    unsigned k = 0;
    for (Operation &innerOp : body.without_terminator())
      if (cast<rank::KernelOp>(innerOp).getKernel() == "full")
        constants[&innerOp] = convertFullConstant(
            b, loc, entry->getArgument(firstScalar + k++), et);
    if (mlir::failed(
            emitRows({rowLoop.getInductionVars()[0]}, outs, lastSweep)))
      return failure();
    b.setInsertionPointAfter(rowLoop);
    func::ReturnOp::create(b, loc);
    if (failed)
      return failure();
    return module;
  }

  // Blocks of kRowLanes rows, then the rest one by one: the reductions of
  // a block's rows are independent chains of additions that overlap (as the
  // library's kernels sum 8 rows side by side), each still in its own order.
  int64_t lanes = kRowLanes;
  // Scratch for the values one sweep reduces: a row per reduction and lane.
  int64_t perSweep = 0;
  for (int64_t s = 0; s <= lastSweep; ++s) {
    int64_t n = 0;
    for (Operation &inner : body.without_terminator())
      n += isRowReduction(inner) && level.lookup(inner.getOperand(0)) == s;
    perSweep = std::max(perSweep, n);
  }
  // The scratch lives on the stack of the calling thread (no allocation per
  // call, nothing that can fail at run time): the chunk is bounded so that
  // it stays within kScratchBytes. A row is still summed in its own order,
  // a chunk after the other, so the chunk length does not change the bits.
  int64_t elementBytes =
      std::max<int64_t>(1, et.storage.getIntOrFloatBitWidth() / 8);
  int64_t fitting =
      kScratchBytes / (std::max<int64_t>(1, perSweep) * lanes * elementBytes);
  chunk = std::max<int64_t>(
      1, std::min({inner, kChunkElements, std::max<int64_t>(1, fitting)}));
  scratch = memref::AllocaOp::create(
      b, loc,
      MemRefType::get({std::max<int64_t>(1, perSweep * lanes * chunk)},
                      et.storage));
  int64_t blocked = outer / lanes * lanes;
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value blockedBound = arith::ConstantIndexOp::create(b, loc, blocked);
  Value outerBound = arith::ConstantIndexOp::create(b, loc, outer);
  if (blocked > 0) {
    Value step = arith::ConstantIndexOp::create(b, loc, lanes);
    auto blockLoop = scf::ForOp::create(b, loc, zero, blockedBound, step);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(blockLoop.getBody());
    SmallVector<Value> rows;
    for (int64_t l = 0; l < lanes; ++l)
      rows.push_back(l == 0 ? blockLoop.getInductionVar()
                            : arith::AddIOp::create(
                                  b, loc, blockLoop.getInductionVar(),
                                  arith::ConstantIndexOp::create(b, loc, l))
                                  .getResult());
    if (mlir::failed(emitRows(rows, outs, lastSweep)))
      return failure();
  }
  if (blocked < outer) {
    Value one = arith::ConstantIndexOp::create(b, loc, 1);
    auto rowLoop = scf::ForOp::create(b, loc, blockedBound, outerBound, one);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(rowLoop.getBody());
    if (mlir::failed(emitRows({rowLoop.getInductionVar()}, outs, lastSweep)))
      return failure();
  }
  func::ReturnOp::create(b, loc);
  if (failed)
    return failure();
  return module;
}

/// The whole group for the rows `rows` (at `b`'s insertion point, inside
/// the loop over rows). Each sweep first computes, row by row, the values
/// its reductions read into `scratch` and stores the results of that sweep
/// (loops without a carried value, which vectorize), then reduces the
/// scratch rows side by side (independent chains, each row in order).
LogicalResult RowKernelBuilder::emitRows(ArrayRef<Value> rows,
                                         ArrayRef<Value> outs,
                                         int64_t lastSweep) {
  size_t lanes = rows.size();
  SmallVector<llvm::DenseMap<Value, Value>> scalars(lanes);
  // Per-row inputs of each row.
  for (size_t l = 0; l < lanes; ++l) {
    rowScalars = &scalars[l];
    for (BlockArgument arg : body.getArguments())
      if (perRow.contains(arg))
        (*rowScalars)[arg] = memref::LoadOp::create(
            b, loc, memrefOf.lookup(arg), ValueRange{rows[l]});
    emitReadyRowScalars();
  }
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value innerBound = arith::ConstantIndexOp::create(b, loc, inner);
  auto scratchIndex = [&](OpBuilder &nb, size_t slot, Value j) -> Value {
    Value base = arith::ConstantIndexOp::create(
        nb, loc, static_cast<int64_t>(slot) * chunk);
    return arith::AddIOp::create(nb, loc, base, j);
  };
  for (int64_t s = 0; s <= lastSweep; ++s) {
    SmallVector<rank::KernelOp> reductions;
    for (Operation &inner : body.without_terminator())
      if (isRowReduction(inner) && level.lookup(inner.getOperand(0)) == s)
        reductions.push_back(cast<rank::KernelOp>(inner));
    SmallVector<std::pair<unsigned, Value>> stores;
    for (auto [i, v] : llvm::enumerate(yield.getValues()))
      if (!perRow.contains(v) && level.lookup(v) == s)
        stores.push_back({static_cast<unsigned>(i), v});
    if (reductions.empty() && stores.empty())
      continue;
    if (forGpu) {
      if (mlir::failed(emitGpuSweep(rows[0], outs, reductions, stores)))
        return failure();
      continue;
    }
    // A chunk of the row at a time (the scratch stays small whatever the
    // row's length): the values of the chunk, reduction k of lane l in
    // scratch slot k * lanes + l, then their reduction into accumulator
    // k * lanes + l, carried from chunk to chunk.
    SmallVector<Value> init;
    for (rank::KernelOp red : reductions)
      for (size_t l = 0; l < lanes; ++l)
        init.push_back(initialAccumulator(red));
    Value chunkStep = arith::ConstantIndexOp::create(b, loc, chunk);
    auto chunks = scf::ForOp::create(b, loc, zero, innerBound, chunkStep, init);
    {
      // The builder adds a terminator only without iteration arguments.
      Block *chunkBody = chunks.getBody();
      if (!chunkBody->empty() && isa<scf::YieldOp>(chunkBody->back()))
        chunkBody->back().erase();
      OpBuilder cb = OpBuilder::atBlockEnd(chunkBody);
      Value c0 = chunks.getInductionVar();
      Value hi = arith::MinUIOp::create(
          cb, loc, arith::AddIOp::create(cb, loc, c0, chunkStep), innerBound);
      for (size_t l = 0; l < lanes; ++l) {
        rowScalars = &scalars[l];
        Value row = rows[l];
        auto fill = scf::ForOp::create(cb, loc, c0, hi, one);
        OpBuilder nb = OpBuilder::atBlockTerminator(fill.getBody());
        Value j = fill.getInductionVar();
        Value local = arith::SubIOp::create(nb, loc, j, c0);
        llvm::DenseMap<Value, Value> values;
        for (auto [k, red] : llvm::enumerate(reductions)) {
          Value x = emitRowValue(nb, red.getInputs()[0], row, j, values);
          memref::StoreOp::create(
              nb, loc, x, scratch,
              ValueRange{scratchIndex(nb, k * lanes + l, local)});
        }
        for (auto [i, v] : stores) {
          Value x = emitRowValue(nb, v, row, j, values);
          Value index = arith::AddIOp::create(
              nb, loc, arith::MulIOp::create(nb, loc, row, innerBound), j);
          memref::StoreOp::create(nb, loc, x, outs[i], ValueRange{index});
        }
      }
      SmallVector<Value> carried(chunks.getRegionIterArgs());
      if (reductions.empty()) {
        scf::YieldOp::create(cb, loc, ValueRange{});
      } else {
        auto sweep = scf::ForOp::create(cb, loc, c0, hi, one, carried);
        Block *loopBody = sweep.getBody();
        if (!loopBody->empty() && isa<scf::YieldOp>(loopBody->back()))
          loopBody->back().erase();
        OpBuilder nb = OpBuilder::atBlockEnd(loopBody);
        Value local =
            arith::SubIOp::create(nb, loc, sweep.getInductionVar(), c0);
        SmallVector<Value> next(init.size());
        for (auto [k, red] : llvm::enumerate(reductions))
          for (size_t l = 0; l < lanes; ++l) {
            size_t slot = k * lanes + l;
            Value acc = sweep.getRegionIterArgs()[slot];
            Value x = memref::LoadOp::create(
                nb, loc, scratch, ValueRange{scratchIndex(nb, slot, local)});
            next[slot] = accumulate(nb, red, acc, x);
          }
        scf::YieldOp::create(nb, loc, next);
        scf::YieldOp::create(cb, loc, sweep.getResults());
      }
    }
    if (reductions.empty())
      continue;
    auto sweep = chunks;
    for (size_t l = 0; l < lanes; ++l) {
      rowScalars = &scalars[l];
      for (auto [k, red] : llvm::enumerate(reductions))
        (*rowScalars)[red.getResult()] = finishReduction(
            red, sweep.getResult(static_cast<unsigned>(k * lanes + l)));
      emitReadyRowScalars();
    }
  }
  for (size_t l = 0; l < lanes; ++l)
    for (auto [i, v] : llvm::enumerate(yield.getValues()))
      if (perRow.contains(v)) {
        Value x = scalars[l].lookup(v);
        if (!x)
          return op.emitOpError("cannot compute a per-row result");
        memref::StoreOp::create(b, loc, x, outs[i], ValueRange{rows[l]});
      }
  return success();
}

} // namespace

bool hasRowReduction(Block &body) {
  return llvm::any_of(body.without_terminator(), isRowReduction);
}

int64_t rowReductionRows(Block &body) {
  for (Operation &inner : body.without_terminator())
    if (isRowReduction(inner)) {
      auto rowType = cast<RankedTensorType>(inner.getOperand(0).getType());
      auto dims = inner.getAttrOfType<DenseI64ArrayAttr>("dims");
      return rank::rowReducedType(rowType, dims.size(), true).getNumElements();
    }
  return 0;
}

FailureOr<OwningOpRef<ModuleOp>> buildRowKernelModule(rank::FusedOp op,
                                                      MLIRContext *ctx,
                                                      StringRef implName,
                                                      bool forGpu) {
  return RowKernelBuilder(op, ctx, forGpu).build(implName);
}

} // namespace dtorch::codegen
