//===- RankDialect.cpp - the per-rank dialect ----------------------------===//
#include "rank/IR/Rank.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace dtorch::rank;

#include "rank/IR/RankOpsDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "rank/IR/RankAttrs.cpp.inc"

#define GET_OP_CLASSES
#include "rank/IR/RankOps.cpp.inc"

void RankDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "rank/IR/RankOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "rank/IR/RankAttrs.cpp.inc"
#include <set>
      >();
}

namespace {

/// The mesh shape and position boxes of the function around `op` (empty when
/// it carries none).
struct ClassInfo {
  ArrayRef<int64_t> mesh;
  SmallVector<ArrayRef<int64_t>> boxes;
};

ClassInfo classInfoOf(Operation *op) {
  ClassInfo info;
  auto fn = op->getParentOfType<func::FuncOp>();
  if (!fn)
    return info;
  if (auto mesh = fn->getAttrOfType<DenseI64ArrayAttr>(kMeshAttrName))
    info.mesh = mesh.asArrayRef();
  if (auto boxes = fn->getAttrOfType<ArrayAttr>(kPositionsAttrName))
    for (Attribute b : boxes)
      if (auto box = dyn_cast<DenseI64ArrayAttr>(b))
        info.boxes.push_back(box.asArrayRef());
  return info;
}

LogicalResult verifyMeshAxis(Operation *op, const ClassInfo &info,
                             int64_t axis) {
  if (axis < 0)
    return op->emitOpError("mesh axis ") << axis << " is negative";
  if (!info.mesh.empty() && axis >= (int64_t)info.mesh.size())
    return op->emitOpError("mesh axis ")
           << axis << " is out of range for a mesh of rank "
           << info.mesh.size();
  return success();
}

} // namespace

LogicalResult RankDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kArenaOffsetAttrName) {
    if (auto perResult = dyn_cast<DenseI64ArrayAttr>(attr.getValue())) {
      if (static_cast<int64_t>(perResult.size()) != op->getNumResults())
        return op->emitOpError("'")
               << name << "' has " << perResult.size() << " entries for "
               << op->getNumResults() << " results";
      for (int64_t offset : perResult.asArrayRef())
        if (offset < -1 || (offset >= 0 && offset % 64 != 0))
          return op->emitOpError("'")
                 << name << "' entries must be -1 or multiples of 64";
      return success();
    }
  }
  if (name == kArenaOffsetAttrName || name == kArenaBytesAttrName) {
    auto bytes = dyn_cast<IntegerAttr>(attr.getValue());
    if (!bytes || !bytes.getType().isInteger(64) || bytes.getInt() < 0)
      return op->emitOpError("'") << name << "' must be a non-negative i64";
    if (name == kArenaOffsetAttrName && bytes.getInt() % 64 != 0)
      return op->emitOpError("'") << name << "' must be a multiple of 64";
    return success();
  }
  if (name == kMeshAttrName) {
    auto mesh = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!mesh || mesh.empty())
      return op->emitOpError("'") << name << "' must be a non-empty i64 array";
    for (int64_t s : mesh.asArrayRef())
      if (s < 1)
        return op->emitOpError("'") << name << "' has an extent below 1";
    return success();
  }
  if (name == kPositionsAttrName) {
    auto mesh = op->getAttrOfType<DenseI64ArrayAttr>(kMeshAttrName);
    if (!mesh)
      return op->emitOpError("'")
             << name << "' needs '" << kMeshAttrName << "'";
    auto boxes = dyn_cast<ArrayAttr>(attr.getValue());
    if (!boxes || boxes.empty())
      return op->emitOpError("'") << name << "' must be a non-empty array";
    for (Attribute b : boxes) {
      auto box = dyn_cast<DenseI64ArrayAttr>(b);
      if (!box || box.size() != 2 * mesh.size())
        return op->emitOpError("'")
               << name << "' boxes need " << 2 * mesh.size()
               << " entries (lo, hi per mesh axis)";
      for (int64_t a = 0; a < mesh.size(); ++a) {
        int64_t lo = box[2 * a], hi = box[2 * a + 1];
        if (lo < 0 || lo >= hi || hi > mesh[a])
          return op->emitOpError("'")
                 << name << "' box range [" << lo << ", " << hi << ") of axis "
                 << a << " is not inside [0, " << mesh[a] << ")";
      }
    }
    return success();
  }
  if (name == kGlobalRanksAttrName) {
    auto mesh = op->getAttrOfType<DenseI64ArrayAttr>(kMeshAttrName);
    auto ranks = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!mesh || !ranks)
      return op->emitOpError("'") << name << "' must be an i64 array beside '"
                                  << kMeshAttrName << "'";
    int64_t positions = 1;
    for (int64_t s : mesh.asArrayRef())
      positions *= s;
    if (ranks.size() != positions)
      return op->emitOpError("'")
             << name << "' has " << ranks.size() << " ranks for a mesh of "
             << positions << " positions";
    std::set<int64_t> seen;
    for (int64_t r : ranks.asArrayRef())
      if (r < 0 || !seen.insert(r).second)
        return op->emitOpError("'")
               << name << "' has a negative or repeated rank " << r;
    return success();
  }
  if (name == kOutputDonorsAttrName) {
    // Per result of the function, an argument number or -1, each argument
    // named at most once (--rank-mark-donations).
    auto donors = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    auto fn = dyn_cast<FunctionOpInterface>(op);
    if (!donors || !fn)
      return op->emitOpError("'")
             << name << "' must be an i64 array on a function";
    if (donors.size() != static_cast<int64_t>(fn.getNumResults()))
      return op->emitOpError("'")
             << name << "' has " << donors.size() << " entries for "
             << fn.getNumResults() << " results";
    std::set<int64_t> seen;
    for (int64_t d : donors.asArrayRef())
      if (d != -1 &&
          (d < 0 || d >= static_cast<int64_t>(fn.getNumArguments()) ||
           !seen.insert(d).second))
        return op->emitOpError("'") << name << "' names argument " << d
                                    << ", which is out of range or named twice";
    return success();
  }
  if (name == kScheduledAttrName) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError("'") << name << "' must be a unit attribute";
    return success();
  }
  return op->emitOpError("unknown rank dialect attribute '") << name << "'";
}

LogicalResult KernelOp::verify() {
  if (getKernel().empty())
    return emitOpError("needs a kernel name");
  ClassInfo info = classInfoOf(*this);
  for (NamedAttribute a : (*this)->getAttrs()) {
    if (auto box = dyn_cast<BoxOffsetAttr>(a.getValue())) {
      int64_t rank = box.getGlobalShape().size();
      if (!info.mesh.empty() &&
          box.getShardDims().size() != (int64_t)info.mesh.size())
        return emitOpError("'")
               << a.getName().getValue() << "' has "
               << box.getShardDims().size() << " shard_dims for a mesh of rank "
               << info.mesh.size();
      for (int64_t d : box.getShardDims().asArrayRef())
        if (d < -1 || d >= rank)
          return emitOpError("'") << a.getName().getValue() << "' shards dim "
                                  << d << " of a rank-" << rank << " tensor";
      if (box.getDim() < -1 || box.getDim() >= rank)
        return emitOpError("'") << a.getName().getValue() << "' dim "
                                << box.getDim() << " is out of range";
    } else if (auto chunk = dyn_cast<ChunkOffsetAttr>(a.getValue())) {
      if (failed(verifyMeshAxis(*this, info, chunk.getAxis())))
        return failure();
      if (chunk.getExtent() < 0)
        return emitOpError("'")
               << a.getName().getValue() << "' has a negative extent";
    } else if (auto coord = dyn_cast<MeshCoordAttr>(a.getValue())) {
      if (failed(verifyMeshAxis(*this, info, coord.getAxis())))
        return failure();
    }
  }
  return success();
}

namespace {

LogicalResult verifyReduce(Operation *op, StringRef reduce) {
  if (reduce != "sum" && reduce != "avg" && reduce != "max" && reduce != "min")
    return op->emitOpError("unknown reduction \"")
           << reduce << "\" (expected sum, avg, max or min)";
  return success();
}

/// `sizes` has one entry per rank of the axis and adds up to `fullExtent`;
/// when the function says which positions run it, the entry of each of
/// their coordinates along the axis is `pieceExtent` (every rank of a class
/// holds a piece of the class's shape).
LogicalResult verifyPieces(Operation *op, const ClassInfo &info, int64_t axis,
                           ArrayRef<int64_t> sizes, int64_t pieceExtent,
                           int64_t fullExtent, StringRef what,
                           bool checkMember = true) {
  if (failed(verifyMeshAxis(op, info, axis)))
    return failure();
  if (!info.mesh.empty() && (int64_t)sizes.size() != info.mesh[axis])
    return op->emitOpError(what)
           << " has " << sizes.size() << " entries for mesh axis " << axis
           << " of " << info.mesh[axis] << " ranks";
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return op->emitOpError(what) << " has a negative entry";
    total += s;
  }
  if (total != fullExtent)
    return op->emitOpError(what)
           << " add up to " << total << ", expected " << fullExtent;
  if (!checkMember || info.mesh.empty())
    return success();
  for (ArrayRef<int64_t> box : info.boxes) {
    if ((int64_t)box.size() != 2 * (int64_t)info.mesh.size())
      continue; // reported by the function attribute's verifier
    for (int64_t c = box[2 * axis]; c < box[2 * axis + 1]; ++c)
      if (c < (int64_t)sizes.size() && sizes[c] != pieceExtent)
        return op->emitOpError(what)
               << "[" << c << "] is " << sizes[c]
               << " but this program's piece has extent " << pieceExtent;
  }
  return success();
}

LogicalResult verifySameExceptDim(Operation *op, RankedTensorType a,
                                  RankedTensorType b, int64_t dim) {
  if (a.getElementType() != b.getElementType() || a.getRank() != b.getRank())
    return op->emitOpError("input and result must share element type and rank");
  if (dim < 0 || dim >= a.getRank())
    return op->emitOpError("dim ") << dim << " is out of range";
  for (int64_t d = 0; d < a.getRank(); ++d)
    if (d != dim && a.getDimSize(d) != b.getDimSize(d))
      return op->emitOpError("input and result differ in dim ") << d;
  return success();
}

} // namespace

LogicalResult AllReduceOp::verify() {
  if (failed(verifyMeshAxis(*this, classInfoOf(*this), getAxis())) ||
      failed(verifyReduce(*this, getReduce())))
    return failure();
  if (getInput().getType() != getResult().getType())
    return emitOpError("input and result types must match");
  return success();
}

LogicalResult AllGatherOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (failed(verifySameExceptDim(*this, in, out, getDim())))
    return failure();
  return verifyPieces(*this, classInfoOf(*this), getAxis(), getSizes(),
                      in.getDimSize(getDim()), out.getDimSize(getDim()),
                      "sizes");
}

LogicalResult ReduceScatterOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (failed(verifyReduce(*this, getReduce())) ||
      failed(verifySameExceptDim(*this, in, out, getDim())))
    return failure();
  return verifyPieces(*this, classInfoOf(*this), getAxis(), getSizes(),
                      out.getDimSize(getDim()), in.getDimSize(getDim()),
                      "sizes");
}

LogicalResult AllToAllOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  int64_t s = getSplitDim(), c = getConcatDim();
  if (in.getRank() != out.getRank() ||
      in.getElementType() != out.getElementType())
    return emitOpError("input and result must share element type and rank");
  if (s < 0 || s >= in.getRank() || c < 0 || c >= in.getRank() || s == c)
    return emitOpError(
        "split_dim and concat_dim must be distinct dims in range");
  ClassInfo info = classInfoOf(*this);
  return success(succeeded(verifyPieces(*this, info, getAxis(), getSplitSizes(),
                                        out.getDimSize(s), in.getDimSize(s),
                                        "split_sizes")) &&
                 succeeded(verifyPieces(*this, info, getAxis(),
                                        getConcatSizes(), in.getDimSize(c),
                                        out.getDimSize(c), "concat_sizes")));
}

LogicalResult AllToAllVOp::verify() {
  ClassInfo info = classInfoOf(*this);
  if (failed(verifyMeshAxis(*this, info, getAxis())))
    return failure();
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (in.getRank() < 1 || in.getRank() != out.getRank() ||
      in.getElementType() != out.getElementType())
    return emitOpError("input and result must share element type and rank "
                       "(at least 1: the rows)");
  for (int64_t d = 1; d < in.getRank(); ++d)
    if (in.getDimSize(d) != out.getDimSize(d))
      return emitOpError("input and result differ in dim ")
             << d << "; only the rows (dim 0) may differ";
  std::optional<int64_t> segmentRows = getSegmentRows();
  for (auto [what, value] :
       {std::pair<StringRef, Value>{"send_counts", getSendCounts()},
        {"recv_counts", getRecvCounts()}}) {
    auto t = cast<RankedTensorType>(value.getType());
    if (t.getRank() != 1 || !t.getElementType().isInteger(64))
      return emitOpError(what) << " must be a 1-D i64 tensor, got " << t;
    if (info.mesh.empty())
      continue;
    int64_t n = info.mesh[getAxis()];
    if (!segmentRows && t.getDimSize(0) != n)
      return emitOpError(what)
             << " has " << t.getDimSize(0) << " entries for the " << n
             << " coordinates of mesh axis " << getAxis();
    if (segmentRows && t.getDimSize(0) % n != 0)
      return emitOpError(what)
             << " has " << t.getDimSize(0) << " entries, not a multiple of the "
             << n << " coordinates of mesh axis " << getAxis();
  }
  if (segmentRows) {
    auto counts = cast<RankedTensorType>(getSendCounts().getType());
    if (*segmentRows < 0)
      return emitOpError("segment_rows ") << *segmentRows << " is negative";
    if (in != out || counts != getRecvCounts().getType())
      return emitOpError("with segment_rows, input and result (and the two "
                         "count tensors) must have the same type");
    if (in.getDimSize(0) != counts.getDimSize(0) * *segmentRows)
      return emitOpError("with segment_rows ")
             << *segmentRows << ", the " << counts.getDimSize(0)
             << " segments need " << counts.getDimSize(0) * *segmentRows
             << " rows, the input has " << in.getDimSize(0);
  }
  return success();
}

namespace {

/// A point-to-point op's peer: a coordinate of `axis` other than the one of
/// every position running the function (when the function says which).
LogicalResult verifyPeer(Operation *op, const ClassInfo &info, int64_t axis,
                         int64_t peer, StringRef what) {
  if (failed(verifyMeshAxis(op, info, axis)))
    return failure();
  if (peer < 0)
    return op->emitOpError(what) << " " << peer << " is negative";
  if (info.mesh.empty())
    return success();
  if (peer >= info.mesh[axis])
    return op->emitOpError(what)
           << " " << peer << " is out of range for mesh axis " << axis << " of "
           << info.mesh[axis] << " ranks";
  for (ArrayRef<int64_t> box : info.boxes) {
    if ((int64_t)box.size() != 2 * (int64_t)info.mesh.size())
      continue; // reported by the function attribute's verifier
    int64_t lo = box[2 * axis], hi = box[2 * axis + 1];
    if (hi - lo != 1)
      return op->emitOpError("runs at coordinates [")
             << lo << ", " << hi << ") of mesh axis " << axis
             << "; point to point needs one coordinate per program";
    if (lo == peer)
      return op->emitOpError(what)
             << " " << peer << " is the program's own coordinate on axis "
             << axis;
  }
  return success();
}

LogicalResult verifyTag(Operation *op, int64_t tag) {
  if (tag < 0)
    return op->emitOpError("tag ") << tag << " is negative";
  return success();
}

} // namespace

/// Without an axis, `peer` is a global rank.
LogicalResult verifyGlobalPeer(Operation *op, int64_t peer) {
  if (peer < 0)
    return op->emitOpError("peer rank ") << peer << " is negative";
  return success();
}

LogicalResult SendOp::verify() {
  if (failed(verifyTag(*this, getTag())))
    return failure();
  if (!getAxis())
    return verifyGlobalPeer(*this, getPeer());
  return verifyPeer(*this, classInfoOf(*this), *getAxis(), getPeer(), "peer");
}

LogicalResult RecvOp::verify() {
  if (failed(verifyTag(*this, getTag())))
    return failure();
  if (!getAxis())
    return verifyGlobalPeer(*this, getPeer());
  return verifyPeer(*this, classInfoOf(*this), *getAxis(), getPeer(), "peer");
}

LogicalResult BatchSendRecvOp::verify() {
  if (failed(verifyTag(*this, getTag())))
    return failure();
  if (getSendPeers().size() != getInputs().size())
    return emitOpError("has ") << getSendPeers().size() << " send_peers for "
                               << getInputs().size() << " inputs";
  if (getRecvPeers().size() != getResults().size())
    return emitOpError("has ") << getRecvPeers().size() << " recv_peers for "
                               << getResults().size() << " results";
  if (getInputs().empty() && getResults().empty())
    return emitOpError("sends and receives nothing");
  ClassInfo info = classInfoOf(*this);
  for (int64_t peer : getSendPeers())
    if (failed(verifyPeer(*this, info, getAxis(), peer, "send peer")))
      return failure();
  for (int64_t peer : getRecvPeers())
    if (failed(verifyPeer(*this, info, getAxis(), peer, "recv peer")))
      return failure();
  return success();
}

LogicalResult FusedOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError("body has ")
           << body.getNumArguments() << " arguments for " << getInputs().size()
           << " inputs";
  for (auto [arg, input] : llvm::zip(body.getArguments(), getInputs()))
    if (arg.getType() != input.getType())
      return emitOpError("body argument type ")
             << arg.getType() << " differs from input type " << input.getType();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError("body must end with rank.yield");
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yields ")
           << yield.getValues().size()
           << " value(s) whose types differ from the results";
  for (Operation &op : body.without_terminator())
    if (!isa<KernelOp>(op))
      return op.emitOpError("cannot be inside rank.fused (only rank.kernel)");
  return success();
}

std::optional<OptimizerGroups> dtorch::rank::optimizerGroupsOf(Operation *op) {
  if (auto adam = dyn_cast<FusedAdamOp>(op))
    return OptimizerGroups{2, adam.getNumParams(), adam.getTensorsPerParam(),
                           adam.getTensorsPerParam() - 1};
  if (auto sgd = dyn_cast<FusedSgdOp>(op))
    return OptimizerGroups{1, sgd.getNumParams(), sgd.getTensorsPerParam(),
                           sgd.getResultsPerParam()};
  return std::nullopt;
}

unsigned dtorch::rank::replacedInputOf(Operation *op, unsigned index) {
  if (auto adam = dyn_cast<FusedAdamOp>(op))
    return adam.getReplacedInput(index);
  return cast<FusedSgdOp>(op).getReplacedInput(index);
}

namespace {

/// The checks of a multi-tensor optimizer update shared by its ops: the
/// leading 0-d f64 inputs (`scalarNames`), then whole groups of tensors
/// per parameter, and one type per parameter's group and results.
LogicalResult verifyOptimizerGroups(Operation *op, const OptimizerGroups &g,
                                    ArrayRef<StringRef> scalarNames) {
  int64_t numTensors =
      static_cast<int64_t>(op->getNumOperands()) - g.scalarInputs;
  if (numTensors <= 0 || numTensors % g.inputsPerParam != 0) {
    InFlightDiagnostic d = op->emitOpError("expects ");
    for (StringRef name : scalarNames)
      d << name << (name == scalarNames.back() ? " and " : ", ");
    return d << g.inputsPerParam << " tensors per parameter, got "
             << op->getNumOperands() << " inputs";
  }
  for (unsigned k = 0; k < g.scalarInputs; ++k) {
    auto t = cast<RankedTensorType>(op->getOperand(k).getType());
    if (t.getRank() != 0 || !t.getElementType().isF64())
      return op->emitOpError(scalarNames[k])
             << " must be a 0-d f64 tensor, got " << t;
  }
  int64_t n = g.numParams;
  if (static_cast<int64_t>(op->getNumResults()) != g.resultsPerParam * n)
    return op->emitOpError("expects ")
           << g.resultsPerParam * n << " results for " << n
           << " parameters, got " << op->getNumResults();
  for (int64_t i = 0; i < n; ++i) {
    Type param = op->getOperand(g.input(0, i)).getType();
    if (!isa<FloatType>(cast<RankedTensorType>(param).getElementType()))
      return op->emitOpError("parameter ") << i << " must be a float tensor";
    for (int64_t k = 1; k < g.inputsPerParam; ++k)
      if (op->getOperand(g.input(k, i)).getType() != param)
        return op->emitOpError("input ")
               << g.input(k, i) << " must have parameter " << i << "'s type "
               << param;
    for (int64_t k = 0; k < g.resultsPerParam; ++k)
      if (op->getResult(k * n + i).getType() != param)
        return op->emitOpError("result ")
               << k * n + i << " must have parameter " << i << "'s type "
               << param;
  }
  return success();
}

} // namespace

LogicalResult FusedAdamOp::verify() {
  return verifyOptimizerGroups(*this, *optimizerGroupsOf(*this),
                               {"step", "lr"});
}

LogicalResult FusedSgdOp::verify() {
  for (int64_t flag : {getNesterov(), getMaximize(), getFirstStep()})
    if (flag != 0 && flag != 1)
      return emitOpError("nesterov, maximize and first_step must be 0 or 1");
  if (!hasMomentum() && (getFirstStep() || getNesterov()))
    return emitOpError("first_step and nesterov need a momentum");
  return verifyOptimizerGroups(*this, *optimizerGroupsOf(*this), {"lr"});
}

int64_t dtorch::rank::arenaOffsetOf(mlir::Operation *op, unsigned index) {
  mlir::Attribute attr = op->getDiscardableAttr(kArenaOffsetAttrName);
  if (auto perResult = mlir::dyn_cast_or_null<mlir::DenseI64ArrayAttr>(attr))
    return index < perResult.size() ? perResult[index] : -1;
  if (auto single = mlir::dyn_cast_or_null<mlir::IntegerAttr>(attr))
    return index == 0 ? single.getInt() : -1;
  return -1;
}
