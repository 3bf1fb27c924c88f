//===- FuseElementwise.cpp - --rank-fuse-elementwise ---------------------===//
//
// Groups chains of fusible rank.kernel ops (rank/IR/FusibleKernels.h) of one
// shape and element type into rank.fused ops, whose bodies the emitter
// compiles to native code.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"
#include "rank/IR/FusibleKernels.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <cmath>

namespace dtorch::dtensor {
#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;
using namespace dtorch;

namespace {

/// `full`'s value must convert exactly to an integer element type (the
/// kernel raises otherwise, which a fused loop cannot).
bool fullValueFits(rank::KernelOp op, Type elementType) {
  auto value = op->getAttrOfType<FloatAttr>("value");
  if (!value)
    return false;
  if (!isa<IntegerType>(elementType) || elementType.isInteger(1))
    return true;
  double v = value.getValueAsDouble();
  if (std::trunc(v) != v)
    return false;
  if (elementType.isInteger(32))
    return v >= -2147483648.0 && v <= 2147483647.0;
  return v >= -9223372036854775808.0 && v < 9223372036854775808.0;
}

/// The result type of `op` when it can join a group, else null.
RankedTensorType fusibleResultType(Operation *op) {
  auto kernel = dyn_cast<rank::KernelOp>(op);
  if (!kernel)
    return {};
  auto type = dyn_cast<RankedTensorType>(kernel.getResult().getType());
  // An empty piece (the class of ranks that hold nothing) computes
  // nothing: it keeps its kernels.
  if (!type || !type.hasStaticShape() || type.getNumElements() == 0)
    return {};
  const rank::FusibleKernel *entry =
      rank::lookupFusibleKernel(kernel.getKernel(), type.getElementType());
  if (!entry || kernel.getInputs().size() != entry->numOperands)
    return {};
  // Only the attributes the generator reads: a kernel configured otherwise
  // (mesh-dependent values, seeds) is left alone.
  for (NamedAttribute a : kernel->getAttrs())
    if (a.getName() != "kernel" &&
        !(entry->kind == rank::FusibleKind::Creation && a.getName() == "value"))
      return {};
  for (Value in : kernel.getInputs()) {
    auto t = dyn_cast<RankedTensorType>(in.getType());
    if (!t || !t.hasStaticShape() ||
        t.getElementType() != type.getElementType())
      return {};
    if (entry->kind == rank::FusibleKind::Elementwise &&
        t.getShape() != type.getShape())
      return {};
    if (entry->kind == rank::FusibleKind::Broadcast) {
      if (t.getRank() > type.getRank())
        return {};
      int64_t lead = type.getRank() - t.getRank();
      for (int64_t d = 0; d < t.getRank(); ++d)
        if (t.getDimSize(d) != 1 &&
            t.getDimSize(d) != type.getDimSize(lead + d))
          return {};
    }
  }
  if (entry->kind == rank::FusibleKind::Creation &&
      !fullValueFits(kernel, type.getElementType()))
    return {};
  return type;
}

/// Number of trailing dims a row reduction (`sum`, `max`, `min` over the
/// innermost dims of a float tensor) reduces, or 0 when `op` is not one the
/// generator computes per row.
int64_t rowReductionDims(Operation *op) {
  auto kernel = dyn_cast<rank::KernelOp>(op);
  if (!kernel || kernel.getInputs().size() != 1)
    return 0;
  StringRef name = kernel.getKernel();
  if (name != "sum" && name != "max" && name != "min")
    return 0;
  auto in = dyn_cast<RankedTensorType>(kernel.getInputs()[0].getType());
  auto out = dyn_cast<RankedTensorType>(kernel.getResult().getType());
  if (!in || !out || !in.hasStaticShape() || !out.hasStaticShape() ||
      in.getNumElements() == 0 || in.getElementType() != out.getElementType())
    return 0;
  Type element = in.getElementType();
  if (!(element.isF32() || element.isF64() || element.isF16() ||
        element.isBF16()))
    return 0;
  for (NamedAttribute a : kernel->getAttrs())
    if (a.getName() != "kernel" && a.getName() != "dims" &&
        a.getName() != "keepdim" && !(name == "sum" && a.getName() == "scale"))
      return 0;
  if (auto scale = kernel->getAttrOfType<FloatAttr>("scale"))
    if (!std::isfinite(scale.getValueAsDouble()))
      return 0;
  auto dims = kernel->getAttrOfType<DenseI64ArrayAttr>("dims");
  int64_t rank = in.getRank();
  if (!dims || dims.empty() || rank == 0)
    return 0;
  // The dims must be exactly the last dims.size() dims, each named once.
  llvm::SmallVector<bool> seen(rank, false);
  for (int64_t d : dims.asArrayRef()) {
    int64_t n = d < 0 ? d + rank : d;
    if (n < 0 || n >= rank || seen[n])
      return 0;
    seen[n] = true;
  }
  int64_t k = static_cast<int64_t>(dims.size());
  for (int64_t d = rank - k; d < rank; ++d)
    if (!seen[d])
      return 0;
  if (rank::rowReducedType(in, k, /*keepdim=*/true) == in)
    return 0; // reduces nothing (extent-1 dims): not worth a group
  auto keepdim = kernel->getAttrOfType<IntegerAttr>("keepdim");
  if (out != rank::rowReducedType(in, k, keepdim && keepdim.getInt() != 0))
    return 0;
  return k;
}

bool computes(Operation *op) {
  if (rowReductionDims(op) > 0)
    return true;
  const rank::FusibleKernel *entry = rank::lookupFusibleKernel(
      cast<rank::KernelOp>(op).getKernel(),
      cast<RankedTensorType>(op->getResult(0).getType()).getElementType());
  return entry && entry->kind == rank::FusibleKind::Elementwise;
}

/// Replaces the group's ops by one rank.fused at its last member.
void fuseGroup(ArrayRef<Operation *> group) {
  llvm::SmallPtrSet<Operation *, 16> members(group.begin(), group.end());
  llvm::SetVector<Value> inputs;
  SmallVector<Value> outputs;
  for (Operation *op : group) {
    for (Value v : op->getOperands())
      if (!members.contains(v.getDefiningOp()))
        inputs.insert(v);
    for (Value r : op->getResults())
      if (llvm::any_of(r.getUsers(), [&](Operation *user) {
            return !members.contains(user);
          }))
        outputs.push_back(r);
  }
  // A group whose values nobody reads is dead code: left as it is.
  if (outputs.empty())
    return;
  Operation *last = group.back();
  OpBuilder b(last);
  SmallVector<Type> resultTypes;
  for (Value v : outputs)
    resultTypes.push_back(v.getType());
  SmallVector<Location> locs;
  for (Operation *op : group)
    locs.push_back(op->getLoc());
  auto fused = rank::FusedOp::create(b, b.getFusedLoc(locs), resultTypes,
                                     inputs.getArrayRef());
  Block *body = new Block();
  fused.getBody().push_back(body);
  IRMapping map;
  for (Value in : inputs)
    map.map(in, body->addArgument(in.getType(), in.getLoc()));
  OpBuilder inner = OpBuilder::atBlockEnd(body);
  for (Operation *op : group)
    inner.clone(*op, map);
  SmallVector<Value> yielded;
  for (Value v : outputs)
    yielded.push_back(map.lookup(v));
  rank::YieldOp::create(inner, fused.getLoc(), yielded);
  for (auto [old, now] : llvm::zip(outputs, fused.getResults()))
    old.replaceAllUsesWith(now);
  for (Operation *op : llvm::reverse(group))
    op->erase();
}

struct FuseElementwisePass
    : dtensor::impl::FuseElementwiseBase<FuseElementwisePass> {
  using FuseElementwiseBase::FuseElementwiseBase;
  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!fn.getBody().hasOneBlock())
      return;
    SmallVector<SmallVector<Operation *>> groups;
    SmallVector<Operation *> current;
    llvm::SmallPtrSet<Operation *, 16> inCurrent;
    // The group's row type, and how many trailing dims its reductions
    // reduce (0: no reduction yet).
    RankedTensorType currentType;
    int64_t reducedDims = 0;
    auto close = [&] {
      if (current.size() >= 2 && llvm::any_of(current, computes))
        groups.push_back(current);
      current.clear();
      inCurrent.clear();
      currentType = {};
      reducedDims = 0;
    };
    auto readsGroup = [&](Operation *op) {
      return llvm::any_of(op->getOperands(), [&](Value v) {
        return inCurrent.contains(v.getDefiningOp());
      });
    };
    auto add = [&](Operation *op) {
      current.push_back(op);
      inCurrent.insert(op);
    };
    // A per-row value of the group (a reduction's result, either form).
    auto isReducedType = [&](Type t) {
      return reducedDims > 0 &&
             (t == rank::rowReducedType(currentType, reducedDims, true) ||
              t == rank::rowReducedType(currentType, reducedDims, false));
    };
    for (Operation &op : fn.getBody().front()) {
      bool full = current.size() >= maxOps;
      if (int64_t k = rowReductions ? rowReductionDims(&op) : 0) {
        auto in = cast<RankedTensorType>(op.getOperand(0).getType());
        if (full || !currentType || in != currentType ||
            (reducedDims != 0 && reducedDims != k))
          close();
        if (!currentType)
          currentType = in;
        reducedDims = k;
        add(&op);
        continue;
      }
      RankedTensorType type = fusibleResultType(&op);
      // A broadcast of a value of the group must be a per-row value (kept
      // dims) spread over its row; another one (a per-row value with its
      // dims dropped, which numpy aligns with the last dims) starts a new
      // group, which reads the value from outside.
      bool foreignBroadcast =
          type && rank::isKernel(&op, "broadcast_to") &&
          inCurrent.contains(op.getOperand(0).getDefiningOp()) &&
          op.getOperand(0).getType() != currentType &&
          (reducedDims == 0 ||
           op.getOperand(0).getType() !=
               rank::rowReducedType(currentType, reducedDims, true));
      if (type && currentType && !full && !foreignBroadcast &&
          (type == currentType ||
           (isReducedType(type) && !rank::isKernel(&op, "broadcast_to")))) {
        add(&op);
        continue;
      }
      if (type) {
        // Another shape or element type: a new group starts here.
        close();
        currentType = type;
        add(&op);
        continue;
      }
      // Not fusible: ends the group when it reads a value of it, or when it
      // is a collective or the return.
      if (readsGroup(&op) || !isa<rank::KernelOp>(op))
        close();
    }
    close();
    for (ArrayRef<Operation *> group : groups)
      fuseGroup(group);
  }
};

} // namespace
