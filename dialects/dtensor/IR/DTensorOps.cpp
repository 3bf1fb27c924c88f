//===- DTensorOps.cpp - verifiers, sharding rules and folders ------------===//
//
// Each op's verifier and sharding rule sit together here, grouped by op
// family; the rule says how the op may be split (see ShardingRule.h).
//
//===----------------------------------------------------------------------===//
#include "dtensor/IR/DTensor.h"

#include "dtorch/OpRules.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

#include <set>

using namespace mlir;
using namespace dtorch;
using namespace dtorch::dtensor;

#include "dtensor/IR/ShardingRuleInterface.cpp.inc"

#define GET_OP_CLASSES
#include "dtensor/IR/DTensorOps.cpp.inc"

namespace {

DTensorType typeOf(Value v) { return cast<DTensorType>(v.getType()); }

std::vector<int64_t> toVec(ArrayRef<int64_t> a) { return {a.begin(), a.end()}; }

/// Every operand and the result live on the result's mesh.
LogicalResult verifySameMesh(Operation *op) {
  MeshAttr mesh = typeOf(op->getResult(0)).getMesh();
  for (Value v : op->getOperands())
    if (typeOf(v).getMesh() != mesh)
      return op->emitOpError(
                 "operands and result must be on the same mesh, got ")
             << typeOf(v).getMesh() << " and " << mesh;
  return success();
}

LogicalResult verifySameShapeAndElementType(Operation *op) {
  DTensorType res = typeOf(op->getResult(0));
  for (Value v : op->getOperands()) {
    DTensorType t = typeOf(v);
    if (t.getShape() != res.getShape())
      return op->emitOpError("operand shape [")
             << t.getShape() << "] does not match result shape ["
             << res.getShape() << "]";
    if (t.getElementType() != res.getElementType())
      return op->emitOpError("operand element type ")
             << t.getElementType() << " does not match result element type "
             << res.getElementType();
  }
  return success();
}

/// The rule of an elementwise op, from the shared rule table by op name.
ShardingRule elementwiseRule(Operation *op) {
  const rules::ElementwiseTraits *traits = rules::elementwiseTraits(
      op->getName().stripDialect(), op->getNumOperands());
  return rules::elementwise(toVec(typeOf(op->getResult(0)).getShape()),
                            op->getNumOperands(), *traits);
}

} // namespace

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

#define CREATION_RULE(OP)                                                      \
  ShardingRule OP::getShardingRule() {                                         \
    return rules::creation(toVec(getResult().getType().getShape()));           \
  }
CREATION_RULE(FullOp)
CREATION_RULE(RandomOp)
CREATION_RULE(ConstantOp)
#undef CREATION_RULE

LogicalResult FullOp::verify() { return success(); }

LogicalResult RandomOp::verify() {
  if (getDistribution() != "uniform" && getDistribution() != "normal")
    return emitOpError("distribution must be \"uniform\" or \"normal\", got \"")
           << getDistribution() << "\"";
  if (!isa<FloatType>(getResult().getType().getElementType()))
    return emitOpError("random values need a float element type");
  return success();
}

LogicalResult ConstantOp::verify() {
  auto valueType = cast<ShapedType>(getValue().getType());
  DTensorType res = getResult().getType();
  if (valueType.getShape() != res.getShape() ||
      valueType.getElementType() != res.getElementType())
    return emitOpError("value of type ")
           << valueType
           << " does not match the result's shape and element type";
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

#define BINARY_OP(OP)                                                          \
  LogicalResult OP::verify() {                                                 \
    if (failed(verifySameMesh(*this)))                                         \
      return failure();                                                        \
    return verifySameShapeAndElementType(*this);                               \
  }                                                                            \
  ShardingRule OP::getShardingRule() { return elementwiseRule(*this); }
BINARY_OP(AddOp)
BINARY_OP(SubOp)
BINARY_OP(MulOp)
BINARY_OP(DivOp)
BINARY_OP(MaximumOp)
BINARY_OP(MinimumOp)
BINARY_OP(PowOp)
#undef BINARY_OP

template <typename OpT> static LogicalResult verifyUnary(OpT op) {
  if (failed(verifySameMesh(op)) || failed(verifySameShapeAndElementType(op)))
    return failure();
  const rules::ElementwiseTraits *traits =
      rules::elementwiseTraits(op->getName().stripDialect(), 1);
  if (traits->floatOnly &&
      !isa<FloatType>(op.getResult().getType().getElementType()))
    return op.emitOpError("needs a float element type, got ")
           << op.getResult().getType().getElementType();
  return success();
}

#define UNARY_OP(OP)                                                           \
  LogicalResult OP::verify() { return verifyUnary(*this); }                    \
  ShardingRule OP::getShardingRule() { return elementwiseRule(*this); }
UNARY_OP(NegOp)
UNARY_OP(AbsOp)
UNARY_OP(ExpOp)
UNARY_OP(LogOp)
UNARY_OP(SqrtOp)
UNARY_OP(RsqrtOp)
UNARY_OP(ReluOp)
UNARY_OP(TanhOp)
UNARY_OP(SigmoidOp)
UNARY_OP(GeluOp)
UNARY_OP(SiluOp)
UNARY_OP(SinOp)
UNARY_OP(CosOp)
#undef UNARY_OP

LogicalResult CastOp::verify() {
  if (failed(verifySameMesh(*this)))
    return failure();
  if (getInput().getType().getShape() != getResult().getType().getShape())
    return emitOpError("operand shape [")
           << getInput().getType().getShape()
           << "] does not match result shape ["
           << getResult().getType().getShape() << "]";
  return success();
}

/// eq, ne, lt, le, gt, ge: operands alike, an i1 result of their shape.
template <typename OpT> static LogicalResult verifyCompare(OpT op) {
  if (failed(verifySameMesh(op)))
    return failure();
  DTensorType a = op.getLhs().getType(), b = op.getRhs().getType(),
              r = op.getResult().getType();
  if (a.getShape() != b.getShape() || a.getShape() != r.getShape())
    return op.emitOpError("operands and result must share one shape");
  if (a.getElementType() != b.getElementType())
    return op.emitOpError("operands must share an element type, got ")
           << a.getElementType() << " and " << b.getElementType();
  if (!r.getElementType().isInteger(1))
    return op.emitOpError("result element type must be i1, got ")
           << r.getElementType();
  return success();
}

#define COMPARE_OP(OP)                                                         \
  LogicalResult OP::verify() { return verifyCompare(*this); }                  \
  ShardingRule OP::getShardingRule() { return elementwiseRule(*this); }
COMPARE_OP(EqOp)
COMPARE_OP(NeOp)
COMPARE_OP(LtOp)
COMPARE_OP(LeOp)
COMPARE_OP(GtOp)
COMPARE_OP(GeOp)
#undef COMPARE_OP

LogicalResult WhereOp::verify() {
  if (failed(verifySameMesh(*this)))
    return failure();
  DTensorType c = getCond().getType(), r = getResult().getType();
  if (!c.getElementType().isInteger(1))
    return emitOpError("condition element type must be i1, got ")
           << c.getElementType();
  if (c.getShape() != r.getShape())
    return emitOpError("condition shape [")
           << c.getShape() << "] does not match result shape [" << r.getShape()
           << "]";
  for (Value v : {getLhs(), getRhs()}) {
    DTensorType t = typeOf(v);
    if (t.getShape() != r.getShape() ||
        t.getElementType() != r.getElementType())
      return emitOpError("both choices must have the result's shape and "
                         "element type");
  }
  return success();
}

ShardingRule WhereOp::getShardingRule() { return elementwiseRule(*this); }

ShardingRule CastOp::getShardingRule() {
  return rules::elementwise(toVec(getResult().getType().getShape()), 1,
                            *rules::elementwiseTraits("cast", 1));
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

/// Checks [batch..., M, K] x [batch..., K, N] -> [batch..., M, N].
static LogicalResult verifyMatmulShapes(Operation *op, int64_t rank) {
  if (failed(verifySameMesh(op)))
    return failure();
  DTensorType a = typeOf(op->getOperand(0)), b = typeOf(op->getOperand(1)),
              c = typeOf(op->getResult(0));
  if (a.getRank() != rank || b.getRank() != rank || c.getRank() != rank)
    return op->emitOpError("expects rank-") << rank << " operands and result";
  if (a.getElementType() != b.getElementType() ||
      a.getElementType() != c.getElementType())
    return op->emitOpError("operands and result must share an element type");
  ArrayRef<int64_t> as = a.getShape(), bs = b.getShape(), cs = c.getShape();
  if (as[rank - 1] != bs[rank - 2])
    return op->emitOpError("contracting dims differ: lhs has ")
           << as[rank - 1] << ", rhs has " << bs[rank - 2];
  for (int64_t d = 0; d < rank - 2; ++d)
    if (as[d] != bs[d] || as[d] != cs[d])
      return op->emitOpError("batch dim ") << d << " differs";
  if (cs[rank - 2] != as[rank - 2] || cs[rank - 1] != bs[rank - 1])
    return op->emitOpError("result shape must be [")
           << as[rank - 2] << ", " << bs[rank - 1] << "] in its last two dims";
  return success();
}

LogicalResult MatmulOp::verify() { return verifyMatmulShapes(*this, 2); }
LogicalResult BmmOp::verify() {
  int64_t rank = typeOf(getLhs()).getRank();
  if (rank < 3)
    return emitOpError("expects operands of rank 3 or more (batch dims, then "
                       "the matrix dims)");
  return verifyMatmulShapes(*this, rank);
}

ShardingRule MatmulOp::getShardingRule() {
  return rules::matmul(toVec(getLhs().getType().getShape()),
                       toVec(getRhs().getType().getShape()));
}
ShardingRule BmmOp::getShardingRule() {
  return rules::bmm(toVec(getLhs().getType().getShape()),
                    toVec(getRhs().getType().getShape()));
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

/// The result of reducing the dims of `in` marked in `reduced` has the
/// other dims of `in`, and the reduced ones as 1 with `keepdim`.
static LogicalResult verifyReducedShape(Operation *op, DTensorType in,
                                        ArrayRef<bool> reduced, bool keepdim,
                                        DTensorType res) {
  SmallVector<int64_t> expected;
  for (int64_t d = 0; d < in.getRank(); ++d)
    if (!reduced[d])
      expected.push_back(in.getShape()[d]);
    else if (keepdim)
      expected.push_back(1);
  if (ArrayRef<int64_t>(expected) != res.getShape())
    return op->emitOpError("result shape must be [")
           << expected << "], got [" << res.getShape() << "]";
  return success();
}

template <typename OpT> static LogicalResult verifyReduction(OpT op) {
  if (failed(verifySameMesh(op)))
    return failure();
  DTensorType in = op.getInput().getType(), res = op.getResult().getType();
  if (in.getElementType() != res.getElementType())
    return op.emitOpError("result element type must match the input's");
  SmallVector<bool> reduced(in.getRank(), false);
  for (int64_t d : op.getDims()) {
    if (d < 0 || d >= in.getRank())
      return op.emitOpError("reduction dim ")
             << d << " is out of range for rank " << in.getRank();
    if (reduced[d])
      return op.emitOpError("reduction dim ") << d << " is repeated";
    reduced[d] = true;
  }
  return verifyReducedShape(op, in, reduced, op.getKeepdim(), res);
}

template <typename OpT> static ShardingRule reductionRule(OpT op, bool isMax) {
  return rules::reduction(toVec(op.getInput().getType().getShape()),
                          toVec(op.getDims()), op.getKeepdim(), isMax);
}

LogicalResult MinOp::verify() { return verifyReduction(*this); }
ShardingRule MinOp::getShardingRule() {
  ShardingRule rule = reductionRule(*this, true);
  rule.reductionOp = ReduceOp::Min;
  rule.jointPartial = {ReduceOp::Min};
  return rule;
}

template <typename OpT> static LogicalResult verifyArgReduction(OpT op) {
  if (failed(verifySameMesh(op)))
    return failure();
  DTensorType in = op.getInput().getType(), res = op.getResult().getType();
  int64_t dim = op.getDim();
  if (dim < 0 || dim >= std::max<int64_t>(in.getRank(), 1))
    return op.emitOpError("dim ")
           << dim << " is out of range for rank " << in.getRank();
  if (!res.getElementType().isInteger(64))
    return op.emitOpError("result element type must be i64");
  SmallVector<bool> reduced(in.getRank(), false);
  if (dim < in.getRank())
    reduced[dim] = true; // a 0-d input has dim 0 and nothing to reduce
  return verifyReducedShape(op, in, reduced, op.getKeepdim(), res);
}

LogicalResult TopkIndicesOp::verify() {
  if (failed(verifySameMesh(*this)))
    return failure();
  DTensorType in = getInput().getType(), res = getResult().getType();
  int64_t dim = getDim(), k = getK(), largest = getLargest();
  if (in.getRank() == 0 || dim < 0 || dim >= in.getRank())
    return emitOpError("dim ")
           << dim << " is out of range for rank " << in.getRank();
  if (k < 0 || k > in.getShape()[dim])
    return emitOpError("k = ")
           << k << " is out of range for extent " << in.getShape()[dim];
  if (largest != 0 && largest != 1)
    return emitOpError("largest must be 0 or 1");
  if (!res.getElementType().isInteger(64))
    return emitOpError("result element type must be i64");
  SmallVector<int64_t> expected(in.getShape());
  expected[dim] = k;
  if (ArrayRef<int64_t>(expected) != res.getShape())
    return emitOpError("result shape must be [") << expected << "]";
  return success();
}

ShardingRule TopkIndicesOp::getShardingRule() {
  return rules::topk(toVec(getInput().getType().getShape()), getDim(), getK());
}

#define ARG_REDUCTION_OP(OP)                                                   \
  LogicalResult OP::verify() { return verifyArgReduction(*this); }             \
  ShardingRule OP::getShardingRule() {                                         \
    return rules::argReduction(toVec(getInput().getType().getShape()),         \
                               getDim(), getKeepdim());                        \
  }
ARG_REDUCTION_OP(ArgmaxOp)
ARG_REDUCTION_OP(ArgminOp)
#undef ARG_REDUCTION_OP

#define REDUCTION_OP(OP, IS_MAX)                                               \
  LogicalResult OP::verify() { return verifyReduction(*this); }                \
  ShardingRule OP::getShardingRule() { return reductionRule(*this, IS_MAX); }
REDUCTION_OP(SumOp, false)
REDUCTION_OP(MeanOp, false)
REDUCTION_OP(MaxOp, true)
#undef REDUCTION_OP

//===----------------------------------------------------------------------===//
// Shape
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  if (failed(verifySameMesh(*this)))
    return failure();
  DTensorType in = getInput().getType(), res = getResult().getType();
  if (in.getElementType() != res.getElementType())
    return emitOpError("result element type must match the input's");
  if (in.getNumElements() != res.getNumElements())
    return emitOpError("cannot reshape ")
           << in.getNumElements() << " elements into shape [" << res.getShape()
           << "] (" << res.getNumElements() << " elements)";
  return success();
}

ShardingRule ReshapeOp::getShardingRule() {
  return rules::reshape(toVec(getInput().getType().getShape()),
                        toVec(getResult().getType().getShape()));
}

LogicalResult TransposeOp::verify() {
  if (failed(verifySameMesh(*this)))
    return failure();
  DTensorType in = getInput().getType(), res = getResult().getType();
  ArrayRef<int64_t> perm = getPerm();
  if ((int64_t)perm.size() != in.getRank())
    return emitOpError("perm has ")
           << perm.size() << " entries for rank " << in.getRank();
  SmallVector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= (int64_t)perm.size() || seen[p])
      return emitOpError("perm [") << perm << "] is not a permutation";
    seen[p] = true;
  }
  if (in.getElementType() != res.getElementType())
    return emitOpError("result element type must match the input's");
  for (size_t i = 0; i < perm.size(); ++i)
    if (res.getShape()[i] != in.getShape()[perm[i]])
      return emitOpError("result dim ")
             << i << " must have extent " << in.getShape()[perm[i]];
  return success();
}

ShardingRule TransposeOp::getShardingRule() {
  return rules::transpose(toVec(getInput().getType().getShape()),
                          toVec(getPerm()));
}

LogicalResult BroadcastToOp::verify() {
  if (failed(verifySameMesh(*this)))
    return failure();
  DTensorType in = getInput().getType(), res = getResult().getType();
  if (in.getElementType() != res.getElementType())
    return emitOpError("result element type must match the input's");
  if (in.getRank() > res.getRank())
    return emitOpError("cannot broadcast rank ")
           << in.getRank() << " to rank " << res.getRank();
  int64_t lead = res.getRank() - in.getRank();
  for (int64_t d = 0; d < in.getRank(); ++d) {
    int64_t a = in.getShape()[d], b = res.getShape()[lead + d];
    if (a != b && a != 1)
      return emitOpError("cannot broadcast [")
             << in.getShape() << "] to [" << res.getShape() << "]: dim " << d
             << " has extent " << a;
  }
  return success();
}

ShardingRule BroadcastToOp::getShardingRule() {
  return rules::broadcastTo(toVec(getInput().getType().getShape()),
                            toVec(getResult().getType().getShape()));
}

LogicalResult SliceOp::verify() {
  if (failed(verifySameMesh(*this)))
    return failure();
  DTensorType in = getInput().getType(), res = getResult().getType();
  int64_t rank = in.getRank();
  if ((int64_t)getOffsets().size() != rank ||
      (int64_t)getSizes().size() != rank ||
      (int64_t)getStrides().size() != rank)
    return emitOpError("offsets, sizes and strides need one entry per dim (")
           << rank << ")";
  if (in.getElementType() != res.getElementType())
    return emitOpError("result element type must match the input's");
  for (int64_t d = 0; d < rank; ++d) {
    int64_t o = getOffsets()[d], n = getSizes()[d], st = getStrides()[d];
    if (st < 1)
      return emitOpError("stride of dim ") << d << " must be positive";
    if (o < 0 || n < 0 || (n > 0 && o + (n - 1) * st >= in.getShape()[d]))
      return emitOpError("dim ")
             << d << ": " << n << " elements from " << o << " with stride "
             << st << " do not fit in extent " << in.getShape()[d];
    if (res.getShape()[d] != n)
      return emitOpError("result dim ") << d << " must have extent " << n;
  }
  return success();
}

ShardingRule SliceOp::getShardingRule() {
  return rules::slice(toVec(getInput().getType().getShape()),
                      toVec(getOffsets()), toVec(getSizes()),
                      toVec(getStrides()));
}

LogicalResult ConcatOp::verify() {
  if (failed(verifySameMesh(*this)))
    return failure();
  if (getInputs().empty())
    return emitOpError("needs at least one operand");
  DTensorType res = getResult().getType();
  int64_t dim = getDim(), rank = res.getRank();
  if (dim < 0 || dim >= rank)
    return emitOpError("dim ") << dim << " is out of range for rank " << rank;
  int64_t total = 0;
  for (Value v : getInputs()) {
    DTensorType t = typeOf(v);
    if (t.getRank() != rank || t.getElementType() != res.getElementType())
      return emitOpError("operands must have the result's rank and element "
                         "type");
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && t.getShape()[d] != res.getShape()[d])
        return emitOpError("operand extent ")
               << t.getShape()[d] << " differs from the result's "
               << res.getShape()[d] << " in dim " << d;
    total += t.getShape()[dim];
  }
  if (total != res.getShape()[dim])
    return emitOpError("result dim ")
           << dim << " must have extent " << total << " (the operands' sum)";
  return success();
}

ShardingRule ConcatOp::getShardingRule() {
  std::vector<std::vector<int64_t>> shapes;
  for (Value v : getInputs())
    shapes.push_back(toVec(typeOf(v).getShape()));
  return rules::concat(shapes, getDim());
}

/// input, index: equal ranks, `dim` in range, an i64 index.
static LogicalResult verifyIndexOperands(Operation *op, DTensorType input,
                                         DTensorType index, int64_t dim,
                                         bool sameRank) {
  if (failed(verifySameMesh(op)))
    return failure();
  if (!index.getElementType().isInteger(64))
    return op->emitOpError("index element type must be i64, got ")
           << index.getElementType();
  if (dim < 0 || dim >= input.getRank())
    return op->emitOpError("dim ")
           << dim << " is out of range for rank " << input.getRank();
  if (sameRank && index.getRank() != input.getRank())
    return op->emitOpError("index rank ")
           << index.getRank() << " differs from the input's "
           << input.getRank();
  return success();
}

LogicalResult GatherOp::verify() {
  DTensorType in = getInput().getType(), idx = getIndex().getType(),
              res = getResult().getType();
  if (failed(verifyIndexOperands(*this, in, idx, getDim(), true)))
    return failure();
  for (int64_t d = 0; d < in.getRank(); ++d)
    if (d != (int64_t)getDim() && idx.getShape()[d] > in.getShape()[d])
      return emitOpError("index extent ")
             << idx.getShape()[d] << " exceeds the input's " << in.getShape()[d]
             << " in dim " << d;
  if (res.getShape() != idx.getShape() ||
      res.getElementType() != in.getElementType())
    return emitOpError("result must have the index's shape and the input's "
                       "element type");
  return success();
}

ShardingRule GatherOp::getShardingRule() {
  return rules::gather(toVec(getInput().getType().getShape()),
                       toVec(getIndex().getType().getShape()), getDim());
}

LogicalResult IndexSelectOp::verify() {
  DTensorType in = getInput().getType(), idx = getIndex().getType(),
              res = getResult().getType();
  if (failed(verifyIndexOperands(*this, in, idx, getDim(), false)))
    return failure();
  if (idx.getRank() != 1)
    return emitOpError("index must be 1-D, got rank ") << idx.getRank();
  SmallVector<int64_t> expected(in.getShape());
  expected[getDim()] = idx.getShape()[0];
  if (ArrayRef<int64_t>(expected) != res.getShape() ||
      res.getElementType() != in.getElementType())
    return emitOpError("result must be [")
           << expected << "] of the input's element type";
  return success();
}

ShardingRule IndexSelectOp::getShardingRule() {
  return rules::indexSelect(toVec(getInput().getType().getShape()),
                            toVec(getIndex().getType().getShape()), getDim());
}

LogicalResult ScatterAddOp::verify() {
  DTensorType in = getInput().getType(), idx = getIndex().getType(),
              src = getSrc().getType(), res = getResult().getType();
  if (failed(verifyIndexOperands(*this, in, idx, getDim(), true)))
    return failure();
  if (src.getRank() != in.getRank() ||
      src.getElementType() != in.getElementType())
    return emitOpError("src must have the input's rank and element type");
  for (int64_t d = 0; d < in.getRank(); ++d) {
    if (idx.getShape()[d] > src.getShape()[d])
      return emitOpError("index extent ")
             << idx.getShape()[d] << " exceeds src's " << src.getShape()[d]
             << " in dim " << d;
    if (d != (int64_t)getDim() && idx.getShape()[d] > in.getShape()[d])
      return emitOpError("index extent ")
             << idx.getShape()[d] << " exceeds the input's " << in.getShape()[d]
             << " in dim " << d;
  }
  if (res.getShape() != in.getShape() ||
      res.getElementType() != in.getElementType())
    return emitOpError("result must have the input's shape and element type");
  return success();
}

ShardingRule ScatterAddOp::getShardingRule() {
  return rules::scatterAdd(toVec(getInput().getType().getShape()),
                           toVec(getIndex().getType().getShape()),
                           toVec(getSrc().getType().getShape()), getDim());
}

#define TRIANGLE_OP(OP)                                                        \
  LogicalResult OP::verify() {                                                 \
    if (failed(verifySameMesh(*this)) ||                                       \
        failed(verifySameShapeAndElementType(*this)))                          \
      return failure();                                                        \
    if (getInput().getType().getRank() < 2)                                    \
      return emitOpError("needs a tensor of rank 2 or more");                  \
    return success();                                                          \
  }                                                                            \
  ShardingRule OP::getShardingRule() { return elementwiseRule(*this); }
TRIANGLE_OP(TrilOp)
TRIANGLE_OP(TriuOp)
#undef TRIANGLE_OP

LogicalResult IotaOp::verify() {
  DTensorType res = getResult().getType();
  if ((int64_t)getDim() < 0 ||
      (int64_t)getDim() >= std::max<int64_t>(res.getRank(), 1))
    return emitOpError("dim ") << (int64_t)getDim()
                               << " is out of range for rank " << res.getRank();
  if (res.getElementType().isInteger(1))
    return emitOpError("needs a numeric element type");
  return success();
}

ShardingRule IotaOp::getShardingRule() {
  return rules::creation(toVec(getResult().getType().getShape()));
}

//===----------------------------------------------------------------------===//
// Layout changes
//===----------------------------------------------------------------------===//

static LogicalResult verifySameTensor(Operation *op) {
  DTensorType in = typeOf(op->getOperand(0)), res = typeOf(op->getResult(0));
  if (in.getShape() != res.getShape() ||
      in.getElementType() != res.getElementType() ||
      in.getMesh() != res.getMesh())
    return op->emitOpError("may change only placements: shape, element type "
                           "and mesh must stay the same");
  return success();
}

LogicalResult RedistributeOp::verify() { return verifySameTensor(*this); }

LogicalResult TransferOp::verify() {
  DTensorType in = getInput().getType(), res = getResult().getType();
  if (in != res)
    return emitOpError("result type must be the input type");
  ArrayRef<int64_t> mesh = in.getMesh().getShape();
  int64_t axis = getAxis();
  if (axis < 0 || axis >= (int64_t)mesh.size())
    return emitOpError("mesh axis ")
           << axis << " is out of range for a mesh of rank " << mesh.size();
  const Placements &layout = in.getLayout();
  if (!layout[axis].isShard())
    return emitOpError("needs the input Shard(d) on mesh axis ") << axis;
  int64_t dim = layout[axis].dim;
  for (int64_t a = 0; a < (int64_t)mesh.size(); ++a)
    if (a != axis && layout[a].isShard(dim))
      return emitOpError("tensor dim ")
             << dim << " is sharded by mesh axes " << axis << " and " << a
             << "; a transfer needs it split by its axis alone";
  if (in.getShape()[dim] % mesh[axis] != 0)
    return emitOpError("tensor dim ")
           << dim << " of extent " << in.getShape()[dim]
           << " does not split evenly over the " << mesh[axis]
           << " positions of mesh axis " << axis;
  ArrayRef<int64_t> src = getSources(), dst = getDestinations();
  if (src.size() != dst.size() || src.empty())
    return emitOpError("needs as many sources as destinations, at least one "
                       "(got ")
           << src.size() << " and " << dst.size() << ")";
  std::set<int64_t> seenSrc, seenDst;
  for (size_t k = 0; k < src.size(); ++k) {
    for (int64_t c : {src[k], dst[k]})
      if (c < 0 || c >= mesh[axis])
        return emitOpError("coordinate ")
               << c << " is out of range for mesh axis " << axis << " of "
               << mesh[axis] << " positions";
    if (src[k] == dst[k])
      return emitOpError("pair ")
             << k << " moves block " << src[k] << " onto itself";
    if (!seenSrc.insert(src[k]).second)
      return emitOpError("source ") << src[k] << " appears twice";
    if (!seenDst.insert(dst[k]).second)
      return emitOpError("destination ") << dst[k] << " appears twice";
  }
  return success();
}

LogicalResult AllToAllVOp::verify() {
  DTensorType in = getInput().getType(), counts = getCounts().getType();
  ArrayRef<int64_t> mesh = in.getMesh().getShape();
  int64_t axis = getAxis();
  if (axis < 0 || axis >= (int64_t)mesh.size())
    return emitOpError("mesh axis ")
           << axis << " is out of range for a mesh of rank " << mesh.size();
  if (counts.getMesh() != in.getMesh())
    return emitOpError("input and counts must be on one mesh");
  if (!counts.getElementType().isInteger(64) || counts.getShape().size() != 2)
    return emitOpError("counts must be a 2-D i64 tensor [positions, "
                       "segments]");
  if (in.getShape().size() < 2)
    return emitOpError("input needs a position dim and a row dim");
  int64_t n = mesh[axis], segments = counts.getShape()[1],
          rows = in.getShape()[1];
  if (in.getShape()[0] != n || counts.getShape()[0] != n)
    return emitOpError("dim 0 of input (")
           << in.getShape()[0] << ") and counts (" << counts.getShape()[0]
           << ") must be the " << n << " positions of mesh axis " << axis;
  if (segments == 0 || segments % n != 0)
    return emitOpError("the counts' ")
           << segments << " segments do not split over the " << n
           << " positions of mesh axis " << axis;
  if (rows % segments != 0)
    return emitOpError("the input's ")
           << rows << " rows do not split into " << segments << " segments";
  for (auto [what, type] :
       {std::pair<StringRef, DTensorType>{"input", in}, {"counts", counts}}) {
    const Placements &layout = type.getLayout();
    for (int64_t a = 0; a < (int64_t)mesh.size(); ++a) {
      const Placement &p = layout[a];
      if (a == axis ? !p.isShard(0) : p.isShard(0) || p.isShard(1))
        return emitOpError(what)
               << " must be Shard(0) on mesh axis " << axis
               << " and split neither dim 0 nor dim 1 on any other";
      if (what == "counts" && p.isPartial())
        return emitOpError("counts must not be partial");
    }
  }
  return success();
}

ShardingRule AllToAllVOp::getShardingRule() {
  return rules::allToAllV(toVec(getInput().getType().getShape()));
}

/// The peers of a move between meshes: one global rank per position.
static LogicalResult verifyPeers(Operation *op, DTensorType type,
                                 ArrayRef<int64_t> peers, int64_t tag) {
  int64_t positions = 1;
  for (int64_t s : type.getMesh().getShape())
    positions *= s;
  if ((int64_t)peers.size() != positions)
    return op->emitOpError("has ") << peers.size() << " peers for a mesh of "
                                   << positions << " positions";
  for (int64_t p : peers)
    if (p < 0)
      return op->emitOpError("peer rank ") << p << " is negative";
  if (tag < 0)
    return op->emitOpError("tag ") << tag << " is negative";
  return success();
}

// Transfer, send and recv move every rank's piece whole (rules::
// pointToPoint); the verifiers check what the rule cannot say (the axis
// that splits a transfer's tensor, one peer per position).
ShardingRule TransferOp::getShardingRule() {
  return rules::pointToPoint(toVec(getResult().getType().getShape()), 1);
}
ShardingRule SendOp::getShardingRule() {
  return rules::pointToPoint(toVec(getResult().getType().getShape()), 1);
}
ShardingRule RecvOp::getShardingRule() {
  return rules::pointToPoint(toVec(getResult().getType().getShape()), 0);
}

LogicalResult SendOp::verify() {
  return verifyPeers(*this, getInput().getType(), getPeers(), getTag());
}

LogicalResult RecvOp::verify() {
  return verifyPeers(*this, getResult().getType(), getPeers(), getTag());
}

void dtorch::dtensor::copyRegatherAttr(Operation *from, Operation *to) {
  if (Attribute a = from->getDiscardableAttr(kRegatherAttrName))
    to->setDiscardableAttr(kRegatherAttrName, a);
}

OpFoldResult RedistributeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  // redistribute(redistribute(x)) == redistribute(x): values are global.
  if (auto inner = getInput().getDefiningOp<RedistributeOp>()) {
    getInputMutable().assign(inner.getInput());
    copyRegatherAttr(inner, *this);
    return getResult();
  }
  return {};
}

namespace {
enum class StepKind {
  AllReduce,
  ReduceScatter,
  AllGather,
  AllToAll,
  LocalSlice,
  ToPartial
};

LogicalResult verifyLayoutStep(Operation *op, int64_t axis, StepKind kind) {
  if (failed(verifySameTensor(op)))
    return failure();
  Placements in = typeOf(op->getOperand(0)).getLayout(),
             out = typeOf(op->getResult(0)).getLayout();
  if (axis < 0 || axis >= (int64_t)in.size())
    return op->emitOpError("axis ")
           << axis << " is out of range for a " << in.size() << "-d mesh";
  for (size_t a = 0; a < in.size(); ++a)
    if ((int64_t)a != axis && in[a] != out[a])
      return op->emitOpError("changes the placement of mesh axis ")
             << a << ", but acts on axis " << axis;
  const Placement &s = in[axis], &d = out[axis];
  bool ok = false;
  const char *expect = "";
  switch (kind) {
  case StepKind::AllReduce:
    ok = s.isPartial() && d.isReplicate();
    expect = "P(op) -> R";
    break;
  case StepKind::ReduceScatter:
    ok = s.isPartial() && d.isShard();
    expect = "P(op) -> S(d)";
    break;
  case StepKind::AllGather:
    ok = s.isShard() && d.isReplicate();
    expect = "S(d) -> R";
    break;
  case StepKind::AllToAll:
    ok = s.isShard() && d.isShard() && s.dim != d.dim;
    expect = "S(a) -> S(b) with a != b";
    break;
  case StepKind::LocalSlice:
    ok = s.isReplicate() && d.isShard();
    expect = "R -> S(d)";
    break;
  case StepKind::ToPartial:
    ok = s.isReplicate() && d.isPartial();
    expect = "R -> P(op)";
    break;
  }
  if (!ok)
    return op->emitOpError("expects ")
           << expect << " on axis " << axis << ", got " << s.str() << " -> "
           << d.str();
  return success();
}
} // namespace

#define LAYOUT_STEP_OP(KIND)                                                   \
  LogicalResult KIND##Op::verify() {                                           \
    return verifyLayoutStep(*this, getAxis(), StepKind::KIND);                 \
  }
LAYOUT_STEP_OP(AllReduce)
LAYOUT_STEP_OP(ReduceScatter)
LAYOUT_STEP_OP(AllGather)
LAYOUT_STEP_OP(AllToAll)
LAYOUT_STEP_OP(LocalSlice)
LAYOUT_STEP_OP(ToPartial)
#undef LAYOUT_STEP_OP

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

namespace {

/// What the multi-tensor optimizer updates (fused_adam, fused_sgd) check
/// alike: the 0-d f64 scalars (`scalarNames`), whole groups of
/// `perParam` tensors per parameter (`roles`: their names, "param" first),
/// `resultsPerParam` results per parameter (`resultRoles`), one mesh, one
/// type per parameter's group, and placements that make each group an
/// elementwise update each rank runs on its own pieces.
LogicalResult verifyOptimizerUpdate(Operation *op, ValueRange scalars,
                                    ArrayRef<StringRef> scalarNames,
                                    ValueRange tensors, ValueRange results,
                                    int64_t perParam, int64_t resultsPerParam,
                                    ArrayRef<StringRef> roles,
                                    ArrayRef<StringRef> resultRoles,
                                    StringRef groupText) {
  MeshAttr mesh = cast<DTensorType>(scalars[0].getType()).getMesh();
  for (auto [what, v] : llvm::zip(scalarNames, scalars)) {
    auto t = cast<DTensorType>(v.getType());
    if (!t.getShape().empty() || !t.getElementType().isF64())
      return op->emitOpError(what) << " must be a 0-d f64 tensor, got " << t;
    if (t.getMesh() != mesh)
      return op->emitOpError("every operand and result must be on one mesh");
    for (const Placement &p : t.getLayout())
      if (p.isPartial())
        return op->emitOpError(what) << " must not be partial";
  }
  int64_t numTensors = static_cast<int64_t>(tensors.size());
  if (numTensors == 0 || numTensors % perParam != 0)
    return op->emitOpError("expects ") << perParam << " tensors per parameter ("
                                       << groupText << "), got " << numTensors;
  int64_t n = numTensors / perParam;
  if (static_cast<int64_t>(results.size()) != resultsPerParam * n)
    return op->emitOpError("expects ")
           << resultsPerParam * n << " results for " << n << " parameters, got "
           << results.size();
  std::vector<int64_t> meshShape = toVec(mesh.getShape());
  for (int64_t i = 0; i < n; ++i) {
    DTensorType param = cast<DTensorType>(tensors[i].getType());
    if (param.getMesh() != mesh)
      return op->emitOpError("every operand and result must be on one mesh");
    if (!isa<FloatType>(param.getElementType()))
      return op->emitOpError("parameter ")
             << i << " must have a float element type, got "
             << param.getElementType();
    for (int64_t k = 1; k < perParam; ++k) {
      Type t = tensors[k * n + i].getType();
      if (t != param)
        return op->emitOpError(roles[k])
               << " " << i << " must have its parameter's type " << param
               << ", got " << t;
    }
    for (int64_t k = 0; k < resultsPerParam; ++k) {
      Type t = results[k * n + i].getType();
      if (t != param)
        return op->emitOpError("result ")
               << resultRoles[k] << " " << i
               << " must have its parameter's type " << param << ", got " << t;
    }
    // The group of parameter i is elementwise: its placements must be a
    // local strategy of the elementwise rule over the group's tensors
    // (no Partial passes through a non-linear update).
    std::vector<Placements> layouts(perParam, param.getLayout());
    if (!isLocalStrategy(rules::elementwise(toVec(param.getShape()), perParam,
                                            rules::ElementwiseTraits{}),
                         layouts, param.getLayout(), meshShape))
      return op->emitOpError("parameter ")
             << i << " is placed " << placementsStr(param.getLayout())
             << ", not a local strategy of an elementwise update (reduce a "
                "Partial gradient to the parameter's placements first)";
  }
  return success();
}

} // namespace

LogicalResult FusedAdamOp::verify() {
  for (int64_t flag : {getDecoupled(), getAmsgrad(), getMaximize()})
    if (flag != 0 && flag != 1)
      return emitOpError("decoupled, amsgrad and maximize must be 0 or 1");
  int64_t perParam = getTensorsPerParam();
  static const StringRef kRoles[] = {"param", "grad", "exp_avg", "exp_avg_sq",
                                     "max_exp_avg_sq"};
  static const StringRef kResultRoles[] = {"param", "exp_avg", "exp_avg_sq",
                                           "max_exp_avg_sq"};
  return verifyOptimizerUpdate(
      *this, ValueRange{getStep(), getLr()}, {"step", "lr"}, getTensors(),
      getResults(), perParam, perParam - 1, kRoles, kResultRoles,
      getAmsgrad() ? "params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs"
                   : "params, grads, exp_avgs, exp_avg_sqs");
}

LogicalResult FusedSgdOp::verify() {
  for (int64_t flag : {getNesterov(), getMaximize(), getFirstStep()})
    if (flag != 0 && flag != 1)
      return emitOpError("nesterov, maximize and first_step must be 0 or 1");
  if (!hasMomentum() && (getFirstStep() || getNesterov()))
    return emitOpError("first_step and nesterov need a momentum");
  static const StringRef kRoles[] = {"param", "grad", "momentum_buffer"};
  static const StringRef kResultRoles[] = {"param", "momentum_buffer"};
  int64_t perParam = getTensorsPerParam();
  return verifyOptimizerUpdate(
      *this, ValueRange{getLr()}, {"lr"}, getTensors(), getResults(), perParam,
      getResultsPerParam(), kRoles, kResultRoles,
      perParam == 3 ? "params, grads, momentum_buffers" : "params, grads");
}
