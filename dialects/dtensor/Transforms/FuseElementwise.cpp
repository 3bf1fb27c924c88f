//===- FuseElementwise.cpp - --rank-fuse-elementwise ---------------------===//
//
// Groups chains of fusible rank.kernel ops (rank/IR/FusibleKernels.h) of one
// shape into rank.fused ops, whose bodies the emitter compiles to native
// code. A group may mix element types (comparisons into i1, `where`, casts,
// integer `iota`s); its row reductions reduce one float type.
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

/// An `iota` the generator computes exactly as the kernel does: its
/// offset the same on every rank, and, for a float element type, every
/// value an integer that a double holds exactly (so that the kernel's
/// `start + step * position` in double needs no rounding).
bool iotaFits(rank::KernelOp op, RankedTensorType type) {
  auto dim = op->getAttrOfType<IntegerAttr>("dim");
  auto start = op->getAttrOfType<FloatAttr>("start");
  auto step = op->getAttrOfType<FloatAttr>("step");
  if (!dim || !start || !step || type.getRank() == 0)
    return false;
  int64_t d = dim.getInt();
  if (d < 0 || d >= type.getRank())
    return false;
  std::optional<int64_t> first = rank::constantIotaStart(op);
  if (!first || *first < 0)
    return false;
  double a = start.getValueAsDouble(), s = step.getValueAsDouble();
  if (std::trunc(a) != a || std::trunc(s) != s)
    return false;
  // Integer types: the kernel computes start + step * position in int64
  // (wrapping) when start and step are int64 values.
  constexpr double kInt64 = 9223372036854775808.0; // 2^63
  if (isa<IntegerType>(type.getElementType()))
    return a >= -kInt64 && a < kInt64 && s >= -kInt64 && s < kInt64;
  // Floats: every value must be an integer a double holds exactly.
  constexpr double kExact = 9007199254740992.0; // 2^53
  double last = static_cast<double>(*first + type.getDimSize(d));
  return std::fabs(a) + std::fabs(s) * last < kExact;
}

/// The result type of `op` when it can join a group, else null. Without
/// `mixedTypes`, only kernels whose operands and result share one element
/// type.
RankedTensorType fusibleResultType(Operation *op, bool mixedTypes) {
  auto kernel = dyn_cast<rank::KernelOp>(op);
  if (!kernel)
    return {};
  auto type = dyn_cast<RankedTensorType>(kernel.getResult().getType());
  // An empty piece (the class of ranks that hold nothing) computes
  // nothing: it keeps its kernels.
  if (!type || !type.hasStaticShape() || type.getNumElements() == 0)
    return {};
  const rank::FusibleKernel *entry = rank::lookupFusibleKernel(op);
  if (!entry || kernel.getInputs().size() != entry->numOperands)
    return {};
  if (!mixedTypes &&
      (entry->kind == rank::FusibleKind::Compare ||
       entry->kind == rank::FusibleKind::Select ||
       entry->kind == rank::FusibleKind::Cast || kernel.getKernel() == "iota"))
    return {};
  bool isIota = kernel.getKernel() == "iota";
  // Only the attributes the generator reads: a kernel configured otherwise
  // (mesh-dependent values, seeds) is left alone.
  for (NamedAttribute a : kernel->getAttrs()) {
    StringRef n = a.getName().getValue();
    if (n == "kernel" ||
        (!isIota && entry->kind == rank::FusibleKind::Creation && n == "value"))
      continue;
    if (isIota && (n == "dim" || n == "offset" || n == "start" || n == "step"))
      continue;
    return {};
  }
  for (auto [i, in] : llvm::enumerate(kernel.getInputs())) {
    auto t = dyn_cast<RankedTensorType>(in.getType());
    if (!t || !t.hasStaticShape() ||
        !rank::isFusibleElementType(t.getElementType()))
      return {};
    switch (entry->kind) {
    case rank::FusibleKind::Elementwise:
      if (t != type)
        return {};
      break;
    case rank::FusibleKind::Compare:
      // Both operands of one type and the result's shape.
      if (t.getShape() != type.getShape() ||
          t != kernel.getInputs()[0].getType())
        return {};
      break;
    case rank::FusibleKind::Select:
      // An i1 condition, then the result's type twice.
      if (i == 0 ? (t.getShape() != type.getShape() ||
                    !t.getElementType().isInteger(1))
                 : t != type)
        return {};
      break;
    case rank::FusibleKind::Cast:
      if (t.getShape() != type.getShape())
        return {};
      break;
    case rank::FusibleKind::Broadcast: {
      if (t.getElementType() != type.getElementType() ||
          t.getRank() > type.getRank())
        return {};
      int64_t lead = type.getRank() - t.getRank();
      for (int64_t d = 0; d < t.getRank(); ++d)
        if (t.getDimSize(d) != 1 &&
            t.getDimSize(d) != type.getDimSize(lead + d))
          return {};
      break;
    }
    case rank::FusibleKind::Creation:
      return {};
    }
  }
  if (entry->kind == rank::FusibleKind::Creation &&
      !(isIota ? iotaFits(kernel, type)
               : fullValueFits(kernel, type.getElementType())))
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
  const rank::FusibleKernel *entry = rank::lookupFusibleKernel(op);
  return entry && entry->kind != rank::FusibleKind::Creation &&
         entry->kind != rank::FusibleKind::Broadcast;
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

/// A group being collected: its ops in program order, its row shape (that
/// of `type`; members may have any element type), how many trailing dims
/// its reductions reduce (0: none yet) and the element type they reduce.
struct OpenGroup {
  SmallVector<Operation *> ops;
  llvm::SmallPtrSet<Operation *, 16> members;
  RankedTensorType type;
  int64_t reducedDims = 0;
  Type reducedElement;

  bool readBy(Operation *op) const {
    return llvm::any_of(op->getOperands(), [&](Value v) {
      return members.contains(v.getDefiningOp());
    });
  }
  void add(Operation *op) {
    ops.push_back(op);
    members.insert(op);
  }
};

bool sameShape(Type a, Type b) {
  auto x = dyn_cast_or_null<RankedTensorType>(a);
  auto y = dyn_cast_or_null<RankedTensorType>(b);
  return x && y && x.getShape() == y.getShape();
}

/// Replaces each `broadcast_to` of a `full` by a `full` of the broadcast's
/// type (the same value everywhere, converted alike), so that a constant
/// made at rank 0 and spread over a group is a constant of the group
/// rather than a kernel of its own; a `full` left unread is erased.
void foldBroadcastsOfConstants(func::FuncOp fn) {
  SmallVector<rank::KernelOp> broadcasts;
  for (Operation &op : fn.getBody().front())
    if (rank::isKernel(&op, "broadcast_to") && op.getNumOperands() == 1 &&
        rank::isKernel(op.getOperand(0).getDefiningOp(), "full"))
      broadcasts.push_back(cast<rank::KernelOp>(op));
  for (rank::KernelOp op : broadcasts) {
    auto full = cast<rank::KernelOp>(op.getInputs()[0].getDefiningOp());
    if (!llvm::all_of(full->getAttrs(), [](NamedAttribute a) {
          return a.getName() == "kernel" || a.getName() == "value";
        }))
      continue;
    OpBuilder b(op);
    Operation *folded = b.clone(*full);
    folded->getResult(0).setType(op.getResult().getType());
    folded->setLoc(op.getLoc());
    op.getResult().replaceAllUsesWith(folded->getResult(0));
    op.erase();
    if (full->use_empty())
      full.erase();
  }
}

/// At most this many groups of different shapes are collected at once (an
/// op of another shape that reads none of them starts one more rather than
/// ending them, so a rank-0 constant or a mask of another shape between
/// the ops of a chain does not cut it).
constexpr size_t kMaxOpenGroups = 4;

struct FuseElementwisePass
    : dtensor::impl::FuseElementwiseBase<FuseElementwisePass> {
  using FuseElementwiseBase::FuseElementwiseBase;

  /// True when `op` (a row reduction over `k` dims when k > 0, else a
  /// fusible kernel of result type `type`) may join `g`.
  bool joins(const OpenGroup &g, Operation *op, int64_t k,
             RankedTensorType type) const {
    if (g.ops.size() >= maxOps || !g.type)
      return false;
    if (k > 0) {
      auto in = cast<RankedTensorType>(op->getOperand(0).getType());
      if (!mixedTypes && in.getElementType() != g.type.getElementType())
        return false;
      return sameShape(in, g.type) &&
             (g.reducedDims == 0 ||
              (g.reducedDims == k && g.reducedElement == in.getElementType()));
    }
    RankedTensorType kept =
        rank::rowReducedType(g.type, g.reducedDims, /*keepdim=*/true);
    RankedTensorType dropped =
        rank::rowReducedType(g.type, g.reducedDims, /*keepdim=*/false);
    bool isBroadcast = rank::isKernel(op, "broadcast_to");
    // A broadcast of a value of the group must be a per-row value (kept
    // dims) spread over its row; another one (a per-row value with its dims
    // dropped, which numpy aligns with the last dims) starts a new group,
    // which reads the value from outside.
    if (isBroadcast && g.members.contains(op->getOperand(0).getDefiningOp()) &&
        !sameShape(op->getOperand(0).getType(), g.type) &&
        (g.reducedDims == 0 || !sameShape(op->getOperand(0).getType(), kept)))
      return false;
    // Without mixed types, one element type per group.
    if (!mixedTypes && type.getElementType() != g.type.getElementType())
      return false;
    if (sameShape(type, g.type))
      return true;
    // A per-row value of the group (a reduction's result, either form).
    return g.reducedDims > 0 && !isBroadcast &&
           (sameShape(type, kept) || sameShape(type, dropped));
  }

  void runOnOperation() override {
    func::FuncOp fn = getOperation();
    if (!fn.getBody().hasOneBlock())
      return;
    if (mixedTypes)
      foldBroadcastsOfConstants(fn);
    size_t maxOpen = mixedTypes ? kMaxOpenGroups : 1;
    SmallVector<SmallVector<Operation *>> groups;
    // The groups being collected, oldest first.
    SmallVector<OpenGroup> open;
    auto close = [&](size_t i) {
      OpenGroup &g = open[i];
      if (g.ops.size() >= 2 && llvm::any_of(g.ops, computes))
        groups.push_back(g.ops);
      open.erase(open.begin() + i);
    };
    for (Operation &op : fn.getBody().front()) {
      int64_t k = rowReductions ? rowReductionDims(&op) : 0;
      RankedTensorType type =
          k > 0 ? RankedTensorType() : fusibleResultType(&op, mixedTypes);
      if (k == 0 && !type) {
        // Not fusible: ends the groups it reads; a collective or the
        // return ends all.
        if (!isa<rank::KernelOp>(op)) {
          while (!open.empty())
            close(open.size() - 1);
          continue;
        }
        // A group's kernel runs at its last op, before its readers.
        for (size_t i = open.size(); i-- > 0;)
          if (open[i].readBy(&op))
            close(i);
        continue;
      }
      auto joined = llvm::find_if(
          open, [&](const OpenGroup &g) { return joins(g, &op, k, type); });
      if (joined != open.end()) {
        size_t index = joined - open.begin();
        // Groups it reads end first (the target's index shifts when one
        // before it ends).
        for (size_t i = open.size(); i-- > 0;)
          if (i != index && open[i].readBy(&op)) {
            close(i);
            if (i < index)
              --index;
          }
        OpenGroup *target = &open[index];
        if (k > 0) {
          target->reducedDims = k;
          target->reducedElement =
              cast<RankedTensorType>(op.getOperand(0).getType())
                  .getElementType();
        }
        target->add(&op);
        continue;
      }
      // A new group: after the groups it reads and any group of its shape
      // (which it could not join) end.
      RankedTensorType shape =
          k > 0 ? cast<RankedTensorType>(op.getOperand(0).getType()) : type;
      for (size_t i = open.size(); i-- > 0;)
        if (open[i].readBy(&op) || sameShape(open[i].type, shape))
          close(i);
      if (open.size() >= maxOpen)
        close(0);
      OpenGroup g;
      g.type = shape;
      if (k > 0) {
        g.reducedDims = k;
        g.reducedElement = shape.getElementType();
      }
      g.add(&op);
      open.push_back(std::move(g));
    }
    while (!open.empty())
      close(open.size() - 1);
    for (ArrayRef<Operation *> group : groups)
      fuseGroup(group);
  }
};

} // namespace
