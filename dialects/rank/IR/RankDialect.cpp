//===- RankDialect.cpp - the per-rank dialect ----------------------------===//
#include "rank/IR/Rank.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

#include <algorithm>

using namespace mlir;
using namespace dtorch::rank;

#include "rank/IR/RankOpsDialect.cpp.inc"

#define GET_OP_CLASSES
#include "rank/IR/RankOps.cpp.inc"

void RankDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "rank/IR/RankOps.cpp.inc"
      >();
}

LogicalResult KernelOp::verify() {
  if (getKernel().empty())
    return emitOpError("needs a kernel name");
  return success();
}

namespace {

/// Checks the group and returns this program's position in it (-1 when the
/// enclosing function carries no rank).
FailureOr<int64_t> verifyGroup(Operation *op, ArrayRef<int64_t> group) {
  if (group.empty())
    return op->emitOpError("group must not be empty");
  // Sorted, not pairwise: a group of a 4,096-rank mesh axis is checked in
  // every one of its 4,096 functions.
  SmallVector<int64_t> sorted(group);
  llvm::sort(sorted);
  if (auto twice = std::adjacent_find(sorted.begin(), sorted.end());
      twice != sorted.end())
    return op->emitOpError("rank ") << *twice << " appears twice in the group";
  auto fn = op->getParentOfType<func::FuncOp>();
  auto rankAttr = fn ? fn->getAttrOfType<IntegerAttr>(kRankAttrName) : nullptr;
  if (!rankAttr)
    return -1;
  auto it = llvm::find(group, rankAttr.getInt());
  if (it == group.end())
    return op->emitOpError("group does not contain this program's rank ")
           << rankAttr.getInt();
  return it - group.begin();
}

LogicalResult verifyReduce(Operation *op, StringRef reduce) {
  if (reduce != "sum" && reduce != "avg" && reduce != "max" && reduce != "min")
    return op->emitOpError("unknown reduction \"")
           << reduce << "\" (expected sum, avg, max or min)";
  return success();
}

/// `sizes` has one entry per member and, when the member is known, matches
/// `pieceExtent`; `fullExtent` is their sum.
LogicalResult verifyPieces(Operation *op, ArrayRef<int64_t> group,
                           ArrayRef<int64_t> sizes, int64_t member,
                           int64_t pieceExtent, int64_t fullExtent,
                           StringRef what) {
  if (sizes.size() != group.size())
    return op->emitOpError(what) << " has " << sizes.size()
                                 << " entries for a group of " << group.size();
  int64_t total = 0;
  for (int64_t s : sizes)
    total += s;
  if (total != fullExtent)
    return op->emitOpError(what)
           << " add up to " << total << ", expected " << fullExtent;
  if (member >= 0 && sizes[member] != pieceExtent)
    return op->emitOpError(what)
           << "[" << member << "] is " << sizes[member]
           << " but this rank's piece has extent " << pieceExtent;
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
  if (failed(verifyGroup(*this, getGroup())) ||
      failed(verifyReduce(*this, getReduce())))
    return failure();
  if (getInput().getType() != getResult().getType())
    return emitOpError("input and result types must match");
  return success();
}

LogicalResult AllGatherOp::verify() {
  FailureOr<int64_t> member = verifyGroup(*this, getGroup());
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (failed(member) || failed(verifySameExceptDim(*this, in, out, getDim())))
    return failure();
  return verifyPieces(*this, getGroup(), getSizes(), *member,
                      in.getDimSize(getDim()), out.getDimSize(getDim()),
                      "sizes");
}

LogicalResult ReduceScatterOp::verify() {
  FailureOr<int64_t> member = verifyGroup(*this, getGroup());
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (failed(member) || failed(verifyReduce(*this, getReduce())) ||
      failed(verifySameExceptDim(*this, in, out, getDim())))
    return failure();
  return verifyPieces(*this, getGroup(), getSizes(), *member,
                      out.getDimSize(getDim()), in.getDimSize(getDim()),
                      "sizes");
}

LogicalResult AllToAllOp::verify() {
  FailureOr<int64_t> member = verifyGroup(*this, getGroup());
  if (failed(member))
    return failure();
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  int64_t s = getSplitDim(), c = getConcatDim();
  if (in.getRank() != out.getRank() ||
      in.getElementType() != out.getElementType())
    return emitOpError("input and result must share element type and rank");
  if (s < 0 || s >= in.getRank() || c < 0 || c >= in.getRank() || s == c)
    return emitOpError(
        "split_dim and concat_dim must be distinct dims in range");
  if (failed(verifyPieces(*this, getGroup(), getSplitSizes(), -1, 0,
                          in.getDimSize(s), "split_sizes")) ||
      failed(verifyPieces(*this, getGroup(), getConcatSizes(), -1, 0,
                          out.getDimSize(c), "concat_sizes")))
    return failure();
  if (*member >= 0 && (getSplitSizes()[*member] != out.getDimSize(s) ||
                       getConcatSizes()[*member] != in.getDimSize(c)))
    return emitOpError(
        "this rank's piece sizes do not match its input and result");
  return success();
}
