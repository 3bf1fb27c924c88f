//===- FusibleKernels.cpp - kernels a fused group may hold ---------------===//
#include "rank/IR/FusibleKernels.h"

#include "rank/IR/Rank.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;

namespace dtorch::rank {
namespace {

constexpr FusibleKind E = FusibleKind::Elementwise;
constexpr unsigned kNumeric = kFloatTypes | kIntegerTypes;

// Integer `div` and `pow` are left out: they raise on a zero divisor or a
// negative exponent, which a generated loop cannot report.
const FusibleKernel kKernels[] = {
    {"neg", E, 1, kNumeric},
    {"abs", E, 1, kNumeric},
    {"relu", E, 1, kNumeric},
    {"exp", E, 1, kFloatTypes},
    {"log", E, 1, kFloatTypes},
    {"sqrt", E, 1, kFloatTypes},
    {"rsqrt", E, 1, kFloatTypes},
    {"tanh", E, 1, kFloatTypes},
    {"sigmoid", E, 1, kFloatTypes},
    {"gelu", E, 1, kFloatTypes},
    {"silu", E, 1, kFloatTypes},
    {"sin", E, 1, kFloatTypes},
    {"cos", E, 1, kFloatTypes},
    {"add", E, 2, kNumeric},
    {"sub", E, 2, kNumeric},
    {"mul", E, 2, kNumeric},
    {"div", E, 2, kFloatTypes},
    {"pow", E, 2, kFloatTypes},
    {"maximum", E, 2, kAllTypes},
    {"minimum", E, 2, kAllTypes},
    {"full", FusibleKind::Creation, 0, kAllTypes},
    // Integer positions, and float ones while every value is an integer a
    // double holds exactly (the pass checks start, step and extent).
    {"iota", FusibleKind::Creation, 0, kNumeric},
    {"broadcast_to", FusibleKind::Broadcast, 1, kAllTypes},
    {"eq", FusibleKind::Compare, 2, kAllTypes},
    {"ne", FusibleKind::Compare, 2, kAllTypes},
    {"lt", FusibleKind::Compare, 2, kAllTypes},
    {"le", FusibleKind::Compare, 2, kAllTypes},
    {"gt", FusibleKind::Compare, 2, kAllTypes},
    {"ge", FusibleKind::Compare, 2, kAllTypes},
    {"where", FusibleKind::Select, 3, kAllTypes},
    {"cast", FusibleKind::Cast, 1, kAllTypes},
};

unsigned typeBit(Type t) {
  if (t.isF32() || t.isF64() || t.isF16() || t.isBF16())
    return kFloatTypes;
  if (t.isInteger(32) || t.isInteger(64))
    return kIntegerTypes;
  if (t.isInteger(1))
    return kBoolType;
  return 0;
}

} // namespace

llvm::ArrayRef<FusibleKernel> fusibleKernels() { return kKernels; }

const FusibleKernel *lookupFusibleKernel(llvm::StringRef name,
                                         Type elementType) {
  unsigned bit = typeBit(elementType);
  for (const FusibleKernel &k : kKernels)
    if (k.name == name)
      return (k.types & bit) ? &k : nullptr;
  return nullptr;
}

const FusibleKernel *lookupFusibleKernel(Operation *op) {
  auto kernel = dyn_cast_or_null<KernelOp>(op);
  if (!kernel || kernel->getNumResults() != 1)
    return nullptr;
  Type element = getElementTypeOrSelf(kernel.getResult().getType());
  const FusibleKernel *entry = lookupFusibleKernel(kernel.getKernel(), element);
  if (entry && entry->kind == FusibleKind::Compare) {
    // A comparison is fused for its operands' element type into `i1`.
    if (!element.isInteger(1) || kernel.getInputs().empty())
      return nullptr;
    entry = lookupFusibleKernel(kernel.getKernel(),
                                getElementTypeOrSelf(kernel.getInputs()[0]));
  }
  if (entry && entry->kind == FusibleKind::Cast &&
      (kernel.getInputs().size() != 1 ||
       !isFusibleElementType(getElementTypeOrSelf(kernel.getInputs()[0]))))
    return nullptr;
  return entry;
}

bool isFusibleElementType(Type elementType) {
  return typeBit(elementType) != 0;
}

std::optional<int64_t> constantIotaStart(Operation *iota) {
  auto dimAttr = iota->getAttrOfType<IntegerAttr>("dim");
  auto type = dyn_cast<RankedTensorType>(iota->getResult(0).getType());
  if (!dimAttr || !type || dimAttr.getInt() < 0 ||
      dimAttr.getInt() >= type.getRank())
    return std::nullopt;
  int64_t dim = dimAttr.getInt();
  Attribute offset = iota->getAttr("offset");
  if (!offset)
    return 0;
  if (auto plain = dyn_cast<DenseI64ArrayAttr>(offset)) {
    if (plain.size() != type.getRank())
      return std::nullopt;
    return plain[dim];
  }
  if (auto box = dyn_cast<BoxOffsetAttr>(offset)) {
    // The whole offset, whose entry `dim` is zero unless a mesh axis
    // shards that dim (other dims may be sharded: the values count along
    // `dim` only).
    if (box.getDim() != -1 ||
        llvm::is_contained(box.getShardDims().asArrayRef(), dim))
      return std::nullopt;
    return 0;
  }
  return std::nullopt;
}

RankedTensorType rowReducedType(RankedTensorType rowType, int64_t reducedDims,
                                bool keepdim) {
  if (!rowType || reducedDims <= 0 || reducedDims > rowType.getRank())
    return {};
  SmallVector<int64_t> shape(
      rowType.getShape().drop_back(static_cast<size_t>(reducedDims)));
  if (keepdim)
    shape.append(static_cast<size_t>(reducedDims), 1);
  return RankedTensorType::get(shape, rowType.getElementType());
}

bool isKernel(Operation *op, llvm::StringRef kernel) {
  auto k = dyn_cast_or_null<KernelOp>(op);
  return k && k.getKernel() == kernel;
}

} // namespace dtorch::rank
