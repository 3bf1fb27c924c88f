//===- LowerToRank.cpp - --dtensor-lower-to-rank (SPMD lowering) ---------===//
//
// Every function on dtensors becomes one function per local-shape class of
// its mesh: the mesh positions whose local pieces all have the same shapes
// run the same program. Values that differ between the ranks of a class
// (where a rank's piece starts, its coordinate) become mesh-dependent
// attributes that each worker resolves from its own mesh coordinates, and
// collectives name their mesh axis.
//
//===----------------------------------------------------------------------===//
#include "OpLayoutKey.h"
#include "dtensor/Transforms/Passes.h"
#include "dtorch/OpRegistry.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>
#include <optional>
#include <set>
#include <unordered_set>

namespace dtorch::dtensor {
#define GEN_PASS_DEF_LOWERTORANK
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;
using namespace dtorch;
using namespace dtorch::dtensor;

namespace {

std::vector<int64_t> toVec(ArrayRef<int64_t> a) { return {a.begin(), a.end()}; }

/// The runtime kernel of a dialect op, from the op registry.
StringRef kernelName(Operation *op) {
  const OpInfo *info = findOp(op->getName().stripDialect());
  return info && *info->kernel ? StringRef(info->kernel)
                               : op->getName().stripDialect();
}

/// Per mesh axis, the tensor dim each axis shards (-1: none).
SmallVector<int64_t> shardDims(const Placements &layout) {
  SmallVector<int64_t> dims;
  for (const Placement &p : layout)
    dims.push_back(p.isShard() ? p.dim : -1);
  return dims;
}

/// Lowers one function for one local-shape class; `coords` is any position
/// of the class (only the local shapes are taken from it).
class RankLowering {
public:
  RankLowering(MeshAttr mesh, std::vector<int64_t> coords, OpBuilder &b)
      : meshShape(toVec(mesh.getShape())), coords(std::move(coords)), b(b) {}

  /// The local type of `t` at this class's positions. Memoized: a segment
  /// has few distinct types, and computing the local box of one per op was
  /// a quarter of the lowering.
  Type localType(Type t) {
    auto dt = dyn_cast<DTensorType>(t);
    if (!dt)
      return t;
    Type &local = localTypes[t];
    if (!local)
      local =
          RankedTensorType::get(dt.getLocalShape(coords), dt.getElementType());
    return local;
  }

  /// Emits the local version of `op`; returns failure with a diagnostic.
  LogicalResult lower(Operation *op, IRMapping &map);

private:
  Value in(Operation *op, unsigned k, IRMapping &map) {
    return map.lookup(op->getOperand(k));
  }
  Value kernel(Operation *op, StringRef name, IRMapping &map,
               ArrayRef<NamedAttribute> attrs = {});
  LogicalResult lowerStep(Operation *op, IRMapping &map);
  LogicalResult lowerTransfer(TransferOp op, IRMapping &map);
  LogicalResult lowerAllToAllV(AllToAllVOp op, IRMapping &map);
  /// A multi-tensor optimizer update (fused_adam, fused_sgd): every rank
  /// updates its own pieces (the verifier made each parameter's group
  /// elementwise and unpartial) with the rank op of the same name,
  /// operands and attributes.
  LogicalResult lowerOptimizerUpdate(Operation *op, IRMapping &map);
  /// One side of a move between meshes: every position has its own class,
  /// so the peer is a global rank.
  LogicalResult lowerMeshMove(Operation *op, IRMapping &map);
  /// Where this rank's piece of a tensor of type `t` starts: all dims
  /// (dim = -1) or one.
  Attribute boxOffset(DTensorType t, int64_t dim = -1) {
    return rank::BoxOffsetAttr::get(
        b.getContext(), b.getDenseI64ArrayAttr(t.getShape()),
        b.getDenseI64ArrayAttr(shardDims(t.getLayout())), dim);
  }

  std::vector<int64_t> meshShape;
  std::vector<int64_t> coords;
  OpBuilder &b;
  llvm::DenseMap<Type, Type> localTypes;
  /// Keys of the ops already checked to be a local strategy.
  std::unordered_set<OpLayoutKey, OpLayoutKeyHash> localStrategies;
  /// The tag of the next transfer: its index among the function's transfers
  /// (every class lowers them in the same order, so the tags agree).
  int64_t nextTransferTag = 0;
};

Value RankLowering::kernel(Operation *op, StringRef name, IRMapping &map,
                           ArrayRef<NamedAttribute> attrs) {
  SmallVector<Value> inputs;
  for (Value v : op->getOperands())
    inputs.push_back(map.lookup(v));
  auto k = rank::KernelOp::create(b, op->getLoc(),
                                  localType(op->getResult(0).getType()),
                                  b.getStringAttr(name), inputs);
  for (const NamedAttribute &a : attrs)
    k->setAttr(a.getName(), a.getValue());
  map.map(op->getResult(0), k.getResult());
  return k.getResult();
}

LogicalResult RankLowering::lower(Operation *op, IRMapping &map) {
  if (auto ret = dyn_cast<func::ReturnOp>(op)) {
    SmallVector<Value> vals;
    for (Value v : ret.getOperands())
      vals.push_back(map.lookup(v));
    func::ReturnOp::create(b, op->getLoc(), vals);
    return success();
  }
  if (isa<RedistributeOp>(op))
    return op->emitOpError(
        "must be lowered first (run --dtensor-lower-redistribute)");
  if (isa<FusedAdamOp, FusedSgdOp>(op))
    return lowerOptimizerUpdate(op, map);
  auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return lowerStep(op, map);

  std::vector<Placements> operandLayouts;
  for (Value v : op->getOperands())
    operandLayouts.push_back(cast<DTensorType>(v.getType()).getLayout());
  auto resultType = cast<DTensorType>(op->getResult(0).getType());
  // Ops with the same name, attributes and types get the same answer: a
  // chain of like ops asks the rule once.
  OpLayoutKey key = OpLayoutKey::of(op);
  if (!localStrategies.count(key)) {
    if (!isLocalStrategy(ruleOp.getShardingRule(), operandLayouts,
                         resultType.getLayout(), meshShape))
      return op->emitOpError(
          "placements are not a local strategy of its "
          "sharding rule (run --dtensor-propagate-sharding)");
    localStrategies.insert(std::move(key));
  }

  LocalBox box = localBox(toVec(resultType.getShape()), meshShape,
                          resultType.getLayout(), coords);
  auto i64s = [&](ArrayRef<int64_t> v) { return b.getDenseI64ArrayAttr(v); };
  auto named = [&](StringRef n, Attribute a) { return b.getNamedAttr(n, a); };

  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case<FullOp>([&](FullOp o) {
        kernel(op, "full", map, {named("value", o.getValueAttr())});
        return success();
      })
      .Case<RandomOp>([&](RandomOp o) {
        kernel(op, "random", map,
               {named("seed", o.getSeedAttr()),
                named("dist", o.getDistributionAttr()),
                named("global_shape", i64s(resultType.getShape())),
                named("offset", boxOffset(resultType))});
        return success();
      })
      .Case<ConstantOp>([&](ConstantOp o) -> LogicalResult {
        auto dense = dyn_cast<DenseElementsAttr>(o.getValue());
        if (!dense)
          return o.emitOpError("needs a dense value to lower");
        // The global value once; each rank's kernel cuts its own box.
        kernel(op, "constant", map,
               {named("data", dense),
                named("global_shape", i64s(resultType.getShape())),
                named("offset", boxOffset(resultType))});
        return success();
      })
      .Case<SumOp, MeanOp>([&](auto o) {
        double count = 1;
        for (int64_t d : o.getDims())
          count *= (double)o.getInput().getType().getShape()[d];
        double scale = isa<MeanOp>(op) ? 1.0 / std::max(count, 1.0) : 1.0;
        kernel(op, "sum", map,
               {named("dims", o.getDimsAttr()),
                named("keepdim", b.getI64IntegerAttr(o.getKeepdim())),
                named("scale", b.getF64FloatAttr(scale))});
        return success();
      })
      .Case<MaxOp, MinOp>([&](auto o) {
        kernel(op, isa<MaxOp>(op) ? "max" : "min", map,
               {named("dims", o.getDimsAttr()),
                named("keepdim", b.getI64IntegerAttr(o.getKeepdim()))});
        return success();
      })
      .Case<TransposeOp>([&](TransposeOp o) {
        kernel(op, "transpose", map, {named("perm", o.getPermAttr())});
        return success();
      })
      .Case<ArgmaxOp, ArgminOp>([&](auto o) {
        kernel(op, kernelName(op), map,
               {named("dim", o.getDimAttr()),
                named("keepdim", b.getI64IntegerAttr(o.getKeepdim()))});
        return success();
      })
      .Case<SliceOp>([&](SliceOp o) {
        // Sharded dims are read whole (the rule): this rank's whole piece.
        kernel(op, kernelName(op), map,
               {named("offsets", o.getOffsetsAttr()),
                named("sizes", i64s(box.shape)),
                named("strides", o.getStridesAttr())});
        return success();
      })
      .Case<IndexSelectOp>([&](IndexSelectOp o) {
        // A sharded picked dim: look up the rows this rank holds, zeros for
        // the others (the result is P(sum) there).
        auto inT = o.getInput().getType();
        int64_t dim = o.getDim();
        bool sharded = false;
        for (const Placement &p : inT.getLayout())
          sharded |= p.isShard() && p.dim == dim;
        kernel(op, kernelName(op), map,
               {named("dim", o.getDimAttr()),
                named("offset", boxOffset(inT, dim)),
                named("masked", b.getI64IntegerAttr(sharded))});
        return success();
      })
      .Case<TrilOp, TriuOp>([&](auto o) {
        int64_t r = resultType.getShape().size();
        kernel(op, kernelName(op), map,
               {named("diagonal", o.getDiagonalAttr()),
                named("row_offset", boxOffset(resultType, r - 2)),
                named("col_offset", boxOffset(resultType, r - 1))});
        return success();
      })
      .Case<TransferOp>([&](TransferOp o) { return lowerTransfer(o, map); })
      .Case<AllToAllVOp>([&](AllToAllVOp o) { return lowerAllToAllV(o, map); })
      .Case<SendOp, RecvOp>([&](Operation *o) { return lowerMeshMove(o, map); })
      .Case<IotaOp>([&](IotaOp o) {
        kernel(op, kernelName(op), map,
               {named("dim", o.getDimAttr()), named("start", o.getStartAttr()),
                named("step", o.getStepAttr()),
                named("offset", boxOffset(resultType))});
        return success();
      })
      .Default([&](Operation *) {
        // Elementwise ops, matmul, bmm, reshape, concat, gather,
        // scatter_add: the registry's kernel with the op's attributes.
        SmallVector<NamedAttribute> attrs(op->getAttrs());
        kernel(op, kernelName(op), map, attrs);
        return success();
      });
}

LogicalResult RankLowering::lowerOptimizerUpdate(Operation *op,
                                                 IRMapping &map) {
  StringRef name = isa<FusedAdamOp>(op) ? rank::FusedAdamOp::getOperationName()
                                        : rank::FusedSgdOp::getOperationName();
  OperationState state(op->getLoc(), name);
  for (Value v : op->getOperands())
    state.operands.push_back(map.lookup(v));
  for (Value r : op->getResults())
    state.types.push_back(localType(r.getType()));
  // The op's own attributes (dialect-prefixed discardable ones stay).
  for (NamedAttribute a : op->getAttrs())
    if (!a.getName().getValue().contains('.'))
      state.addAttribute(a.getName(), a.getValue());
  Operation *local = b.create(state);
  for (auto [global, result] : llvm::zip(op->getResults(), local->getResults()))
    map.map(global, result);
  return success();
}

LogicalResult RankLowering::lowerTransfer(TransferOp op, IRMapping &map) {
  int64_t axis = op.getAxis();
  int64_t tag = nextTransferTag++;
  int64_t here = coords[axis];
  std::optional<int64_t> sendTo, receiveFrom;
  for (auto [src, dst] : llvm::zip(op.getSources(), op.getDestinations())) {
    if (src == here)
      sendTo = dst;
    if (dst == here)
      receiveFrom = src;
  }
  Value input = map.lookup(op.getInput());
  Type type = localType(op.getResult().getType());
  Location loc = op.getLoc();
  IntegerAttr axisAttr = b.getI64IntegerAttr(axis);
  IntegerAttr tagAttr = b.getI64IntegerAttr(tag);
  Value out;
  if (sendTo && receiveFrom) {
    auto batch = rank::BatchSendRecvOp::create(
        b, loc, TypeRange{type}, ValueRange{input}, axisAttr,
        b.getDenseI64ArrayAttr({*sendTo}),
        b.getDenseI64ArrayAttr({*receiveFrom}), tagAttr);
    out = batch.getResults()[0];
  } else {
    if (sendTo)
      rank::SendOp::create(b, loc, input, axisAttr,
                           b.getI64IntegerAttr(*sendTo), tagAttr);
    if (receiveFrom) {
      out = rank::RecvOp::create(b, loc, type, axisAttr,
                                 b.getI64IntegerAttr(*receiveFrom), tagAttr);
    } else {
      // A block that no pair fills is zero.
      auto zero = rank::KernelOp::create(b, loc, type, b.getStringAttr("full"),
                                         ValueRange{});
      zero->setAttr("value", b.getF64FloatAttr(0.0));
      out = zero;
    }
  }
  map.map(op.getResult(), out);
  return success();
}

/// The local pieces are [1, rows, ...] and [1, segments]: flattened to the
/// segmented rank.all_to_all_v's [rows, ...] and [segments] (reshapes that
/// copy nothing), and the result back to [1, rows, ...].
LogicalResult RankLowering::lowerAllToAllV(AllToAllVOp op, IRMapping &map) {
  Location loc = op.getLoc();
  auto inT = cast<RankedTensorType>(localType(op.getInput().getType()));
  auto countsT = cast<RankedTensorType>(localType(op.getCounts().getType()));
  ArrayRef<int64_t> inShape = inT.getShape();
  auto flatT =
      RankedTensorType::get(inShape.drop_front(), inT.getElementType());
  auto flatCountsT =
      RankedTensorType::get({countsT.getShape()[1]}, countsT.getElementType());
  int64_t segments = countsT.getShape()[1];
  int64_t segmentRows = inShape[1] / segments;
  auto reshape = [&](Value v, Type to) -> Value {
    return rank::KernelOp::create(b, loc, to, b.getStringAttr("reshape"),
                                  ValueRange{v})
        .getResult();
  };
  Value x = reshape(map.lookup(op.getInput()), flatT);
  Value counts = reshape(map.lookup(op.getCounts()), flatCountsT);
  auto exchange = rank::AllToAllVOp::create(
      b, loc, TypeRange{flatT, flatCountsT}, x, counts,
      b.getI64IntegerAttr(op.getAxis()), b.getI64IntegerAttr(segmentRows));
  map.map(op.getResult(), reshape(exchange.getResult(), inT));
  return success();
}

LogicalResult RankLowering::lowerMeshMove(Operation *op, IRMapping &map) {
  int64_t position = 0;
  for (size_t a = 0; a < meshShape.size(); ++a)
    position = position * meshShape[a] + coords[a];
  Location loc = op->getLoc();
  if (auto send = dyn_cast<SendOp>(op)) {
    Value input = map.lookup(send.getInput());
    rank::SendOp::create(b, loc, input, IntegerAttr(),
                         b.getI64IntegerAttr(send.getPeers()[position]),
                         send.getTagAttr());
    map.map(send.getResult(), input);
    return success();
  }
  auto recv = cast<RecvOp>(op);
  Value out = rank::RecvOp::create(
      b, loc, localType(recv.getResult().getType()), IntegerAttr(),
      b.getI64IntegerAttr(recv.getPeers()[position]), recv.getTagAttr());
  map.map(recv.getResult(), out);
  return success();
}

LogicalResult RankLowering::lowerStep(Operation *op, IRMapping &map) {
  if (op->getNumOperands() != 1 || op->getNumResults() != 1 ||
      !isa<DTensorType>(op->getOperand(0).getType()))
    return op->emitOpError("cannot be lowered to per-rank ops");
  auto srcT = cast<DTensorType>(op->getOperand(0).getType());
  auto dstT = cast<DTensorType>(op->getResult(0).getType());
  auto axisAttr = op->getAttrOfType<IntegerAttr>("axis");
  if (!axisAttr)
    return op->emitOpError("cannot be lowered to per-rank ops");
  int64_t axis = axisAttr.getInt();
  int64_t n = meshShape[axis];
  Placement src = srcT.getLayout()[axis], dst = dstT.getLayout()[axis];
  SmallVector<int64_t> inShape = srcT.getLocalShape(coords);
  SmallVector<int64_t> outShape = dstT.getLocalShape(coords);
  Value input = in(op, 0, map);
  Type outType = localType(dstT);
  Location loc = op->getLoc();
  // Steps that leave this rank's piece as it is make no op: every step on
  // a mesh axis of one rank (its collective involves this rank alone), and
  // a local slice that keeps the whole piece (a torch.chunk piece as long
  // as the extent it splits is the first one, starting at 0).
  if (input.getType() == outType &&
      (n == 1 || (isa<LocalSliceOp>(op) && inShape == outShape))) {
    map.map(op->getResult(0), input);
    return success();
  }
  auto sizes = [&](int64_t extent) {
    std::vector<int64_t> s = chunkSizes(extent, n);
    return b.getDenseI64ArrayAttr(s);
  };
  auto g = b.getI64IntegerAttr(axis);
  Value out;
  if (isa<AllReduceOp>(op)) {
    out = rank::AllReduceOp::create(b, loc, outType, input, g,
                                    b.getStringAttr(reduceOpName(src.op)));
  } else if (isa<ReduceScatterOp>(op)) {
    out = rank::ReduceScatterOp::create(
        b, loc, outType, input, g, b.getStringAttr(reduceOpName(src.op)),
        b.getI64IntegerAttr(dst.dim), sizes(inShape[dst.dim]));
  } else if (isa<AllGatherOp>(op)) {
    out = rank::AllGatherOp::create(b, loc, outType, input, g,
                                    b.getI64IntegerAttr(src.dim),
                                    sizes(outShape[src.dim]));
  } else if (isa<AllToAllOp>(op)) {
    out = rank::AllToAllOp::create(
        b, loc, outType, input, g, b.getI64IntegerAttr(dst.dim),
        sizes(inShape[dst.dim]), b.getI64IntegerAttr(src.dim),
        sizes(outShape[src.dim]));
  } else if (isa<LocalSliceOp>(op)) {
    auto k = rank::KernelOp::create(b, loc, outType, b.getStringAttr("slice"),
                                    ValueRange{input});
    k->setAttr("dim", b.getI64IntegerAttr(dst.dim));
    k->setAttr("start", rank::ChunkOffsetAttr::get(b.getContext(), axis,
                                                   inShape[dst.dim]));
    out = k;
  } else if (isa<ToPartialOp>(op)) {
    // P(sum): the rank at coordinate 0 of the axis keeps the value, the
    // others add zero; other reductions keep it everywhere.
    bool sum = dst.op == ReduceOp::Sum;
    auto k = rank::KernelOp::create(
        b, loc, outType, b.getStringAttr(sum ? "lead_or_zero" : "copy"),
        ValueRange{input});
    if (sum)
      k->setAttr("coord", rank::MeshCoordAttr::get(b.getContext(), axis));
    out = k;
  } else {
    return op->emitOpError("cannot be lowered to per-rank ops");
  }
  map.map(op->getResult(0), out);
  return success();
}

/// The one mesh of a function's dtensors (null when it has none).
FailureOr<MeshAttr> functionMesh(func::FuncOp fn) {
  MeshAttr mesh;
  bool mixed = false;
  auto visit = [&](Type t) {
    if (auto dt = dyn_cast<DTensorType>(t)) {
      if (mesh && dt.getMesh() != mesh)
        mixed = true;
      mesh = dt.getMesh();
    }
  };
  for (Type t : fn.getFunctionType().getInputs())
    visit(t);
  for (Type t : fn.getFunctionType().getResults())
    visit(t);
  fn.walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      visit(t);
  });
  if (mixed)
    return fn.emitOpError("uses dtensors on more than one mesh; SPMD lowering "
                          "needs one mesh per function");
  return mesh;
}

/// The function's `dtensor.global_ranks` (null when it has none), checked
/// against its mesh: one distinct non-negative rank per position.
FailureOr<DenseI64ArrayAttr> functionGlobalRanks(func::FuncOp fn,
                                                 MeshAttr mesh) {
  Attribute attr = fn->getAttr(kGlobalRanksAttrName);
  if (!attr)
    return DenseI64ArrayAttr();
  auto ranks = dyn_cast<DenseI64ArrayAttr>(attr);
  if (!ranks)
    return fn.emitOpError("'")
           << kGlobalRanksAttrName << "' must be an i64 array";
  if (ranks.size() != mesh.getNumDevices())
    return fn.emitOpError("'")
           << kGlobalRanksAttrName << "' has " << ranks.size()
           << " ranks for a mesh of " << mesh.getNumDevices() << " positions";
  std::set<int64_t> seen;
  for (int64_t r : ranks.asArrayRef())
    if (r < 0 || !seen.insert(r).second)
      return fn.emitOpError("'") << kGlobalRanksAttrName << "' names rank " << r
                                 << (r < 0 ? ", below 0" : " twice");
  return ranks;
}

/// The local-shape classes of a function's mesh positions.
struct ShapeClass {
  std::vector<int64_t> representative;     // the coordinates lowered for it
  SmallVector<SmallVector<int64_t>> boxes; // [lo0, hi0, lo1, hi1, ...]
};

/// Joins boxes that differ in one axis only, where they touch, until no two
/// do: the boxes of a class then read as few coordinate ranges as possible.
void mergeAdjacentBoxes(SmallVector<SmallVector<int64_t>> &boxes) {
  bool merged = true;
  while (merged) {
    merged = false;
    for (size_t i = 0; i < boxes.size() && !merged; ++i) {
      for (size_t j = i + 1; j < boxes.size() && !merged; ++j) {
        SmallVector<int64_t> &a = boxes[i], &b = boxes[j];
        int differing = -1, count = 0;
        for (size_t axis = 0; 2 * axis < a.size(); ++axis)
          if (a[2 * axis] != b[2 * axis] ||
              a[2 * axis + 1] != b[2 * axis + 1]) {
            differing = axis;
            ++count;
          }
        if (count != 1)
          continue;
        int64_t lo = 2 * differing, hi = lo + 1;
        if (a[hi] != b[lo] && b[hi] != a[lo])
          continue;
        a[lo] = std::min(a[lo], b[lo]);
        a[hi] = std::max(a[hi], b[hi]);
        boxes.erase(boxes.begin() + j);
        merged = true;
      }
    }
  }
}

/// Splits the mesh into boxes on which every local shape of `types` is
/// constant, then groups the boxes by their local shapes. Per mesh axis, a
/// torch.chunk split of extent P into n pieces changes size at most twice
/// (full pieces, one remainder, empty pieces), so the cuts of an axis come
/// from the extents that axis splits; nested splits add the extents of the
/// pieces earlier axes leave. The work depends on the number of cuts, not
/// on the number of ranks (an even split has none: one box, one class).
std::vector<ShapeClass> shapeClasses(ArrayRef<int64_t> mesh,
                                     ArrayRef<DTensorType> types,
                                     ArrayRef<TransferOp> transfers,
                                     bool movesBetweenMeshes) {
  size_t axes = mesh.size();
  std::vector<std::set<int64_t>> cuts(axes);
  for (size_t a = 0; a < axes; ++a)
    cuts[a] = {0, mesh[a]};
  // A send to or receive from another mesh names a global peer per
  // position: every position is a class.
  if (movesBetweenMeshes)
    for (size_t a = 0; a < axes; ++a)
      for (int64_t c = 1; c < mesh[a]; ++c)
        cuts[a].insert(c);
  // A transfer's sources and destinations run programs of their own (they
  // send and receive): each is a class on its axis.
  for (TransferOp t : transfers)
    for (ArrayRef<int64_t> list : {t.getSources(), t.getDestinations()})
      for (int64_t c : list) {
        cuts[t.getAxis()].insert(c);
        cuts[t.getAxis()].insert(c + 1);
      }
  for (DTensorType t : types) {
    const Placements &layout = t.getLayout();
    for (int64_t d = 0; d < (int64_t)t.getShape().size(); ++d) {
      std::set<int64_t> extents = {t.getShape()[d]};
      for (size_t a = 0; a < axes; ++a) {
        if (!layout[a].isShard(d))
          continue;
        int64_t n = mesh[a];
        std::set<int64_t> next;
        for (int64_t p : extents) {
          int64_t chunk = (p + n - 1) / n;
          int64_t full = chunk ? p / chunk : n; // pieces of `chunk` elements
          for (int64_t c : {full, full + 1})
            if (c > 0 && c < n)
              cuts[a].insert(c);
          for (int64_t c : {int64_t(0), full, full + 1})
            if (c < n)
              next.insert(chunkSize(p, n, c));
        }
        extents = std::move(next);
      }
    }
  }
  std::vector<std::vector<int64_t>> bounds(axes);
  for (size_t a = 0; a < axes; ++a)
    bounds[a].assign(cuts[a].begin(), cuts[a].end());

  std::vector<ShapeClass> classes;
  std::map<std::vector<int64_t>, size_t> classOfShapes;
  std::vector<size_t> bucket(axes, 0);
  while (true) {
    std::vector<int64_t> coords(axes);
    SmallVector<int64_t> box;
    for (size_t a = 0; a < axes; ++a) {
      coords[a] = bounds[a][bucket[a]];
      box.push_back(bounds[a][bucket[a]]);
      box.push_back(bounds[a][bucket[a] + 1]);
    }
    std::vector<int64_t> shapes;
    for (DTensorType t : types)
      for (int64_t s : t.getLocalShape(coords))
        shapes.push_back(s);
    if (movesBetweenMeshes)
      shapes.insert(shapes.end(), coords.begin(), coords.end());
    // The role in each transfer: the coordinate when it sends or receives.
    for (TransferOp t : transfers) {
      int64_t c = coords[t.getAxis()];
      bool moves = llvm::is_contained(t.getSources(), c) ||
                   llvm::is_contained(t.getDestinations(), c);
      shapes.push_back(moves ? c : -1);
    }
    auto [it, fresh] = classOfShapes.emplace(shapes, classes.size());
    if (fresh)
      classes.push_back({coords, {}});
    classes[it->second].boxes.push_back(std::move(box));
    size_t a = axes;
    while (a > 0 && ++bucket[a - 1] + 1 >= bounds[a - 1].size())
      bucket[--a] = 0;
    if (a == 0)
      break;
  }
  for (ShapeClass &c : classes)
    mergeAdjacentBoxes(c.boxes);
  return classes;
}

struct LowerToRankPass
    : public dtorch::dtensor::impl::LowerToRankBase<LowerToRankPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> fns(module.getOps<func::FuncOp>());
    for (func::FuncOp fn : fns) {
      FailureOr<MeshAttr> mesh = functionMesh(fn);
      if (failed(mesh))
        return signalPassFailure();
      if (!*mesh)
        continue;
      if (!fn.getBody().hasOneBlock())
        return (void)(fn.emitOpError("SPMD lowering needs a single block"),
                      signalPassFailure());
      SmallVector<DTensorType> types;
      llvm::DenseSet<Type> seen;
      auto collect = [&](Type t) {
        if (auto dt = dyn_cast<DTensorType>(t); dt && seen.insert(t).second)
          types.push_back(dt);
      };
      for (Type t : fn.getFunctionType().getInputs())
        collect(t);
      fn.walk([&](Operation *op) {
        for (Type t : op->getResultTypes())
          collect(t);
      });
      SmallVector<TransferOp> transfers;
      fn.walk([&](TransferOp t) { transfers.push_back(t); });
      bool moves = false;
      fn.walk([&](Operation *op) { moves |= isa<SendOp, RecvOp>(op); });
      std::vector<ShapeClass> classes =
          shapeClasses(mesh->getShape(), types, transfers, moves);
      OpBuilder b(fn);
      auto meshAttr = b.getDenseI64ArrayAttr(mesh->getShape());
      FailureOr<DenseI64ArrayAttr> globalRanks = functionGlobalRanks(fn, *mesh);
      if (failed(globalRanks))
        return signalPassFailure();
      for (size_t k = 0; k < classes.size(); ++k) {
        RankLowering lowering(*mesh, classes[k].representative, b);
        SmallVector<Type> ins, outs;
        for (Type t : fn.getFunctionType().getInputs())
          ins.push_back(lowering.localType(t));
        for (Type t : fn.getFunctionType().getResults())
          outs.push_back(lowering.localType(t));
        b.setInsertionPoint(fn);
        auto rf = func::FuncOp::create(
            b, fn.getLoc(), (fn.getSymName() + "_class" + Twine(k)).str(),
            b.getFunctionType(ins, outs));
        SmallVector<Attribute> boxes;
        for (const SmallVector<int64_t> &box : classes[k].boxes)
          boxes.push_back(b.getDenseI64ArrayAttr(box));
        rf->setAttr(rank::kMeshAttrName, meshAttr);
        rf->setAttr(rank::kPositionsAttrName, b.getArrayAttr(boxes));
        if (*globalRanks)
          rf->setAttr(rank::kGlobalRanksAttrName, *globalRanks);
        Block *entry = rf.addEntryBlock();
        IRMapping map;
        for (auto [from, to] :
             llvm::zip(fn.getArguments(), entry->getArguments()))
          map.map(from, to);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(entry);
        for (Operation &op : fn.getBody().front())
          if (failed(lowering.lower(&op, map)))
            return signalPassFailure();
      }
      fn.erase();
    }
  }
};

} // namespace
