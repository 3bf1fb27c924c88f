//===- KernelElementCodegen.cpp - one element of each fused kernel -------===//
//
// The element of a fused kernel's result from the elements of its inputs,
// each in the storage type of its own element type, so a group may mix
// element types: elementwise kernels compute in their compute type
// (emitScalar) and round back; comparisons give an i1 as a byte (0 or 1);
// `where` picks one of the stored values (bits unchanged, as the runtime's
// `cond ? x : y`); `cast` converts as the runtime's convertTo
// (runtime/lib/KernelSupport.h); `iota` computes its value from a
// position. Every rule is the hand-written kernel's, bit for bit
// (FusedKernelMixedTypesTest).
//
//===----------------------------------------------------------------------===//
#include "KernelCodegenSupport.h"

#include "rank/IR/FusibleKernels.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include <cstdint>
#include <limits>

using namespace mlir;

namespace dtorch::codegen {

Value toComputeType(OpBuilder &b, Location loc, Value stored,
                    const ElementTypes &et) {
  if (stored.getType() == et.compute)
    return stored;
  if (et.isBF16)
    return bf16BitsToF32(b, loc, stored);
  return arith::ExtFOp::create(b, loc, et.compute, stored);
}

Value toStorageType(OpBuilder &b, Location loc, Value computed,
                    const ElementTypes &et) {
  if (computed.getType() == et.storage)
    return computed;
  if (et.isBF16)
    return f32ToBF16Bits(b, loc, computed);
  return arith::TruncFOp::create(b, loc, et.storage, computed);
}

namespace {

/// The element type of `v`, a tensor of the fused body.
Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// An i1 as the runtime stores a bool: one byte, 0 or 1.
Value boolByte(OpBuilder &b, Location loc, Value i1) {
  return arith::ExtUIOp::create(b, loc, b.getI8Type(), i1);
}

/// A comparison of two stored elements of `type` (the runtime compares the
/// 16-bit floats as float32, floats with IEEE semantics: only `ne` is true
/// for a NaN; integers signed; bools as 0 < 1).
Value emitCompare(OpBuilder &b, Location loc, StringRef name, Value x, Value y,
                  Type type) {
  ElementTypes et = elementTypesFor(type, b.getContext());
  if (et.isFloat) {
    arith::CmpFPredicate p = name == "eq"   ? arith::CmpFPredicate::OEQ
                             : name == "ne" ? arith::CmpFPredicate::UNE
                             : name == "lt" ? arith::CmpFPredicate::OLT
                             : name == "le" ? arith::CmpFPredicate::OLE
                             : name == "gt" ? arith::CmpFPredicate::OGT
                                            : arith::CmpFPredicate::OGE;
    return boolByte(b, loc,
                    arith::CmpFOp::create(b, loc, p,
                                          toComputeType(b, loc, x, et),
                                          toComputeType(b, loc, y, et)));
  }
  bool isSigned = !et.isBool;
  arith::CmpIPredicate p =
      name == "eq"   ? arith::CmpIPredicate::eq
      : name == "ne" ? arith::CmpIPredicate::ne
      : name == "lt"
          ? (isSigned ? arith::CmpIPredicate::slt : arith::CmpIPredicate::ult)
      : name == "le"
          ? (isSigned ? arith::CmpIPredicate::sle : arith::CmpIPredicate::ule)
      : name == "gt"
          ? (isSigned ? arith::CmpIPredicate::sgt : arith::CmpIPredicate::ugt)
          : (isSigned ? arith::CmpIPredicate::sge : arith::CmpIPredicate::uge);
  return boolByte(b, loc, arith::CmpIOp::create(b, loc, p, x, y));
}

/// The integer T's minimum and the bounds of the floats that convert to T
/// as the runtime's convertTo computes them in the float type `from`:
/// `value > low - 1 && value < -low`, both in `from`'s precision.
struct IntegerRange {
  double above; // low - 1, rounded to `from`
  double below; // -low
  int64_t minimum;
};

IntegerRange integerRange(unsigned intBits, bool fromF32) {
  IntegerRange r;
  if (intBits == 32) {
    r.minimum = std::numeric_limits<int32_t>::min();
    if (fromF32) {
      float low = static_cast<float>(std::numeric_limits<int32_t>::min());
      r.above = static_cast<float>(low - 1.0f);
      r.below = -low;
    } else {
      double low = static_cast<double>(std::numeric_limits<int32_t>::min());
      r.above = low - 1.0;
      r.below = -low;
    }
  } else {
    r.minimum = std::numeric_limits<int64_t>::min();
    if (fromF32) {
      float low = static_cast<float>(std::numeric_limits<int64_t>::min());
      r.above = static_cast<float>(low - 1.0f);
      r.below = -low;
    } else {
      double low = static_cast<double>(std::numeric_limits<int64_t>::min());
      r.above = low - 1.0;
      r.below = -low;
    }
  }
  return r;
}

/// `x` (stored as `from`) converted to `to` as the runtime's convertTo:
/// into bool `!= 0`; into a 16-bit float through float32; from a 16-bit
/// float as its float32 value; float into integer truncated toward zero,
/// NaN and values out of range giving the integer's minimum; bool into a
/// number 0 or 1; the rest as C++'s static_cast.
Value emitCast(OpBuilder &b, Location loc, Value x, Type from, Type to) {
  MLIRContext *ctx = b.getContext();
  ElementTypes src = elementTypesFor(from, ctx);
  ElementTypes dst = elementTypesFor(to, ctx);
  if (from == to)
    return x;
  // A 16-bit float source is its float32 value from here on.
  Type f32 = b.getF32Type();
  Value v = toComputeType(b, loc, x, src);
  Type vt = v.getType(); // f32, f64, i32, i64 or i8 (bool)
  bool vFloat = isa<FloatType>(vt);
  if (dst.isBool) {
    Value nonZero =
        vFloat ? arith::CmpFOp::create(
                     b, loc, arith::CmpFPredicate::UNE, v,
                     arith::ConstantOp::create(b, loc, b.getFloatAttr(vt, 0.0)))
                     .getResult()
               : arith::CmpIOp::create(
                     b, loc, arith::CmpIPredicate::ne, v,
                     arith::ConstantOp::create(b, loc, b.getIntegerAttr(vt, 0)))
                     .getResult();
    return boolByte(b, loc, nonZero);
  }
  // Into a float: to the compute type (float32 for the 16-bit floats, as
  // the runtime converts to float first), then rounded to the storage type.
  if (dst.isFloat) {
    Type c = dst.compute;
    Value r;
    if (vFloat) {
      unsigned have = vt.getIntOrFloatBitWidth(),
               want = c.getIntOrFloatBitWidth();
      r = have == want  ? v
          : have < want ? arith::ExtFOp::create(b, loc, c, v).getResult()
                        : arith::TruncFOp::create(b, loc, c, v).getResult();
    } else if (src.isBool) {
      r = arith::UIToFPOp::create(b, loc, c, v);
    } else {
      r = arith::SIToFPOp::create(b, loc, c, v);
    }
    return toStorageType(b, loc, r, dst);
  }
  // Into an integer.
  Type it = dst.storage;
  unsigned bits = it.getIntOrFloatBitWidth();
  if (!vFloat) {
    unsigned have = vt.getIntOrFloatBitWidth();
    if (have == bits)
      return v;
    if (have > bits)
      return arith::TruncIOp::create(b, loc, it, v);
    if (src.isBool)
      return arith::ExtUIOp::create(b, loc, it, v);
    return arith::ExtSIOp::create(b, loc, it, v);
  }
  IntegerRange range = integerRange(bits, vt == f32);
  Value above =
      arith::ConstantOp::create(b, loc, b.getFloatAttr(vt, range.above));
  Value below =
      arith::ConstantOp::create(b, loc, b.getFloatAttr(vt, range.below));
  Value inRange = arith::AndIOp::create(
      b, loc,
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, v, above),
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, v, below));
  // fptosi of a value out of range is poison, which the select discards.
  Value converted = arith::FPToSIOp::create(b, loc, it, v);
  Value minimum =
      arith::ConstantOp::create(b, loc, b.getIntegerAttr(it, range.minimum));
  return arith::SelectOp::create(b, loc, inRange, converted, minimum);
}

} // namespace

Value emitKernelElement(OpBuilder &b, Location loc, rank::KernelOp kernel,
                        ValueRange in) {
  const rank::FusibleKernel *entry = rank::lookupFusibleKernel(kernel);
  if (!entry)
    return {};
  StringRef name = kernel.getKernel();
  Type resultType = elementOf(kernel.getResult());
  switch (entry->kind) {
  case rank::FusibleKind::Elementwise: {
    ElementTypes et = elementTypesFor(resultType, b.getContext());
    SmallVector<Value> args;
    for (Value v : in)
      args.push_back(toComputeType(b, loc, v, et));
    Value r = emitScalar(b, loc, name, args, et);
    return r ? toStorageType(b, loc, r, et) : Value();
  }
  case rank::FusibleKind::Compare:
    return emitCompare(b, loc, name, in[0], in[1],
                       elementOf(kernel.getInputs()[0]));
  case rank::FusibleKind::Select: {
    Value cond = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::ne, in[0],
        arith::ConstantOp::create(b, loc,
                                  b.getIntegerAttr(in[0].getType(), 0)));
    return arith::SelectOp::create(b, loc, cond, in[1], in[2]);
  }
  case rank::FusibleKind::Cast:
    return emitCast(b, loc, in[0], elementOf(kernel.getInputs()[0]),
                    resultType);
  case rank::FusibleKind::Creation:
  case rank::FusibleKind::Broadcast:
    return {};
  }
  return {};
}

Value emitIotaElement(OpBuilder &b, Location loc, rank::KernelOp iota,
                      Value coordinate) {
  auto type = cast<RankedTensorType>(iota.getResult().getType());
  int64_t first = rank::constantIotaStart(iota).value_or(0);
  auto start = static_cast<int64_t>(
      iota->getAttrOfType<FloatAttr>("start").getValueAsDouble());
  auto step = static_cast<int64_t>(
      iota->getAttrOfType<FloatAttr>("step").getValueAsDouble());
  // start + step * (coordinate + offset) in int64, wrapping as the kernel
  // computes (for floats the pass admits only values a double holds
  // exactly, so this is the kernel's double arithmetic too).
  Type i64 = b.getI64Type();
  auto c = [&](int64_t v) -> Value {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(v));
  };
  Value position = arith::AddIOp::create(
      b, loc, arith::IndexCastOp::create(b, loc, i64, coordinate), c(first));
  Value value = arith::AddIOp::create(
      b, loc, c(start), arith::MulIOp::create(b, loc, c(step), position));
  Type element = type.getElementType();
  if (element.isInteger(64))
    return value;
  if (element.isInteger(32))
    return arith::TruncIOp::create(b, loc, b.getI32Type(), value);
  // A float: the exact double, converted as convertTo<T>(double).
  Value asDouble = arith::SIToFPOp::create(b, loc, b.getF64Type(), value);
  return emitCast(b, loc, asDouble, b.getF64Type(), element);
}

} // namespace dtorch::codegen
