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
//              independent chains, each row in order; float32 rows as
//              one vector of the 8 rows, 8 elements of each row
//              transposed in registers at a time: reduceLaneVectors)
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
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cstdlib>
#include <limits>
#include <string>

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
/// Rows shorter than this fold the remainder of their fill and store loops
/// into a masked vector iteration when the group computes a polynomial
/// (rowKernelFoldsLoopTails). Measured (bench/row_tails_erf_ab.py, folded
/// over scalar remainders): softmax over rows of 77 1.33-1.40x faster
/// forward; rows of 771 to 1001 0-7% slower, and cross-entropy's backward
/// over rows of 100 (no exp: cheap elements) 12% slower, where every
/// iteration's masks cost more than the scalar remainder saves.
constexpr int64_t kFoldTailsBelow = 256;

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
  Value coordinateOf(OpBuilder &nb, int64_t dim, Value row, Value j) const;
  Value emitElement(OpBuilder &nb, rank::KernelOp kernel, ValueRange args);
  void emitReadyRowScalars();
  LogicalResult emitRows(ArrayRef<Value> rows, ArrayRef<Value> outs,
                         int64_t lastSweep);
  LogicalResult emitGpuSweep(Value row, ArrayRef<Value> outs,
                             MutableArrayRef<rank::KernelOp> reductions,
                             ArrayRef<std::pair<unsigned, Value>> stores);
  Value initialAccumulator(rank::KernelOp red);
  Value accumulate(OpBuilder &nb, rank::KernelOp red, Value acc, Value x);
  Value finishReduction(rank::KernelOp red, Value acc);
  bool reducesLanesAsVectors(size_t lanes) const;
  Value accumulateLanes(OpBuilder &nb, rank::KernelOp red, Value acc, Value x);
  SmallVector<Value> transposeLanes(OpBuilder &nb, ArrayRef<Value> r);
  Value accumulateColumns(OpBuilder &nb, rank::KernelOp red, Value acc,
                          ArrayRef<Value> column);
  Value neutralLanes(OpBuilder &nb, rank::KernelOp red);
  SmallVector<Value> reduceLaneVectors(OpBuilder &cb, Value c0, Value hi,
                                       ArrayRef<rank::KernelOp> reductions,
                                       ValueRange carried, int64_t slotBase);

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
  // The element type the reductions reduce (the row type's); the group's
  // other values may have any element type, each in its own storage type.
  ElementTypes et;
  // Row values (the row type) and per-row values (a reduction's result
  // type, either form); the sweep that can first compute each value.
  llvm::DenseSet<Value> perRow;
  llvm::DenseMap<Value, int64_t> level;
  // Kernel arguments: the body's block arguments as flat memrefs.
  llvm::DenseMap<Value, Value> memrefOf;
  llvm::DenseMap<Operation *, Value> constants;
  // Per-row values known in the row being emitted (storage type), and the
  // index of that row.
  llvm::DenseMap<Value, Value> *rowScalars = nullptr;
  Value currentRow;
  // The values a sweep reduces, before they are reduced: `chunk` elements
  // of a row per reduction and lane.
  Value scratch;
  int64_t chunk = 1;
  // Sweep reuse (rowSweepReuseFromEnvironment): the whole row is one
  // chunk and each sweep's scratch rows have a region of their own, after
  // those of the sweeps before it (reductionsBefore[s] of them per lane),
  // so that later sweeps read the values back.
  bool reuseSweeps = false;
  SmallVector<int64_t> reductionsBefore;
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
  // Row values have the row type's shape, per-row values a reduction
  // result's; either may have any element type.
  auto shapeOf = [](Type t) { return cast<RankedTensorType>(t).getShape(); };
  auto isRowType = [&](Type t) { return shapeOf(t) == rowType.getShape(); };
  auto isPerRowType = [&](Type t) {
    return shapeOf(t) == keep.getShape() || shapeOf(t) == drop.getShape();
  };
  for (BlockArgument arg : body.getArguments()) {
    level[arg] = 0;
    if (isPerRowType(arg.getType()) && !isRowType(arg.getType()))
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
    if (isRowType(r.getType()))
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

/// The coordinate along `dim` of the row type of the element at (row, j):
/// an outer dim's from the row, an inner dim's from j.
Value RowKernelBuilder::coordinateOf(OpBuilder &nb, int64_t dim, Value row,
                                     Value j) const {
  ArrayRef<int64_t> full = rowType.getShape();
  int64_t firstInner = rowType.getRank() - reducedDims;
  int64_t end = dim < firstInner ? firstInner : rowType.getRank();
  int64_t stride = 1;
  for (int64_t d = dim + 1; d < end; ++d)
    stride *= full[d];
  Value linear = dim < firstInner ? row : j;
  auto constant = [&](int64_t v) -> Value {
    return arith::ConstantIndexOp::create(nb, loc, v);
  };
  if (stride != 1)
    linear = arith::DivUIOp::create(nb, loc, linear, constant(stride));
  bool outermost = dim == 0 || (dim == firstInner && dim > 0);
  if (outermost)
    return linear; // already below the dim's extent
  return arith::RemUIOp::create(nb, loc, linear, constant(full[dim]));
}

/// An elementwise kernel, comparison, `where` or `cast` of the group on
/// elements of the storage types of their element types.
Value RowKernelBuilder::emitElement(OpBuilder &nb, rank::KernelOp kernel,
                                    ValueRange args) {
  Value r = emitKernelElement(nb, loc, kernel, args);
  if (r)
    return r;
  kernel.emitOpError("has no generated form for ")
      << kernel.getResult().getType();
  failed = true;
  Type storage =
      elementTypesFor(
          cast<RankedTensorType>(kernel.getResult().getType()).getElementType(),
          ctx)
          .storage;
  return arith::ConstantOp::create(nb, loc, nb.getZeroAttr(storage));
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
    } else if (name == "iota") {
      int64_t dim = kernel->getAttrOfType<IntegerAttr>("dim").getInt();
      result = emitIotaElement(nb, loc, kernel, coordinateOf(nb, dim, row, j));
    } else {
      SmallVector<Value> args;
      for (Value in : kernel.getInputs())
        args.push_back(emitRowValue(nb, in, row, j, sweep));
      result = emitElement(nb, kernel, args);
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
      if (kernel.getKernel() == "iota") {
        // A per-row iota: its position is the row's coordinate along its
        // dim (0 along a reduced dim kept with extent 1).
        int64_t dim = kernel->getAttrOfType<IntegerAttr>("dim").getInt();
        (*rowScalars)[r] = emitIotaElement(
            b, loc, kernel,
            dim < rowType.getRank() - reducedDims
                ? coordinateOf(b, dim, currentRow, Value())
                : arith::ConstantIndexOp::create(b, loc, 0).getResult());
        progress = true;
        continue;
      }
      if (!llvm::all_of(kernel.getInputs(),
                        [&](Value in) { return rowScalars->count(in) != 0; }))
        continue;
      SmallVector<Value> args;
      for (Value in : kernel.getInputs())
        args.push_back(rowScalars->lookup(in));
      (*rowScalars)[r] = emitElement(b, kernel, args);
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

/// Whether the reductions of a block of `lanes` rows run on vectors of
/// the lanes (reduceLaneVectors): float32 rows in blocks of kRowLanes on
/// the host, unless DTORCH_ROW_LANE_VECTORS=0.
bool RowKernelBuilder::reducesLanesAsVectors(size_t lanes) const {
  return !forGpu && lanes == static_cast<size_t>(kRowLanes) &&
         et.storage.isF32() && et.compute.isF32() &&
         rowLaneVectorsFromEnvironment();
}

/// accumulate() on vectors of the kRowLanes rows: `acc` is a vector of
/// float64 sums or of float32 maxima (minima), `x` the float32 values of
/// one element of each row. The same operations, lane by lane.
Value RowKernelBuilder::accumulateLanes(OpBuilder &nb, rank::KernelOp red,
                                        Value acc, Value x) {
  if (red.getKernel() == "sum") {
    Value wide = arith::ExtFOp::create(nb, loc, acc.getType(), x);
    return arith::AddFOp::create(nb, loc, acc, wide);
  }
  Value accNaN =
      arith::CmpFOp::create(nb, loc, arith::CmpFPredicate::UNO, acc, acc);
  Value xNaN = arith::CmpFOp::create(nb, loc, arith::CmpFPredicate::UNO, x, x);
  Value better =
      red.getKernel() == "max"
          ? arith::CmpFOp::create(nb, loc, arith::CmpFPredicate::OLT, acc, x)
                .getResult()
          : arith::CmpFOp::create(nb, loc, arith::CmpFPredicate::OLT, x, acc)
                .getResult();
  Value take = arith::OrIOp::create(nb, loc, xNaN, better);
  Value replaced = arith::SelectOp::create(nb, loc, take, x, acc);
  return arith::SelectOp::create(nb, loc, accNaN, acc, replaced);
}

/// The 8 columns of a block of 8 vectors of kRowLanes float32 elements,
/// one vector per lane (rows[l]: elements j..j+7 of lane l): column[t]
/// holds element j+t of lanes 0..7 (3 rounds of shuffles).
SmallVector<Value> RowKernelBuilder::transposeLanes(OpBuilder &nb,
                                                    ArrayRef<Value> r) {
  const int64_t lanes = kRowLanes;
  auto shuffle = [&](Value a, Value b2, ArrayRef<int64_t> mask) -> Value {
    return vector::ShuffleOp::create(nb, loc, a, b2, mask);
  };
  SmallVector<Value> s(lanes), u(lanes), column(lanes);
  for (int64_t i = 0; i < 4; ++i) {
    s[2 * i] = shuffle(r[2 * i], r[2 * i + 1], {0, 8, 2, 10, 4, 12, 6, 14});
    s[2 * i + 1] = shuffle(r[2 * i], r[2 * i + 1], {1, 9, 3, 11, 5, 13, 7, 15});
  }
  for (int64_t a : {0, 1, 4, 5}) {
    u[a] = shuffle(s[a], s[a + 2], {0, 1, 8, 9, 4, 5, 12, 13});
    u[a + 2] = shuffle(s[a], s[a + 2], {2, 3, 10, 11, 6, 7, 14, 15});
  }
  for (int64_t a = 0; a < 4; ++a) {
    column[a] = shuffle(u[a], u[a + 4], {0, 1, 2, 3, 8, 9, 10, 11});
    column[a + 4] = shuffle(u[a], u[a + 4], {4, 5, 6, 7, 12, 13, 14, 15});
  }
  return column;
}

/// `acc` (a vector of the lanes' accumulators) after the columns of
/// transposeLanes, element position after position: each row still in
/// increasing order.
Value RowKernelBuilder::accumulateColumns(OpBuilder &nb, rank::KernelOp red,
                                          Value acc, ArrayRef<Value> column) {
  if (red.getKernel() != "sum" && rowTreeMaxFromEnvironment()) {
    // max, min: accumulate(left, right) of two neighbouring runs of
    // elements is the chain's result over both (the first NaN, else the
    // first of the largest), so the 8 elements combine as a tree, then
    // join the running value: 4 steps deep instead of 8.
    SmallVector<Value> runs(column.begin(), column.end());
    while (runs.size() > 1) {
      SmallVector<Value> joined;
      for (size_t i = 0; i + 1 < runs.size(); i += 2)
        joined.push_back(accumulateLanes(nb, red, runs[i], runs[i + 1]));
      runs = std::move(joined);
    }
    return accumulateLanes(nb, red, acc, runs[0]);
  }
  for (Value c : column)
    acc = accumulateLanes(nb, red, acc, c);
  return acc;
}

/// The element that leaves a reduction's accumulator as it is, the masked
/// tail's padding: -0 for a sum (x + -0 is x, -0 and NaN included), -inf
/// for max, +inf for min (never strictly better, never NaN).
Value RowKernelBuilder::neutralLanes(OpBuilder &nb, rank::KernelOp red) {
  double v = red.getKernel() == "sum" ? -0.0
             : red.getKernel() == "max"
                 ? -std::numeric_limits<double>::infinity()
                 : std::numeric_limits<double>::infinity();
  auto type = VectorType::get({kRowLanes}, et.storage);
  return arith::ConstantOp::create(
      nb, loc,
      DenseElementsAttr::get(
          type, ArrayRef<Attribute>(nb.getFloatAttr(et.storage, v))));
}

/// The reductions of one chunk [c0, hi) of a block of kRowLanes float32
/// rows, each lane's accumulator one element of a vector: 8 elements of
/// the 8 scratch rows at a time are loaded (one vector per row),
/// transposed in registers (transposeLanes) and added one element
/// position after the other (accumulateColumns), so each row is still
/// reduced in increasing order, by the same operations as accumulate().
/// The elements past the last multiple of 8 (at most 7 per row) are one
/// masked step of the same kind, padded with elements that change no
/// accumulator (neutralLanes: the same bits), or, with
/// DTORCH_ROW_MASKED_TAILS=0, go one by one. `carried` holds the
/// accumulators of reduction k, lane l at k * lanes + l; so does the
/// result.
SmallVector<Value>
RowKernelBuilder::reduceLaneVectors(OpBuilder &cb, Value c0, Value hi,
                                    ArrayRef<rank::KernelOp> reductions,
                                    ValueRange carried, int64_t slotBase) {
  const int64_t lanes = kRowLanes;
  Type f64 = Float64Type::get(ctx);
  auto vectorOf = [&](Type t) { return VectorType::get({lanes}, t); };
  auto index = [&](OpBuilder &nb, int64_t v) -> Value {
    return arith::ConstantIndexOp::create(nb, loc, v);
  };
  auto accumulatorType = [&](rank::KernelOp red) {
    return vectorOf(red.getKernel() == "sum" ? f64 : et.compute);
  };
  // Where element `local` of lane l's scratch row of reduction k is.
  auto scratchAt = [&](OpBuilder &nb, size_t k, int64_t l,
                       Value local) -> Value {
    return arith::AddIOp::create(
        nb, loc,
        index(nb, (slotBase + static_cast<int64_t>(k * lanes + l)) * chunk),
        local);
  };
  // [c0, vectorEnd): whole groups of 8 elements.
  Value step = index(cb, lanes);
  Value whole = arith::MulIOp::create(
      cb, loc,
      arith::DivUIOp::create(cb, loc, arith::SubIOp::create(cb, loc, hi, c0),
                             step),
      step);
  Value vectorEnd = arith::AddIOp::create(cb, loc, c0, whole);
  SmallVector<Value> init;
  for (auto [k, red] : llvm::enumerate(reductions))
    init.push_back(vector::FromElementsOp::create(
        cb, loc, accumulatorType(red), carried.slice(k * lanes, lanes)));
  auto groups = scf::ForOp::create(cb, loc, c0, vectorEnd, step, init);
  {
    Block *loopBody = groups.getBody();
    if (!loopBody->empty() && isa<scf::YieldOp>(loopBody->back()))
      loopBody->back().erase();
    OpBuilder nb = OpBuilder::atBlockEnd(loopBody);
    Value local = arith::SubIOp::create(nb, loc, groups.getInductionVar(), c0);
    SmallVector<Value> next;
    for (auto [k, red] : llvm::enumerate(reductions)) {
      SmallVector<Value> r;
      for (int64_t l = 0; l < lanes; ++l)
        r.push_back(
            vector::LoadOp::create(nb, loc, vectorOf(et.storage), scratch,
                                   ValueRange{scratchAt(nb, k, l, local)}));
      next.push_back(accumulateColumns(nb, red, groups.getRegionIterArgs()[k],
                                       transposeLanes(nb, r)));
    }
    scf::YieldOp::create(nb, loc, next);
  }
  SmallVector<Value> vectors(groups.getResults());
  if (rowMaskedTailsFromEnvironment()) {
    // The rest, when there is one: one more step on masked loads of the
    // [vectorEnd, hi) elements, the others the neutral element.
    Value rest = arith::SubIOp::create(cb, loc, hi, vectorEnd);
    Value any = arith::CmpIOp::create(cb, loc, arith::CmpIPredicate::ne, rest,
                                      index(cb, 0));
    auto tail = scf::IfOp::create(cb, loc, TypeRange(ValueRange(vectors)), any,
                                  /*withElseRegion=*/true);
    {
      OpBuilder nb = tail.getThenBodyBuilder();
      Value mask = vector::CreateMaskOp::create(
          nb, loc, VectorType::get({lanes}, nb.getI1Type()), ValueRange{rest});
      Value local = arith::SubIOp::create(nb, loc, vectorEnd, c0);
      SmallVector<Value> next;
      for (auto [k, red] : llvm::enumerate(reductions)) {
        Value neutral = neutralLanes(nb, red);
        SmallVector<Value> r;
        for (int64_t l = 0; l < lanes; ++l)
          r.push_back(vector::MaskedLoadOp::create(
              nb, loc, vectorOf(et.storage), scratch,
              ValueRange{scratchAt(nb, k, l, local)}, mask, neutral));
        next.push_back(
            accumulateColumns(nb, red, vectors[k], transposeLanes(nb, r)));
      }
      scf::YieldOp::create(nb, loc, next);
      OpBuilder eb = tail.getElseBodyBuilder();
      scf::YieldOp::create(eb, loc, vectors);
    }
    vectors.assign(tail.getResults().begin(), tail.getResults().end());
  }
  // Back to one accumulator per lane.
  SmallVector<Value> scalars;
  for (auto [k, red] : llvm::enumerate(reductions))
    for (int64_t l = 0; l < lanes; ++l)
      scalars.push_back(vector::ExtractOp::create(cb, loc, vectors[k], l));
  if (rowMaskedTailsFromEnvironment())
    return scalars;
  // DTORCH_ROW_MASKED_TAILS=0: the rest of the chunk one element at a time.
  auto tail = scf::ForOp::create(cb, loc, vectorEnd, hi, index(cb, 1), scalars);
  {
    Block *loopBody = tail.getBody();
    if (!loopBody->empty() && isa<scf::YieldOp>(loopBody->back()))
      loopBody->back().erase();
    OpBuilder nb = OpBuilder::atBlockEnd(loopBody);
    Value local = arith::SubIOp::create(nb, loc, tail.getInductionVar(), c0);
    SmallVector<Value> next(scalars.size());
    for (auto [k, red] : llvm::enumerate(reductions))
      for (int64_t l = 0; l < lanes; ++l) {
        size_t slot = k * lanes + l;
        Value x = memref::LoadOp::create(
            nb, loc, scratch, ValueRange{scratchAt(nb, k, l, local)});
        next[slot] = accumulate(nb, red, tail.getRegionIterArgs()[slot], x);
      }
    scf::YieldOp::create(nb, loc, next);
  }
  return SmallVector<Value>(tail.getResults());
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
  // Each in the storage type of its own element type.
  auto storageOf = [&](Type t) {
    return elementTypesFor(cast<RankedTensorType>(t).getElementType(), ctx)
        .storage;
  };
  SmallVector<Type> argTypes;
  for (Value in : op.getInputs()) {
    if (!storageOf(in.getType()))
      return op.emitOpError("cannot generate code for ") << in.getType();
    argTypes.push_back(
        MemRefType::get({numElements(in.getType())}, storageOf(in.getType())));
  }
  for (Type t : op.getResultTypes()) {
    if (!storageOf(t))
      return op.emitOpError("cannot generate code for ") << t;
    argTypes.push_back(MemRefType::get({numElements(t)}, storageOf(t)));
  }
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
    constants = emitFullConstants(b, loc, body, entry->getArguments().back());

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
    for (Operation &innerOp : body.without_terminator()) {
      auto full = cast<rank::KernelOp>(innerOp);
      if (full.getKernel() != "full")
        continue;
      // Each constant in its own element type (a group may mix them).
      ElementTypes fullTypes = elementTypesFor(
          cast<RankedTensorType>(full.getResult().getType()).getElementType(),
          ctx);
      constants[&innerOp] = convertFullConstant(
          b, loc, entry->getArgument(firstScalar + k++), fullTypes);
    }
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
  int64_t perSweep = 0, allSweeps = 0;
  reductionsBefore.assign(lastSweep + 1, 0);
  for (int64_t s = 0; s <= lastSweep; ++s) {
    int64_t n = 0;
    for (Operation &inner : body.without_terminator())
      n += isRowReduction(inner) && level.lookup(inner.getOperand(0)) == s;
    perSweep = std::max(perSweep, n);
    reductionsBefore[s] = allSweeps;
    allSweeps += n;
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
  // With masked tails, a chunk that is not the whole row is whole groups of
  // 8 elements, so that only a row's last chunk has a tail.
  if (rowMaskedTailsFromEnvironment() && chunk < inner && chunk > lanes)
    chunk = chunk / lanes * lanes;
  // Sweep reuse: rows short enough that every sweep's scratch rows fit
  // side by side, whole, in kScratchBytes (and a later sweep to read them).
  reuseSweeps = rowSweepReuseFromEnvironment() && lastSweep > 0 && inner >= 1 &&
                inner <= kChunkElements &&
                allSweeps * lanes * inner * elementBytes <= kScratchBytes;
  if (reuseSweeps)
    chunk = inner;
  int64_t slots = reuseSweeps ? allSweeps : perSweep;
  scratch = memref::AllocaOp::create(
      b, loc,
      MemRefType::get({std::max<int64_t>(1, slots * lanes * chunk)},
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
    currentRow = rows[l];
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
  // The reductions of each sweep, in body order (reduction k of sweep s,
  // lane l in scratch slot base(s) + k * lanes + l).
  SmallVector<SmallVector<rank::KernelOp>> bySweep(lastSweep + 1);
  for (Operation &inner : body.without_terminator())
    if (isRowReduction(inner))
      bySweep[level.lookup(inner.getOperand(0))].push_back(
          cast<rank::KernelOp>(inner));
  auto slotBase = [&](int64_t s) -> int64_t {
    return reuseSweeps ? reductionsBefore[s] * static_cast<int64_t>(lanes) : 0;
  };
  for (int64_t s = 0; s <= lastSweep; ++s) {
    SmallVector<rank::KernelOp> reductions(bySweep[s]);
    int64_t base = slotBase(s);
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
        // The values the earlier sweeps reduced, kept in their scratch
        // rows: read back, not computed again (emitRowValue finds them).
        if (reuseSweeps)
          for (int64_t e = 0; e < s; ++e)
            for (auto [k, red] : llvm::enumerate(bySweep[e]))
              values[red.getInputs()[0]] = memref::LoadOp::create(
                  nb, loc, scratch,
                  ValueRange{
                      scratchIndex(nb, slotBase(e) + k * lanes + l, local)});
        for (auto [k, red] : llvm::enumerate(reductions)) {
          Value x = emitRowValue(nb, red.getInputs()[0], row, j, values);
          memref::StoreOp::create(
              nb, loc, x, scratch,
              ValueRange{scratchIndex(nb, base + k * lanes + l, local)});
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
      } else if (reducesLanesAsVectors(lanes)) {
        SmallVector<Value> reduced =
            reduceLaneVectors(cb, c0, hi, reductions, carried, base);
        scf::YieldOp::create(cb, loc, reduced);
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
                nb, loc, scratch,
                ValueRange{scratchIndex(nb, base + slot, local)});
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
      currentRow = rows[l];
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

bool rowLaneVectorsFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_ROW_LANE_VECTORS");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

bool rowSweepReuseFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_ROW_SWEEP_REUSE");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

bool rowMaskedTailsFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_ROW_MASKED_TAILS");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

bool rowTreeMaxFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_ROW_TREE_MAX");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

bool rowKernelFoldsLoopTails(Block &body) {
  if (!rowMaskedTailsFromEnvironment())
    return false;
  // A scalar remainder iteration costs about what a vector iteration does
  // when the element is a polynomial (exp, log, ...); with cheap elements
  // the masks cost more than the remainder saves.
  bool polynomial = llvm::any_of(body.without_terminator(), [](Operation &k) {
    return llvm::is_contained(
        {"exp", "log", "tanh", "gelu", "sigmoid", "silu", "sin", "cos", "pow"},
        cast<rank::KernelOp>(k).getKernel());
  });
  for (Operation &inner : body.without_terminator())
    if (isRowReduction(inner)) {
      int64_t rows = rowReductionRows(body);
      int64_t length =
          rows == 0 ? 0 : numElements(inner.getOperand(0).getType()) / rows;
      return polynomial && length < kFoldTailsBelow;
    }
  return false;
}

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
