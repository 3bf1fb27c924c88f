//===- KernelCodegen.cpp - rank.fused bodies to native code --------------===//
//
// rank ops -> one linalg.generic on memrefs -> loops -> LLVM dialect ->
// LLVM IR -> -O3 for the host CPU -> object -> shared object (ld.lld).
//
// Target: the controller's own CPU, its triple and every feature
// llvm::sys::getHostCPUFeatures reports (AVX-512 where the host has it):
// workers on the controller's host run the code as fast as it can. Workers
// on another host must have the same features (the executable records them
// in `target`).
//
// Numerics are the runtime's hand-written kernels', bit for bit: float16 and
// bfloat16 are computed in float32 and rounded after every op (bfloat16 by
// integer code, as the runtime rounds), integers wrap, and float32 exp,
// log and tanh use MLIR's polynomial approximations (vectorizable) and erf
// a piecewise polynomial of our own (ErfApproximation.cpp; MLIR's with
// DTORCH_ERF_PIECEWISE=0), which the runtime's kernels compute operation
// for operation (dtorch/runtime/PolynomialMath.h); float64 calls libm, as
// they do.
// test/cpp/compiler/FusedKernelBitwiseTest.cpp checks every kernel.
//
//===----------------------------------------------------------------------===//
#include "KernelCodegen.h"

#include "KernelCodegenSupport.h"

#include "ProgramEmitter.h"
#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/PolynomialMath.h"
#include "rank/IR/FusibleKernels.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Analysis/LoopInfo.h"
#include "llvm/IR/Dominators.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

using namespace mlir;

namespace dtorch {
namespace codegen {

// ---- the scalar body ---------------------------------------------------===//

ElementTypes elementTypesFor(Type t, MLIRContext *ctx) {
  ElementTypes e;
  if (t.isF32())
    e.storage = e.compute = Float32Type::get(ctx);
  else if (t.isF64())
    e.storage = e.compute = Float64Type::get(ctx);
  else if (t.isF16()) {
    e.storage = Float16Type::get(ctx);
    e.compute = Float32Type::get(ctx);
  } else if (t.isBF16()) {
    e.storage = IntegerType::get(ctx, 16);
    e.compute = Float32Type::get(ctx);
    e.isFloat = e.isBF16 = true;
    return e;
  } else if (t.isInteger(1)) {
    e.storage = e.compute = IntegerType::get(ctx, 8);
    e.isBool = true;
    return e;
  } else if (t.isInteger(32) || t.isInteger(64))
    e.storage = e.compute =
        IntegerType::get(ctx, cast<IntegerType>(t).getWidth());
  e.isFloat = isa<FloatType>(e.storage);
  return e;
}

/// The float32 value of bfloat16 bits: the upper half of a float32.
Value bf16BitsToF32(OpBuilder &b, Location loc, Value bits) {
  Type i32 = b.getI32Type();
  Value wide = arith::ExtUIOp::create(b, loc, i32, bits);
  Value shifted = arith::ShLIOp::create(
      b, loc, wide, arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(16)));
  return arith::BitcastOp::create(b, loc, b.getF32Type(), shifted);
}

/// float32 to bfloat16 bits as the runtime's BFloat16 rounds (Half.h): to
/// nearest even, denormals too; a NaN stays a NaN with its sign and upper
/// payload bits, made quiet.
Value f32ToBF16Bits(OpBuilder &b, Location loc, Value value) {
  Type i32 = b.getI32Type();
  auto c = [&](uint32_t v) -> Value {
    return arith::ConstantOp::create(
        b, loc, b.getI32IntegerAttr(static_cast<int32_t>(v)));
  };
  Value bits = arith::BitcastOp::create(b, loc, i32, value);
  Value magnitude = arith::AndIOp::create(b, loc, bits, c(0x7fffffffu));
  Value isNaN = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt,
                                      magnitude, c(0x7f800000u));
  Value upper = arith::ShRUIOp::create(b, loc, bits, c(16));
  Value quietNaN = arith::OrIOp::create(b, loc, upper, c(0x40));
  Value odd = arith::AndIOp::create(b, loc, upper, c(1));
  Value bias = arith::AddIOp::create(b, loc, odd, c(0x7fff));
  Value rounded = arith::ShRUIOp::create(
      b, loc, arith::AddIOp::create(b, loc, bits, bias), c(16));
  Value result = arith::SelectOp::create(b, loc, isNaN, quietNaN, rounded);
  return arith::TruncIOp::create(b, loc, b.getI16Type(), result);
}

/// Emits the scalar computation of one kernel on values of the compute
/// type; null for a kernel the generator does not know.
Value emitScalar(OpBuilder &b, Location loc, StringRef name, ValueRange x,
                 const ElementTypes &et) {
  Type c = et.compute;
  if (et.isBool) {
    if (name == "maximum")
      return arith::OrIOp::create(b, loc, x[0], x[1]);
    if (name == "minimum")
      return arith::AndIOp::create(b, loc, x[0], x[1]);
    return {};
  }
  if (!et.isFloat) {
    Value zero = arith::ConstantOp::create(b, loc, b.getIntegerAttr(c, 0));
    if (name == "neg")
      return arith::SubIOp::create(b, loc, zero, x[0]);
    if (name == "abs" || name == "relu") {
      Value negative =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, x[0], zero);
      Value other = name == "abs"
                        ? arith::SubIOp::create(b, loc, zero, x[0]).getResult()
                        : zero;
      return arith::SelectOp::create(b, loc, negative, other, x[0]);
    }
    if (name == "add")
      return arith::AddIOp::create(b, loc, x[0], x[1]);
    if (name == "sub")
      return arith::SubIOp::create(b, loc, x[0], x[1]);
    if (name == "mul")
      return arith::MulIOp::create(b, loc, x[0], x[1]);
    if (name == "maximum")
      return arith::MaxSIOp::create(b, loc, x[0], x[1]);
    if (name == "minimum")
      return arith::MinSIOp::create(b, loc, x[0], x[1]);
    return {};
  }
  auto constant = [&](double v) -> Value {
    return arith::ConstantOp::create(b, loc, b.getFloatAttr(c, v));
  };
  auto sigmoid = [&](Value v) -> Value {
    // exp of minus |v|, as the kernel: 1/(1+e^-v) for v >= 0, e^v/(1+e^v)
    // below.
    Value zero = constant(0.0), one = constant(1.0);
    Value nonNegative =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE, v, zero);
    Value negated = arith::NegFOp::create(b, loc, v);
    Value e = math::ExpOp::create(
        b, loc, arith::SelectOp::create(b, loc, nonNegative, negated, v));
    Value denominator = arith::AddFOp::create(b, loc, one, e);
    Value numerator = arith::SelectOp::create(b, loc, nonNegative, one, e);
    return arith::DivFOp::create(b, loc, numerator, denominator);
  };
  if (name == "neg")
    return arith::NegFOp::create(b, loc, x[0]);
  if (name == "abs")
    return math::AbsFOp::create(b, loc, x[0]);
  if (name == "exp")
    return math::ExpOp::create(b, loc, x[0]);
  if (name == "log")
    return math::LogOp::create(b, loc, x[0]);
  if (name == "sqrt")
    return math::SqrtOp::create(b, loc, x[0]);
  if (name == "rsqrt")
    return arith::DivFOp::create(b, loc, constant(1.0),
                                 math::SqrtOp::create(b, loc, x[0]));
  if (name == "relu") {
    Value negative = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT,
                                           x[0], constant(0.0));
    return arith::SelectOp::create(b, loc, negative, constant(0.0), x[0]);
  }
  if (name == "tanh")
    return math::TanhOp::create(b, loc, x[0]);
  if (name == "sigmoid")
    return sigmoid(x[0]);
  if (name == "silu")
    return arith::MulFOp::create(b, loc, x[0], sigmoid(x[0]));
  if (name == "gelu") {
    Value scaled = arith::MulFOp::create(b, loc, x[0], constant(M_SQRT1_2));
    Value erf = math::ErfOp::create(b, loc, scaled);
    Value half = arith::MulFOp::create(b, loc, constant(0.5), x[0]);
    return arith::MulFOp::create(
        b, loc, half, arith::AddFOp::create(b, loc, constant(1.0), erf));
  }
  if (name == "sin")
    return math::SinOp::create(b, loc, x[0]);
  if (name == "cos")
    return math::CosOp::create(b, loc, x[0]);
  if (name == "add")
    return arith::AddFOp::create(b, loc, x[0], x[1]);
  if (name == "sub")
    return arith::SubFOp::create(b, loc, x[0], x[1]);
  if (name == "mul")
    return arith::MulFOp::create(b, loc, x[0], x[1]);
  if (name == "div")
    return arith::DivFOp::create(b, loc, x[0], x[1]);
  if (name == "pow")
    return math::PowFOp::create(b, loc, x[0], x[1]);
  if (name == "maximum")
    return arith::MaximumFOp::create(b, loc, x[0], x[1]);
  if (name == "minimum")
    return arith::MinimumFOp::create(b, loc, x[0], x[1]);
  return {};
}

/// A `full` value (float64) converted to the storage type as the `full`
/// kernel stores it.
Value convertFullConstant(OpBuilder &b, Location loc, Value v,
                          const ElementTypes &et) {
  MLIRContext *ctx = b.getContext();
  Type f64 = Float64Type::get(ctx);
  if (et.isBool) {
    Value zero = arith::ConstantOp::create(b, loc, b.getF64FloatAttr(0));
    Value nonZero =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNE, v, zero);
    return arith::ExtUIOp::create(b, loc, et.storage, nonZero);
  }
  if (!et.isFloat)
    return arith::FPToSIOp::create(b, loc, et.storage, v);
  // float64 -> float32 -> 16-bit, as the `full` kernel converts (and no
  // float64 -> 16-bit runtime library call).
  if (et.storage != f64)
    v = arith::TruncFOp::create(b, loc, Float32Type::get(ctx), v);
  if (et.isBF16)
    v = f32ToBF16Bits(b, loc, v);
  else if (et.storage != f64 && !et.storage.isF32())
    v = arith::TruncFOp::create(b, loc, et.storage, v);
  return v;
}

/// Each `full` of `body` (body order) read from the kernel's scalar
/// argument once, before the loops, and converted to the storage type of
/// its element type as the `full` kernel stores it.
llvm::DenseMap<Operation *, Value>
emitFullConstants(OpBuilder &b, Location loc, Block &body, Value scalarArg) {
  llvm::DenseMap<Operation *, Value> constants;
  int64_t j = 0;
  for (Operation &inner : body.without_terminator()) {
    auto full = dyn_cast<rank::KernelOp>(inner);
    if (!full || full.getKernel() != "full")
      continue;
    Value index = arith::ConstantIndexOp::create(b, loc, j++);
    Value v = memref::LoadOp::create(b, loc, scalarArg, ValueRange{index});
    ElementTypes et = elementTypesFor(
        cast<RankedTensorType>(full.getResult().getType()).getElementType(),
        b.getContext());
    constants[full] = convertFullConstant(b, loc, v, et);
  }
  return constants;
}

void applyPolynomialApproximations(ModuleOp module) {
  // The runtime's float32 kernels compute these expansions operation for
  // operation (dtorch/runtime/PolynomialMath.h): change both together.
  // erf is the piecewise polynomial of ErfApproximation.cpp unless
  // DTORCH_ERF_PIECEWISE=0.
  bool piecewiseErf = rt::polynomial::erfPiecewiseFromEnvironment();
  RewritePatternSet patterns(module.getContext());
  if (piecewiseErf)
    populatePiecewiseErfPatterns(patterns);
  populateMathPolynomialApproximationPatterns(patterns, [&](StringRef name) {
    name.consume_front("math.");
    return name == "exp" || name == "log" || name == "tanh" ||
           (name == "erf" && !piecewiseErf);
  });
  (void)applyPatternsGreedily(module, std::move(patterns));
}

/// The indexing map of an operand of shape `shape` in a loop nest over
/// `group` (numpy broadcasting: trailing dims aligned, extent 1 repeated).
AffineMap broadcastMap(ArrayRef<int64_t> shape, ArrayRef<int64_t> group,
                       MLIRContext *ctx) {
  SmallVector<AffineExpr> results;
  size_t lead = group.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    results.push_back(shape[d] == 1 && group[lead + d] != 1
                          ? getAffineConstantExpr(0, ctx)
                          : getAffineDimExpr(lead + d, ctx));
  return AffineMap::get(group.size(), 0, results, ctx);
}

FailureOr<OwningOpRef<ModuleOp>>
buildElementwiseKernelModule(rank::FusedOp op, MLIRContext *ctx,
                             StringRef implName,
                             const ElementwiseModuleOptions &options) {
  Block &body = op.getBody().front();
  auto yield = cast<rank::YieldOp>(body.getTerminator());
  if (yield.getValues().empty())
    return op.emitOpError("has no results to generate code for");
  auto groupType = cast<RankedTensorType>(yield.getValues()[0].getType());
  // A group of rank 0 is one element: as shape [1] where asked (a loop nest
  // needs a loop to map to GPU threads).
  SmallVector<int64_t> groupShape(groupType.getShape());
  bool rankZeroAsOne = options.rankZeroAsOne && groupShape.empty();
  if (rankZeroAsOne)
    groupShape.push_back(1);
  ArrayRef<int64_t> group = groupShape;
  auto shapeOf = [&](Type t) -> SmallVector<int64_t> {
    SmallVector<int64_t> shape(cast<RankedTensorType>(t).getShape());
    if (rankZeroAsOne)
      shape.assign(1, 1);
    return shape;
  };
  // Each operand in the storage type of its own element type: a group may
  // mix them (comparisons, `where`, casts).
  auto storageOf = [&](Type t) -> Type {
    return elementTypesFor(cast<RankedTensorType>(t).getElementType(), ctx)
        .storage;
  };
  SmallVector<Type> operandTypes(op.getInputs().getTypes());
  llvm::append_range(operandTypes, op.getResultTypes());
  for (Type t : operandTypes)
    if (!storageOf(t))
      return op.emitOpError("cannot generate code for element type ")
             << cast<RankedTensorType>(t).getElementType();

  Location loc = UnknownLoc::get(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(module->getBody());
  SmallVector<Type> argTypes;
  for (Value in : op.getInputs())
    argTypes.push_back(
        MemRefType::get(shapeOf(in.getType()), storageOf(in.getType())));
  for (Type t : op.getResultTypes())
    argTypes.push_back(MemRefType::get(shapeOf(t), storageOf(t)));
  // The group's constants (`full` values), in body order, as float64
  // arguments: kernels differing only in constants are one kernel.
  SmallVector<rank::KernelOp> fulls;
  for (Operation &inner : body.without_terminator())
    if (cast<rank::KernelOp>(inner).getKernel() == "full")
      fulls.push_back(cast<rank::KernelOp>(inner));
  Type f64 = Float64Type::get(ctx);
  if (options.scalarsAsValues)
    argTypes.append(fulls.size(), f64);
  else
    argTypes.push_back(
        MemRefType::get({static_cast<int64_t>(fulls.size())}, f64));
  // Rows [begin, end) of the outermost dim, when there are rows to split.
  if (options.rowRange) {
    argTypes.push_back(b.getIndexType());
    argTypes.push_back(b.getIndexType());
  }
  auto fn =
      func::FuncOp::create(b, loc, implName, b.getFunctionType(argTypes, {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);

  size_t numInputs = op.getInputs().size();
  size_t numOutputs = op.getNumResults();
  SmallVector<Value> ins(entry->getArguments().take_front(numInputs));
  SmallVector<Value> outs(entry->getArguments().slice(numInputs, numOutputs));
  // The first row of the range (iota positions along dim 0 start there).
  Value begin;
  if (options.rowRange) {
    // Every operand that varies along the outermost dim is cut to the rows;
    // operands broadcast along it (extent 1 or fewer dims) stay whole.
    begin = entry->getArgument(numInputs + numOutputs + 1);
    Value end = entry->getArgument(numInputs + numOutputs + 2);
    Value rows = arith::SubIOp::create(b, loc, end, begin);
    auto sliceRows = [&](Value whole) -> Value {
      ArrayRef<int64_t> shape = cast<MemRefType>(whole.getType()).getShape();
      SmallVector<OpFoldResult> offsets(shape.size(), b.getIndexAttr(0));
      SmallVector<OpFoldResult> strides(shape.size(), b.getIndexAttr(1));
      SmallVector<OpFoldResult> sizes;
      offsets[0] = begin;
      sizes.push_back(rows);
      for (int64_t extent : shape.drop_front())
        sizes.push_back(b.getIndexAttr(extent));
      return memref::SubViewOp::create(b, loc, whole, offsets, sizes, strides);
    };
    for (Value &in : ins) {
      ArrayRef<int64_t> shape = cast<MemRefType>(in.getType()).getShape();
      if (shape.size() == group.size() && shape[0] == group[0])
        in = sliceRows(in);
    }
    for (Value &out : outs)
      out = sliceRows(out);
  }
  llvm::DenseMap<Operation *, Value> constants;
  if (!options.scalarsAsValues)
    constants = emitFullConstants(b, loc, body,
                                  entry->getArgument(numInputs + numOutputs));
  SmallVector<AffineMap> maps;
  for (Value in : op.getInputs())
    maps.push_back(broadcastMap(shapeOf(in.getType()), group, ctx));
  for (size_t i = 0; i < outs.size(); ++i)
    maps.push_back(AffineMap::getMultiDimIdentityMap(group.size(), ctx));
  SmallVector<utils::IteratorType> iterators(group.size(),
                                             utils::IteratorType::parallel);

  LogicalResult status = success();
  linalg::GenericOp::create(
      b, loc, TypeRange{}, ins, outs, maps, iterators,
      [&](OpBuilder &nb, Location nloc, ValueRange scalars) {
        // Every value of the group as an element of the storage type of
        // its element type.
        llvm::DenseMap<Value, Value> stored;
        for (size_t i = 0; i < numInputs; ++i)
          stored[body.getArgument(i)] = scalars[i];
        for (Operation &inner : body.without_terminator()) {
          auto kernel = cast<rank::KernelOp>(inner);
          StringRef name = kernel.getKernel();
          if (name == "broadcast_to") {
            stored[kernel.getResult()] = stored.lookup(kernel.getInputs()[0]);
            continue;
          }
          if (name == "full") {
            // Passed by value: converted where the element is computed
            // (on the GPU, in the kernel, not in host code).
            if (options.scalarsAsValues) {
              auto it = llvm::find(fulls, kernel);
              Value v = entry->getArgument(numInputs + numOutputs +
                                           (it - fulls.begin()));
              ElementTypes fet = elementTypesFor(
                  cast<RankedTensorType>(kernel.getResult().getType())
                      .getElementType(),
                  ctx);
              stored[kernel.getResult()] =
                  convertFullConstant(nb, nloc, v, fet);
            } else {
              stored[kernel.getResult()] = constants.lookup(kernel);
            }
            continue;
          }
          if (name == "iota") {
            // Its position along its dim: the loop index there (of the
            // whole tensor: a row range starts at `begin`).
            auto dim = static_cast<unsigned>(
                kernel->getAttrOfType<IntegerAttr>("dim").getInt());
            Value index = linalg::IndexOp::create(nb, nloc, dim);
            if (dim == 0 && begin)
              index = arith::AddIOp::create(nb, nloc, index, begin);
            stored[kernel.getResult()] =
                emitIotaElement(nb, nloc, kernel, index);
            continue;
          }
          SmallVector<Value> args;
          for (Value v : kernel.getInputs())
            args.push_back(stored.lookup(v));
          Value r = emitKernelElement(nb, nloc, kernel, args);
          if (!r) {
            kernel.emitOpError("has no generated form for ")
                << kernel.getResult().getType();
            status = failure();
            r = arith::ConstantOp::create(
                nb, nloc,
                nb.getZeroAttr(storageOf(kernel.getResult().getType())));
          }
          stored[kernel.getResult()] = r;
        }
        SmallVector<Value> results;
        for (Value v : yield.getValues())
          results.push_back(stored.lookup(v));
        linalg::YieldOp::create(nb, nloc, results);
      });
  func::ReturnOp::create(b, loc);
  if (failed(status))
    return failure();
  return module;
}

void optimizeModuleO3(llvm::Module &m, llvm::TargetMachine &tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
}

bool emitWithTarget(llvm::Module &m, llvm::TargetMachine &tm, bool assembly,
                    std::string &out) {
  llvm::SmallVector<char, 0> code;
  llvm::raw_svector_ostream os(code);
  llvm::legacy::PassManager codegen;
  if (tm.addPassesToEmitFile(codegen, os, nullptr,
                             assembly ? llvm::CodeGenFileType::AssemblyFile
                                      : llvm::CodeGenFileType::ObjectFile))
    return false;
  codegen.run(m);
  out.assign(code.begin(), code.end());
  return true;
}

} // namespace codegen

namespace {

using namespace codegen;

constexpr llvm::StringLiteral kImplName = "dtorch_fused_impl";

/// Elementwise kernels of at least two rows also compute a range of rows
/// (the `<symbol>_rows` entry), so that a worker can split a large tensor
/// among threads; row-reduction kernels and single rows do not.
bool hasRowRange(ArrayRef<int64_t> group) {
  return !group.empty() && group[0] >= 2;
}

std::atomic<int64_t> compiles{0};

// ---- MLIR: the kernel function -----------------------------------------===//

MLIRContext &codegenContext() {
  thread_local std::unique_ptr<MLIRContext> ctx;
  if (!ctx) {
    DialectRegistry registry;
    registry.insert<affine::AffineDialect, arith::ArithDialect,
                    cf::ControlFlowDialect, func::FuncDialect,
                    linalg::LinalgDialect, LLVM::LLVMDialect, math::MathDialect,
                    memref::MemRefDialect, scf::SCFDialect,
                    vector::VectorDialect>();
    registerBuiltinDialectTranslation(registry);
    registerLLVMDialectTranslation(registry);
    ctx = std::make_unique<MLIRContext>(registry);
    ctx->loadAllAvailableDialects();
    ctx->disableMultithreading();
  }
  return *ctx;
}

/// `func.func @dtorch_fused_impl(...)`: one linalg.generic, or the row
/// kernel for a group holding reductions.
FailureOr<OwningOpRef<ModuleOp>> buildKernelModule(rank::FusedOp op,
                                                   MLIRContext *ctx) {
  Block &body = op.getBody().front();
  if (!cast<rank::YieldOp>(body.getTerminator()).getValues().empty() &&
      hasRowReduction(body))
    return buildRowKernelModule(op, ctx, kImplName);
  ElementwiseModuleOptions options;
  options.rowRange =
      hasRowRange(cast<RankedTensorType>(op.getResultTypes()[0]).getShape());
  return buildElementwiseKernelModule(op, ctx, kImplName, options);
}

/// MLIR to the LLVM dialect: loops, polynomial approximations of the
/// float32 transcendental functions, libm for the rest.
LogicalResult lowerToLLVMDialect(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  PassManager pm(ctx);
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  pm.addPass(memref::createExpandStridedMetadataPass()); // row ranges
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  if (failed(pm.run(module)))
    return failure();

  applyPolynomialApproximations(module);

  PassManager lower(ctx);
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  lower.addPass(arith::createArithExpandOpsPass(expand));
  lower.addPass(createConvertMathToLLVMPass());
  lower.addPass(createConvertMathToLibmPass());
  lower.addPass(createConvertVectorToLLVMPass()); // row kernels' lanes
  lower.addPass(createFinalizeMemRefToLLVMConversionPass());
  lower.addPass(createArithToLLVMConversionPass());
  lower.addPass(createConvertIndexToLLVMPass());
  lower.addPass(createConvertControlFlowToLLVMPass());
  ConvertFuncToLLVMPassOptions funcOptions;
  funcOptions.useBarePtrCallConv = true;
  lower.addPass(createConvertFuncToLLVMPass(funcOptions));
  lower.addPass(createReconcileUnrealizedCastsPass());
  return lower.run(module);
}

// ---- LLVM: optimize, emit, link ----------------------------------------===//

struct HostTarget {
  std::string triple;
  std::string cpu;
  std::string features;
};

const HostTarget &hostTarget() {
  static const HostTarget target = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    HostTarget t;
    t.triple = llvm::sys::getProcessTriple();
    t.cpu = llvm::sys::getHostCPUName().str();
    llvm::SubtargetFeatures features;
    for (const auto &feature : llvm::sys::getHostCPUFeatures())
      features.AddFeature(feature.getKey(), feature.getValue());
    t.features = features.getString();
    return t;
  }();
  return target;
}

/// Adds the exported entry points that unpack the pointer arrays and call
/// the kernel function: `symbol` (the whole tensor) and, when `rows` > 0
/// (the kernel takes a row range), `symbol`_rows (rows [begin, end)).
void addEntryPoint(llvm::Module &m, StringRef symbol, unsigned numInputs,
                   unsigned numOutputs, int64_t rows) {
  // void symbol(void *const *in, void *const *out, const double *scalars)
  // void symbol_rows(..., const double *scalars, int64_t begin, int64_t end)
  llvm::LLVMContext &c = m.getContext();
  llvm::Function *impl = m.getFunction(kImplName);
  impl->setLinkage(llvm::GlobalValue::InternalLinkage);
  auto *ptr = llvm::PointerType::getUnqual(c);
  auto *i64 = llvm::Type::getInt64Ty(c);
  auto define = [&](const std::string &name, bool ranged) {
    SmallVector<llvm::Type *> params = {ptr, ptr, ptr};
    if (ranged)
      params.append({i64, i64});
    auto *type =
        llvm::FunctionType::get(llvm::Type::getVoidTy(c), params, false);
    auto *entry = llvm::Function::Create(
        type, llvm::GlobalValue::ExternalLinkage, name, m);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(c, "entry", entry));
    SmallVector<llvm::Value *> args;
    for (unsigned i = 0; i < numInputs; ++i)
      args.push_back(b.CreateLoad(
          ptr, b.CreateConstInBoundsGEP1_64(ptr, entry->getArg(0), i)));
    for (unsigned i = 0; i < numOutputs; ++i)
      args.push_back(b.CreateLoad(
          ptr, b.CreateConstInBoundsGEP1_64(ptr, entry->getArg(1), i)));
    args.push_back(entry->getArg(2));
    if (ranged) {
      args.push_back(entry->getArg(3));
      args.push_back(entry->getArg(4));
    } else if (rows > 0) {
      args.push_back(b.getInt64(0));
      args.push_back(b.getInt64(rows));
    }
    b.CreateCall(impl, args);
    b.CreateRetVoid();
  };
  define(symbol.str(), false);
  if (rows > 0)
    define(symbol.str() + rt::kRowsEntrySuffix, true);
}

/// Tells LLVM that no loop of an elementwise kernel carries a dependence
/// through memory (`llvm.loop.parallel_accesses` over every load and store,
/// what `#pragma omp simd` says): iteration i reads element i of each input
/// (or a broadcast value, only read) and writes element i of each output.
/// That stays true when an output is its input's memory (a donated buffer
/// written in place), for which LLVM's runtime alias check would otherwise
/// pick the scalar loop. Not for row kernels, whose loops carry sums.
void markLoopsParallel(llvm::Function &f) {
  if (f.isDeclaration())
    return;
  llvm::LLVMContext &c = f.getContext();
  llvm::DominatorTree dominators(f);
  llvm::LoopInfo loops(dominators);
  llvm::MDNode *group = llvm::MDNode::getDistinct(c, {});
  bool any = false;
  for (llvm::BasicBlock &block : f) {
    if (!loops.getLoopFor(&block))
      continue;
    for (llvm::Instruction &inst : block)
      if (llvm::isa<llvm::LoadInst, llvm::StoreInst>(inst)) {
        inst.setMetadata(llvm::LLVMContext::MD_access_group, group);
        any = true;
      }
  }
  if (!any)
    return;
  for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
    llvm::Metadata *parallel[] = {
        llvm::MDString::get(c, "llvm.loop.parallel_accesses"), group};
    llvm::Metadata *operands[] = {nullptr, llvm::MDNode::get(c, parallel)};
    llvm::MDNode *id = llvm::MDNode::getDistinct(c, operands);
    id->replaceOperandWith(0, id);
    loop->setLoopID(id);
  }
}

/// Tells LLVM that the buffers of a row kernel do not overlap (`noalias`
/// on every pointer argument): no output shares memory with an input or
/// another output (the fusion pass never lets a row kernel write over its
/// input, dtensor's MarkDonations, writesElementwiseOver), and inputs are
/// only read. Without it LLVM checks every pair of buffers at run time
/// before each of the row kernel's short vectorized loops (8 rows and a
/// few sweeps per block: dozens of checks per block of 8 rows of 32).
void markPointersNoAlias(llvm::Function &f) {
  for (llvm::Argument &arg : f.args())
    if (arg.getType()->isPointerTy())
      arg.addAttr(llvm::Attribute::NoAlias);
}

/// Hints to the loop vectorizer on the element loops of a row kernel:
/// every innermost loop whose header carries nothing but its induction
/// variable (a sweep's fill or store loop; not the reductions, which carry
/// sums).
///
/// `keepWhole` (DTORCH_ROW_VECTOR_LOOPS): `llvm.loop.unroll.disable`, so
/// the loops stay whole until the loop vectorizer runs. Otherwise LLVM's
/// full unroll, which runs before the vectorizer, turns a short loop with
/// a small body (softmax's division over a row of 32 read back from
/// scratch) into 32 scalar operations that the SLP vectorizer leaves
/// scalar.
///
/// `foldTails` (rowKernelFoldsLoopTails: DTORCH_ROW_MASKED_TAILS, rows
/// shorter than 256): `llvm.loop.vectorize.predicate.enable`, so the
/// elements past the last whole vector run as part of a masked vector
/// iteration (AVX-512 masks) instead of a scalar remainder loop (a row of
/// 77 float32: 13 elements, each an exp, after one iteration of 64). The
/// same operations per element.
void hintElementLoops(llvm::Function &f, bool keepWhole, bool foldTails) {
  if (f.isDeclaration() || !(keepWhole || foldTails))
    return;
  llvm::LLVMContext &c = f.getContext();
  llvm::DominatorTree dominators(f);
  llvm::LoopInfo loops(dominators);
  for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
    if (!loop->isInnermost())
      continue;
    unsigned phis = 0;
    for (llvm::PHINode &phi : loop->getHeader()->phis()) {
      (void)phi;
      ++phis;
    }
    if (phis != 1)
      continue;
    llvm::SmallVector<llvm::Metadata *> operands = {nullptr};
    if (llvm::MDNode *old = loop->getLoopID())
      for (unsigned i = 1; i < old->getNumOperands(); ++i)
        operands.push_back(old->getOperand(i));
    if (keepWhole)
      operands.push_back(llvm::MDNode::get(
          c, {llvm::MDString::get(c, "llvm.loop.unroll.disable")}));
    if (foldTails)
      operands.push_back(llvm::MDNode::get(
          c, {llvm::MDString::get(c, "llvm.loop.vectorize.predicate.enable"),
              llvm::ConstantAsMetadata::get(llvm::ConstantInt::getTrue(c))}));
    llvm::MDNode *id = llvm::MDNode::getDistinct(c, operands);
    id->replaceOperandWith(0, id);
    loop->setLoopID(id);
  }
}

FailureOr<std::string> emitObject(llvm::Module &m, std::string &error) {
  const HostTarget &host = hostTarget();
  llvm::Triple triple(host.triple);
  const llvm::Target *target =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return failure();
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, host.cpu, host.features, options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!tm) {
    error = "cannot make a target machine for " + host.triple;
    return failure();
  }
  m.setTargetTriple(triple);
  m.setDataLayout(tm->createDataLayout());
  bool wide = wideVectorsFromEnvironment() &&
              host.features.find("+avx512f") != std::string::npos;
  for (llvm::Function &f : m)
    if (!f.isDeclaration()) {
      f.addFnAttr("target-cpu", host.cpu);
      f.addFnAttr("target-features", host.features);
      if (wide)
        f.addFnAttr("prefer-vector-width", "512");
    }

  optimizeModuleO3(m, *tm);

  std::string object;
  if (!emitWithTarget(m, *tm, /*assembly=*/false, object)) {
    error = "the target cannot emit object files";
    return failure();
  }
  return object;
}

/// Links an object into a shared object with ld.lld in a private temporary
/// folder, removed afterwards.
FailureOr<std::string> linkSharedObject(const std::string &object,
                                        std::string &error) {
  llvm::ErrorOr<std::string> lld = llvm::sys::findProgramByName("ld.lld-22");
  if (!lld)
    lld = llvm::sys::findProgramByName("ld.lld");
  if (!lld) {
    error = "ld.lld (lld-22) is not installed";
    return failure();
  }
  SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("dtorch-kernel", dir)) {
    error = "cannot make a temporary folder: " + ec.message();
    return failure();
  }
  SmallString<128> objPath(dir), soPath(dir);
  llvm::sys::path::append(objPath, "kernel.o");
  llvm::sys::path::append(soPath, "kernel.so");
  FailureOr<std::string> result = failure();
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(objPath, ec);
    if (!ec) {
      out << object;
      out.close();
    }
    if (ec)
      error = "cannot write " + objPath.str().str() + ": " + ec.message();
    else {
      SmallVector<StringRef> args = {*lld, "-shared",    "--hash-style=gnu",
                                     "-o", soPath.str(), objPath.str()};
      std::string message;
      int rc = llvm::sys::ExecuteAndWait(*lld, args, std::nullopt, {}, 0, 0,
                                         &message);
      if (rc != 0)
        error = "ld.lld failed (" + std::to_string(rc) + "): " + message;
      else if (auto buffer = llvm::MemoryBuffer::getFile(soPath))
        result = (*buffer)->getBuffer().str();
      else
        error = "cannot read " + soPath.str().str();
    }
  }
  llvm::sys::fs::remove(objPath);
  llvm::sys::fs::remove(soPath);
  llvm::sys::fs::remove(dir);
  return result;
}

wire::TensorSpec specOf(Type t) {
  auto tensor = cast<RankedTensorType>(t);
  wire::TensorSpec spec;
  spec.set_dtype(toWireDType(tensor.getElementType()));
  for (int64_t s : tensor.getShape())
    spec.add_shape(s);
  return spec;
}

FailureOr<std::shared_ptr<const GeneratedKernel>>
compileFusedKernel(rank::FusedOp op, const std::string &signature) {
  MLIRContext &ctx = codegenContext();
  // Diagnostics of the kernel module go to the fused op's context.
  std::string error;
  FailureOr<OwningOpRef<ModuleOp>> module = buildKernelModule(op, &ctx);
  if (failed(module))
    return failure();
  {
    std::string diagnostics;
    llvm::raw_string_ostream os(diagnostics);
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      os << d << "\n";
      return success();
    });
    if (failed((**module).verify()) || failed(lowerToLLVMDialect(**module)))
      return op.emitOpError("kernel generation failed: ") << diagnostics;
  }
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(**module, llvmContext, "dtorch_fused");
  if (!llvmModule)
    return op.emitOpError("kernel generation failed: no LLVM IR");

  if (!hasRowReduction(op.getBody().front())) {
    if (llvm::Function *impl = llvmModule->getFunction(kImplName))
      markLoopsParallel(*impl);
  } else {
    llvm::Function *impl = llvmModule->getFunction(kImplName);
    if (impl && rowKernelNoAliasFromEnvironment())
      markPointersNoAlias(*impl);
    if (impl)
      hintElementLoops(*impl, rowVectorLoopsFromEnvironment(),
                       rowKernelFoldsLoopTails(op.getBody().front()));
  }
  auto kernel = std::make_shared<GeneratedKernel>();
  kernel->set_symbol("dtorch_fused_" + rt::executableHash(signature));
  ArrayRef<int64_t> group =
      cast<RankedTensorType>(op.getResultTypes()[0]).getShape();
  int64_t rows = !hasRowReduction(op.getBody().front()) && hasRowRange(group)
                     ? group[0]
                     : 0;
  addEntryPoint(*llvmModule, kernel->symbol(), op.getInputs().size(),
                op.getNumResults(), rows);
  FailureOr<std::string> object = emitObject(*llvmModule, error);
  if (failed(object))
    return op.emitOpError("kernel generation failed: ") << error;
  FailureOr<std::string> shared = linkSharedObject(*object, error);
  if (failed(shared))
    return op.emitOpError("kernel generation failed: ") << error;
  kernel->set_object(std::move(*shared));
  // For inspection (objdump): DTORCH_KERNEL_DUMP_DIR=<folder> keeps a copy
  // of every generated shared object, named by its symbol.
  if (const char *dump = std::getenv("DTORCH_KERNEL_DUMP_DIR"); dump && *dump) {
    std::error_code ec;
    llvm::raw_fd_ostream out(std::string(dump) + "/" + kernel->symbol() + ".so",
                             ec);
    if (!ec)
      out << kernel->object();
  }
  kernel->set_content_hash(rt::executableHash(kernel->object()));
  for (Value in : op.getInputs())
    *kernel->add_inputs() = specOf(in.getType());
  for (Type t : op.getResultTypes())
    *kernel->add_outputs() = specOf(t);
  kernel->set_num_scalars(static_cast<int32_t>(fusedKernelScalars(op).size()));
  const HostTarget &host = hostTarget();
  kernel->set_target(host.triple + " " + host.cpu + " " + host.features);
  ++compiles;
  return std::shared_ptr<const GeneratedKernel>(std::move(kernel));
}

} // namespace

bool rowKernelNoAliasFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_ROW_KERNEL_NOALIAS");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

bool rowVectorLoopsFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_ROW_VECTOR_LOOPS");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

bool wideVectorsFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_WIDE_VECTORS");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

std::string fusedKernelSignature(rank::FusedOp op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  Block &body = op.getBody().front();
  llvm::DenseMap<Value, unsigned> number;
  for (BlockArgument arg : body.getArguments()) {
    number[arg] = number.size();
    os << "arg " << arg.getType() << ";";
  }
  for (Operation &inner : body) {
    os << inner.getName();
    if (auto kernel = dyn_cast<rank::KernelOp>(inner))
      os << " " << kernel.getKernel();
    os << "(";
    for (Value v : inner.getOperands())
      os << number.lookup(v) << ",";
    os << ")";
    // `full` values are arguments (fusedKernelScalars), not code.
    for (NamedAttribute a : inner.getAttrs())
      if (a.getName() != "kernel" && a.getName() != "value")
        os << " " << a.getName().getValue() << "=" << a.getValue();
    for (Value r : inner.getResults()) {
      number[r] = number.size();
      os << " : " << r.getType();
    }
    os << ";";
  }
  return os.str();
}

std::vector<double> fusedKernelScalars(rank::FusedOp op) {
  std::vector<double> values;
  for (Operation &inner : op.getBody().front().without_terminator())
    if (auto kernel = dyn_cast<rank::KernelOp>(inner);
        kernel && kernel.getKernel() == "full")
      values.push_back(
          cast<FloatAttr>(kernel->getAttr("value")).getValueAsDouble());
  return values;
}

FailureOr<std::shared_ptr<const GeneratedKernel>>
generateFusedKernel(rank::FusedOp op) {
  static std::mutex mutex;
  static auto *cache =
      new std::unordered_map<std::string,
                             std::shared_ptr<const GeneratedKernel>>();
  std::string signature = fusedKernelSignature(op);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache->find(signature);
  if (it != cache->end())
    return it->second;
  FailureOr<std::shared_ptr<const GeneratedKernel>> kernel =
      compileFusedKernel(op, signature);
  if (failed(kernel))
    return failure();
  cache->emplace(signature, *kernel);
  return kernel;
}

int64_t generatedKernelCompiles() { return compiles.load(); }

namespace codegen {

MLIRContext &hostKernelContext() { return codegenContext(); }

std::string hostKernelTarget() {
  const HostTarget &host = hostTarget();
  return host.triple + " " + host.cpu + " " + host.features;
}

FailureOr<std::string>
compileHostKernelModule(ModuleOp module, StringRef symbol, unsigned numInputs,
                        unsigned numOutputs, int64_t rows, bool parallelLoops,
                        std::string &error) {
  if (failed(lowerToLLVMDialect(module))) {
    error = "lowering to the LLVM dialect failed";
    return failure();
  }
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext, "dtorch_kernel");
  if (!llvmModule) {
    error = "no LLVM IR";
    return failure();
  }
  llvm::Function *impl = llvmModule->getFunction(kImplName);
  if (!impl) {
    error = "the module has no @" + kImplName.str();
    return failure();
  }
  if (parallelLoops)
    markLoopsParallel(*impl);
  addEntryPoint(*llvmModule, symbol, numInputs, numOutputs, rows);
  FailureOr<std::string> object = emitObject(*llvmModule, error);
  if (failed(object))
    return failure();
  FailureOr<std::string> shared = linkSharedObject(*object, error);
  if (failed(shared))
    return failure();
  if (const char *dump = std::getenv("DTORCH_KERNEL_DUMP_DIR"); dump && *dump) {
    std::error_code ec;
    llvm::raw_fd_ostream out(std::string(dump) + "/" + symbol.str() + ".so",
                             ec);
    if (!ec)
      out << *shared;
  }
  return shared;
}

} // namespace codegen

} // namespace dtorch
