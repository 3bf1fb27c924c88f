//===- ErfApproximation.cpp - float32 erf without a division --------------===//
//
// math.erf on float32 (scalars and vectors) as the runtime's
// polynomial::erfPiecewise (dtorch/runtime/PolynomialMath.h), operation for
// operation and with the same float32 coefficients, so that gelu gives the
// same bits generated and hand-written: on a = |x|, a + a P(a^2) below 1 and
// 1 + Q(a - 2) from 1 on, each by Horner's rule with math.fma, both
// computed and one selected; 1 from the saturation point on; the sign of x
// restored (copysign, as bits). No division and no per-lane coefficient
// selects, unlike MLIR's rational approximation (4.79 ulp;
// DTORCH_ERF_PIECEWISE=0 restores it).
//
//===----------------------------------------------------------------------===//
#include "KernelCodegenSupport.h"

#include "dtorch/runtime/PolynomialMath.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;

namespace dtorch::codegen {
namespace {

namespace poly = rt::polynomial;

struct PiecewiseErf : OpRewritePattern<math::ErfOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(math::ErfOp op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    if (!getElementTypeOrSelf(type).isF32())
      return rewriter.notifyMatchFailure(op, "not float32");
    Location loc = op.getLoc();
    auto constant = [&](float v) -> Value {
      FloatAttr scalar = rewriter.getF32FloatAttr(v);
      if (auto shaped = dyn_cast<ShapedType>(type))
        return arith::ConstantOp::create(
            rewriter, loc,
            DenseElementsAttr::get(shaped, ArrayRef<Attribute>(scalar)));
      return arith::ConstantOp::create(rewriter, loc, scalar);
    };
    auto horner = [&](ArrayRef<float> coefficients, Value t) -> Value {
      Value p = constant(coefficients.back());
      for (float c : llvm::reverse(coefficients.drop_back()))
        p = math::FmaOp::create(rewriter, loc, p, t, constant(c));
      return p;
    };
    Value x = op.getOperand();
    Value a = math::AbsFOp::create(rewriter, loc, x);
    Value s = arith::MulFOp::create(rewriter, loc, a, a);
    Value small =
        math::FmaOp::create(rewriter, loc, a, horner(poly::kErfSmall, s), a);
    Value u =
        arith::SubFOp::create(rewriter, loc, a, constant(poly::kErfCenter));
    Value large = arith::AddFOp::create(rewriter, loc, constant(1.0f),
                                        horner(poly::kErfLarge, u));
    Value below = arith::CmpFOp::create(
        rewriter, loc, arith::CmpFPredicate::OLT, a, constant(poly::kErfSplit));
    Value r = arith::SelectOp::create(rewriter, loc, below, small, large);
    Value saturated =
        arith::CmpFOp::create(rewriter, loc, arith::CmpFPredicate::OGE, a,
                              constant(poly::kErfSaturation));
    r = arith::SelectOp::create(rewriter, loc, saturated, constant(1.0f), r);
    // copysign(r, x) as its bits (math.copysign would be a libdevice call
    // on the GPU): r's magnitude, x's sign.
    Type bitsType = rewriter.getI32Type();
    if (auto shaped = dyn_cast<ShapedType>(type))
      bitsType = shaped.clone(bitsType);
    auto bitsConstant = [&](uint32_t v) -> Value {
      IntegerAttr scalar = rewriter.getI32IntegerAttr(static_cast<int32_t>(v));
      if (auto shaped = dyn_cast<ShapedType>(bitsType))
        return arith::ConstantOp::create(
            rewriter, loc,
            DenseElementsAttr::get(shaped, ArrayRef<Attribute>(scalar)));
      return arith::ConstantOp::create(rewriter, loc, scalar);
    };
    Value magnitude = arith::AndIOp::create(
        rewriter, loc, arith::BitcastOp::create(rewriter, loc, bitsType, r),
        bitsConstant(0x7fffffffu));
    Value sign = arith::AndIOp::create(
        rewriter, loc, arith::BitcastOp::create(rewriter, loc, bitsType, x),
        bitsConstant(0x80000000u));
    rewriter.replaceOpWithNewOp<arith::BitcastOp>(
        op, type, arith::OrIOp::create(rewriter, loc, magnitude, sign));
    return success();
  }
};

} // namespace

void populatePiecewiseErfPatterns(RewritePatternSet &patterns) {
  patterns.add<PiecewiseErf>(patterns.getContext());
}

} // namespace dtorch::codegen
