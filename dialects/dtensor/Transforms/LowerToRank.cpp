//===- LowerToRank.cpp - --dtensor-lower-to-rank (SPMD lowering) ---------===//
//
// Every function on dtensors becomes one function per rank of its mesh whose
// values are that rank's local pieces.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"
#include "dtorch/OpRegistry.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/TypeSwitch.h"

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

/// Lowers one function for one rank.
class RankLowering {
public:
  RankLowering(MeshAttr mesh, int64_t rank, OpBuilder &b)
      : meshShape(toVec(mesh.getShape())), coords(meshCoords(meshShape, rank)),
        b(b) {}

  Type localType(Type t) const {
    auto dt = dyn_cast<DTensorType>(t);
    if (!dt)
      return t;
    return RankedTensorType::get(dt.getLocalShape(coords), dt.getElementType());
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
  SmallVector<int64_t> group(int64_t axis) const {
    std::vector<int64_t> g = axisGroup(meshShape, coords, axis);
    return SmallVector<int64_t>(g.begin(), g.end());
  }

  std::vector<int64_t> meshShape;
  std::vector<int64_t> coords;
  OpBuilder &b;
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
  auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return lowerStep(op, map);

  std::vector<Placements> operandLayouts;
  for (Value v : op->getOperands())
    operandLayouts.push_back(cast<DTensorType>(v.getType()).getLayout());
  auto resultType = cast<DTensorType>(op->getResult(0).getType());
  if (!isLocalStrategy(ruleOp.getShardingRule(), operandLayouts,
                       resultType.getLayout(), meshShape))
    return op->emitOpError("placements are not a local strategy of its "
                           "sharding rule (run --dtensor-propagate-sharding)");

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
                named("offset", i64s(box.offset))});
        return success();
      })
      .Case<ConstantOp>([&](ConstantOp o) -> LogicalResult {
        auto dense = dyn_cast<DenseElementsAttr>(o.getValue());
        if (!dense)
          return o.emitOpError("needs a dense value to lower");
        // Cut this rank's box out of the global value at compile time.
        SmallVector<Attribute> all(dense.getValues<Attribute>());
        std::vector<int64_t> gshape = toVec(resultType.getShape());
        int64_t n = 1;
        for (int64_t s : box.shape)
          n *= s;
        SmallVector<Attribute> local;
        local.reserve(n);
        std::vector<int64_t> idx(box.shape.size(), 0);
        for (int64_t l = 0; l < n; ++l) {
          int64_t g = 0;
          for (size_t d = 0; d < gshape.size(); ++d)
            g = g * gshape[d] + box.offset[d] + idx[d];
          local.push_back(all[g]);
          for (int64_t d = (int64_t)idx.size() - 1; d >= 0; --d) {
            if (++idx[d] < box.shape[d])
              break;
            idx[d] = 0;
          }
        }
        auto localTy = cast<ShapedType>(localType(resultType));
        kernel(op, "constant", map,
               {named("value", DenseElementsAttr::get(localTy, local))});
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
        LocalBox inBox =
            localBox(toVec(inT.getShape()), meshShape, inT.getLayout(), coords);
        int64_t dim = o.getDim();
        bool sharded = inBox.shape[dim] != inT.getShape()[dim];
        for (const Placement &p : inT.getLayout())
          sharded |= p.isShard() && p.dim == dim;
        kernel(op, kernelName(op), map,
               {named("dim", o.getDimAttr()),
                named("offset", b.getI64IntegerAttr(inBox.offset[dim])),
                named("masked", b.getI64IntegerAttr(sharded))});
        return success();
      })
      .Case<TrilOp, TriuOp>([&](auto o) {
        size_t r = box.offset.size();
        kernel(op, kernelName(op), map,
               {named("diagonal", o.getDiagonalAttr()),
                named("row_offset", b.getI64IntegerAttr(box.offset[r - 2])),
                named("col_offset", b.getI64IntegerAttr(box.offset[r - 1]))});
        return success();
      })
      .Case<IotaOp>([&](IotaOp o) {
        kernel(op, kernelName(op), map,
               {named("dim", o.getDimAttr()), named("start", o.getStartAttr()),
                named("step", o.getStepAttr()),
                named("offset", i64s(box.offset))});
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
  auto sizes = [&](int64_t extent) {
    std::vector<int64_t> s = chunkSizes(extent, n);
    return b.getDenseI64ArrayAttr(s);
  };
  auto g = b.getDenseI64ArrayAttr(group(axis));
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
    k->setAttr("start", b.getI64IntegerAttr(
                            chunkOffset(inShape[dst.dim], n, coords[axis])));
    out = k;
  } else if (isa<ToPartialOp>(op)) {
    // P(sum): one rank of the group keeps the value, the others add zero.
    bool zero = dst.op == ReduceOp::Sum && coords[axis] != 0;
    auto k = rank::KernelOp::create(b, loc, outType,
                                    b.getStringAttr(zero ? "full" : "copy"),
                                    zero ? ValueRange{} : ValueRange{input});
    if (zero)
      k->setAttr("value", b.getF64FloatAttr(0.0));
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
      OpBuilder b(fn);
      for (int64_t r = 0; r < mesh->getNumDevices(); ++r) {
        RankLowering lowering(*mesh, r, b);
        SmallVector<Type> ins, outs;
        for (Type t : fn.getFunctionType().getInputs())
          ins.push_back(lowering.localType(t));
        for (Type t : fn.getFunctionType().getResults())
          outs.push_back(lowering.localType(t));
        b.setInsertionPoint(fn);
        auto rf = func::FuncOp::create(
            b, fn.getLoc(), (fn.getSymName() + "_rank" + Twine(r)).str(),
            b.getFunctionType(ins, outs));
        rf->setAttr(rank::kRankAttrName, b.getI64IntegerAttr(r));
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
