//===- OptimizerKernelCodegen.cpp - optimizer updates to native code ------===//
//
// One road for every multi-tensor optimizer update (rank.fused_adam,
// rank.fused_sgd; rank::OptimizerGroups), parameterised by its rule (the
// 0-d terms and the update of one element):
//
// Host: func @dtorch_fused_impl(scalar inputs, tensors..., outputs...,
// scalars, begin, end) computes the 0-d terms once, then for each parameter
// the part of [begin, end) (the elements of every parameter one after the
// other) that falls on it, as one linalg.generic over subviews of its
// group; the kernel codegen lowers it to loops and LLVM and links it
// (compileHostKernelModule). GPU: one scf.parallel over all elements whose
// body picks the parameter an element belongs to, mapped to blocks of
// threads and lowered to PTX (lowerParallelModuleToPtx).
//
//===----------------------------------------------------------------------===//
#include "OptimizerKernelCodegen.h"

#include "GpuKernelCodegen.h"
#include "KernelCodegenSupport.h"
#include "ProgramEmitter.h"

#include "dtorch/runtime/Executable.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

using namespace mlir;

namespace dtorch {
namespace {

using namespace codegen;

std::atomic<int64_t> adamCompiles{0};
std::atomic<int64_t> sgdCompiles{0};

/// How weight decay enters (as the hand-written kernel chooses): not at all
/// (weight_decay = 0), added to the gradient (Adam), or applied to the
/// parameter (AdamW).
enum class Decay { None, L2, Decoupled };

struct AdamMode {
  Decay decay = Decay::None;
  bool amsgrad = false;
  bool maximize = false;
};

AdamMode modeOf(rank::FusedAdamOp op) {
  AdamMode mode;
  if (op.getWeightDecay().convertToDouble() != 0)
    mode.decay = op.getDecoupled() ? Decay::Decoupled : Decay::L2;
  mode.amsgrad = op.getAmsgrad() != 0;
  mode.maximize = op.getMaximize() != 0;
  return mode;
}

/// The 0-d terms of one call in one compute type (float32 or float64).
struct AdamTerms {
  Value stepSize, biasCorrection2Sqrt, decay, weightDecay, sign;
  Value lerpFromStart; // i1
  Value lerpWeight, beta2, oneMinusBeta2, eps;
};

/// The terms in float64 from step, lr and the hyper-parameters, as the
/// hand-written kernel computes them (libm pow, IEEE sqrt), then rounded
/// once to `compute`.
AdamTerms emitTerms(OpBuilder &b, Location loc, Value step, Value lr,
                    Value beta1, Value beta2, Value eps, Value weightDecay,
                    Type compute, const AdamMode &mode) {
  auto f64 = [&](double v) -> Value {
    return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v));
  };
  Value one = f64(1.0);
  Value biasCorrection1 = arith::SubFOp::create(
      b, loc, one, math::PowFOp::create(b, loc, beta1, step));
  Value stepSize = arith::DivFOp::create(b, loc, lr, biasCorrection1);
  Value biasCorrection2Sqrt = math::SqrtOp::create(
      b, loc,
      arith::SubFOp::create(b, loc, one,
                            math::PowFOp::create(b, loc, beta2, step)));
  Value decay = arith::SubFOp::create(
      b, loc, one, arith::MulFOp::create(b, loc, lr, weightDecay));
  Value w = arith::SubFOp::create(b, loc, one, beta1);
  Value lerpFromStart =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT,
                            math::AbsFOp::create(b, loc, w), f64(0.5));
  Value lerpWeight = arith::SelectOp::create(
      b, loc, lerpFromStart, w, arith::SubFOp::create(b, loc, one, w));
  Value oneMinusBeta2 = arith::SubFOp::create(b, loc, one, beta2);
  auto rounded = [&](Value v) -> Value {
    return compute.isF64() ? v : arith::TruncFOp::create(b, loc, compute, v);
  };
  AdamTerms t;
  t.stepSize = rounded(stepSize);
  t.biasCorrection2Sqrt = rounded(biasCorrection2Sqrt);
  t.decay = rounded(decay);
  t.weightDecay = rounded(weightDecay);
  t.sign = arith::ConstantOp::create(
      b, loc, b.getFloatAttr(compute, mode.maximize ? -1.0 : 1.0));
  t.lerpFromStart = lerpFromStart;
  t.lerpWeight = rounded(lerpWeight);
  t.beta2 = rounded(beta2);
  t.oneMinusBeta2 = rounded(oneMinusBeta2);
  t.eps = rounded(eps);
  return t;
}

/// The update of one element: `stored` holds param, grad, exp_avg,
/// exp_avg_sq (and max_exp_avg_sq) in their storage type; returns the new
/// param, exp_avg, exp_avg_sq (and max_exp_avg_sq) in it. The hand-written
/// kernel's operations in its order.
SmallVector<Value> emitAdamElement(OpBuilder &b, Location loc,
                                   ValueRange stored, const ElementTypes &et,
                                   const AdamTerms &t, const AdamMode &mode) {
  auto in = [&](unsigned k) { return toComputeType(b, loc, stored[k], et); };
  Value p = in(0);
  Value g = arith::MulFOp::create(b, loc, in(1), t.sign);
  Value m = in(2), v = in(3);
  if (mode.decay == Decay::L2)
    g = arith::AddFOp::create(b, loc, g,
                              arith::MulFOp::create(b, loc, p, t.weightDecay));
  if (mode.decay == Decay::Decoupled)
    p = arith::MulFOp::create(b, loc, p, t.decay);
  Value diff = arith::SubFOp::create(b, loc, g, m);
  Value step = arith::MulFOp::create(b, loc, diff, t.lerpWeight);
  m = arith::SelectOp::create(b, loc, t.lerpFromStart,
                              arith::AddFOp::create(b, loc, m, step),
                              arith::SubFOp::create(b, loc, g, step));
  v = arith::AddFOp::create(
      b, loc, arith::MulFOp::create(b, loc, v, t.beta2),
      arith::MulFOp::create(b, loc, arith::MulFOp::create(b, loc, g, g),
                            t.oneMinusBeta2));
  Value used = v;
  if (mode.amsgrad) {
    // maximum's rule: NaN propagates, else the larger.
    Value previous = in(4);
    Value take = arith::OrIOp::create(
        b, loc,
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, previous,
                              previous),
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGT, previous, v));
    used = arith::SelectOp::create(b, loc, take, previous, v);
  }
  Value denom = arith::AddFOp::create(
      b, loc,
      arith::DivFOp::create(b, loc, math::SqrtOp::create(b, loc, used),
                            t.biasCorrection2Sqrt),
      t.eps);
  p = arith::SubFOp::create(
      b, loc, p,
      arith::MulFOp::create(b, loc, t.stepSize,
                            arith::DivFOp::create(b, loc, m, denom)));
  SmallVector<Value> out = {toStorageType(b, loc, p, et),
                            toStorageType(b, loc, m, et),
                            toStorageType(b, loc, v, et)};
  if (mode.amsgrad)
    out.push_back(toStorageType(b, loc, used, et));
  return out;
}

/// Adam's rule for the shared builders: step and lr, then beta1, beta2,
/// eps and weight_decay as the call's scalars.
struct AdamRule {
  using Terms = AdamTerms;
  static constexpr const char *kSymbolPrefix = "dtorch_adam_";
  static constexpr int kNumHyper = 4;
  AdamMode mode;
  std::atomic<int64_t> &compiles = adamCompiles;

  Terms terms(OpBuilder &b, Location loc, ArrayRef<Value> scalarInputs,
              ArrayRef<Value> hyper, Type compute) const {
    return emitTerms(b, loc, scalarInputs[0], scalarInputs[1], hyper[0],
                     hyper[1], hyper[2], hyper[3], compute, mode);
  }
  SmallVector<Value> element(OpBuilder &b, Location loc, ValueRange stored,
                             const ElementTypes &et, const Terms &t) const {
    return emitAdamElement(b, loc, stored, et, t, mode);
  }
};

//===----------------------------------------------------------------------===//
// SGD (rank.fused_sgd)
//===----------------------------------------------------------------------===//

/// The structure of an SGD update (as the hand-written kernel chooses):
/// weight decay on or off, momentum buffers (and whether this is the step
/// that starts them), Nesterov, maximize. momentum, dampening and
/// weight_decay themselves are call scalars.
struct SgdMode {
  bool decay = false, momentum = false, firstStep = false, nesterov = false,
       maximize = false;
};

SgdMode modeOf(rank::FusedSgdOp op) {
  SgdMode mode;
  mode.decay = op.getWeightDecay().convertToDouble() != 0;
  mode.momentum = op.hasMomentum();
  mode.firstStep = op.getFirstStep() != 0;
  mode.nesterov = op.getNesterov() != 0;
  mode.maximize = op.getMaximize() != 0;
  return mode;
}

/// SGD's 0-d terms in one compute type: lr and the hyper-parameters
/// rounded once from float64 (1 - dampening computed in float64 first, as
/// the per-op path's Python number is).
struct SgdTerms {
  Value lr, momentum, oneMinusDampening, weightDecay;
};

/// The update of one element: `stored` holds param, grad (and the momentum
/// buffer after the first step) in their storage type; returns the new
/// param (and buffer) in it. The hand-written kernel's operations in its
/// order.
SmallVector<Value> emitSgdElement(OpBuilder &b, Location loc, ValueRange stored,
                                  const ElementTypes &et, const SgdTerms &t,
                                  const SgdMode &mode) {
  auto in = [&](unsigned k) { return toComputeType(b, loc, stored[k], et); };
  Value p = in(0);
  Value g = in(1);
  if (mode.maximize)
    g = arith::NegFOp::create(b, loc, g);
  if (mode.decay)
    g = arith::AddFOp::create(b, loc, g,
                              arith::MulFOp::create(b, loc, p, t.weightDecay));
  Value buf;
  if (mode.momentum) {
    if (mode.firstStep)
      buf = g;
    else
      buf = arith::AddFOp::create(
          b, loc, arith::MulFOp::create(b, loc, in(2), t.momentum),
          arith::MulFOp::create(b, loc, g, t.oneMinusDampening));
    g = mode.nesterov
            ? Value(arith::AddFOp::create(
                  b, loc, g, arith::MulFOp::create(b, loc, buf, t.momentum)))
            : buf;
  }
  p = arith::SubFOp::create(b, loc, p, arith::MulFOp::create(b, loc, t.lr, g));
  SmallVector<Value> out = {toStorageType(b, loc, p, et)};
  if (mode.momentum)
    out.push_back(toStorageType(b, loc, buf, et));
  return out;
}

/// SGD's rule for the shared builders: lr, then momentum, dampening and
/// weight_decay as the call's scalars.
struct SgdRule {
  using Terms = SgdTerms;
  static constexpr const char *kSymbolPrefix = "dtorch_sgd_";
  static constexpr int kNumHyper = 3;
  SgdMode mode;
  std::atomic<int64_t> &compiles = sgdCompiles;

  Terms terms(OpBuilder &b, Location loc, ArrayRef<Value> scalarInputs,
              ArrayRef<Value> hyper, Type compute) const {
    auto rounded = [&](Value v) -> Value {
      return compute.isF64() ? v : arith::TruncFOp::create(b, loc, compute, v);
    };
    Value one = arith::ConstantOp::create(b, loc, b.getF64FloatAttr(1.0));
    SgdTerms t;
    t.lr = rounded(scalarInputs[0]);
    t.momentum = rounded(hyper[0]);
    t.oneMinusDampening = rounded(arith::SubFOp::create(b, loc, one, hyper[1]));
    t.weightDecay = rounded(hyper[2]);
    return t;
  }
  SmallVector<Value> element(OpBuilder &b, Location loc, ValueRange stored,
                             const ElementTypes &et, const Terms &t) const {
    return emitSgdElement(b, loc, stored, et, t, mode);
  }
};

//===----------------------------------------------------------------------===//
// The shared builders
//===----------------------------------------------------------------------===//

/// What the builders need to know of the op.
struct UpdateLayout {
  rank::OptimizerGroups groups;
  SmallVector<Type> elementTypes; // per parameter
  SmallVector<int64_t> numel;     // per parameter
  SmallVector<int64_t> base;      // first element of each in the sequence
  int64_t total = 0;
};

FailureOr<UpdateLayout> layoutOf(Operation *op) {
  UpdateLayout l;
  l.groups = *rank::optimizerGroupsOf(op);
  for (int64_t i = 0; i < l.groups.numParams; ++i) {
    auto t =
        cast<RankedTensorType>(op->getOperand(l.groups.input(0, i)).getType());
    Type e = t.getElementType();
    if (!e.isF32() && !e.isF64() && !e.isF16() && !e.isBF16())
      return op->emitOpError("cannot generate the update of a parameter of ")
             << e;
    l.elementTypes.push_back(e);
    l.base.push_back(l.total);
    l.numel.push_back(t.getNumElements());
    l.total += t.getNumElements();
  }
  return l;
}

/// The kernel function's arguments: the 0-d inputs as memref<1xf64>, every
/// tensor and output flattened to memref<numel x storage>; then `extra`.
SmallVector<Type> tensorArgTypes(const UpdateLayout &l, MLIRContext *ctx) {
  SmallVector<Type> types;
  const rank::OptimizerGroups &g = l.groups;
  Type f64 = Float64Type::get(ctx);
  for (unsigned k = 0; k < g.scalarInputs; ++k)
    types.push_back(MemRefType::get({1}, f64));
  auto flat = [&](int64_t i) {
    return MemRefType::get({l.numel[i]},
                           elementTypesFor(l.elementTypes[i], ctx).storage);
  };
  for (int64_t k = 0; k < g.inputsPerParam; ++k)
    for (int64_t i = 0; i < g.numParams; ++i)
      types.push_back(flat(i));
  for (int64_t k = 0; k < g.resultsPerParam; ++k)
    for (int64_t i = 0; i < g.numParams; ++i)
      types.push_back(flat(i));
  return types;
}

/// Loads element 0 of a memref<1xf64>.
Value loadScalar(OpBuilder &b, Location loc, Value memref) {
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  return memref::LoadOp::create(b, loc, memref, ValueRange{zero});
}

/// The index of output k of parameter i among the kernel's arguments.
unsigned outputArg(const rank::OptimizerGroups &g, int64_t k, int64_t i) {
  return static_cast<unsigned>(g.scalarInputs +
                               (g.inputsPerParam + k) * g.numParams + i);
}

/// The host kernel: terms once, then one linalg.generic per parameter over
/// its part of [begin, end).
template <typename Rule>
OwningOpRef<ModuleOp> buildHostModule(const UpdateLayout &l, const Rule &rule,
                                      MLIRContext *ctx) {
  Location loc = UnknownLoc::get(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(module->getBody());
  const rank::OptimizerGroups &g = l.groups;
  SmallVector<Type> argTypes = tensorArgTypes(l, ctx);
  size_t numTensorArgs = argTypes.size();
  argTypes.push_back(MemRefType::get({Rule::kNumHyper}, Float64Type::get(ctx)));
  argTypes.push_back(b.getIndexType());
  argTypes.push_back(b.getIndexType());
  auto fn = func::FuncOp::create(b, loc, kHostKernelImplName,
                                 b.getFunctionType(argTypes, {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  ValueRange args = entry->getArguments();
  Value scalars = args[numTensorArgs];
  Value begin = args[numTensorArgs + 1], end = args[numTensorArgs + 2];
  SmallVector<Value> scalarInputs, hyper;
  for (unsigned k = 0; k < g.scalarInputs; ++k)
    scalarInputs.push_back(loadScalar(b, loc, args[k]));
  for (int k = 0; k < Rule::kNumHyper; ++k)
    hyper.push_back(memref::LoadOp::create(
        b, loc, scalars,
        ValueRange{arith::ConstantIndexOp::create(b, loc, k)}));
  // The terms in each compute type the parameters need.
  std::optional<typename Rule::Terms> terms32, terms64;
  auto termsFor = [&](Type compute) -> const typename Rule::Terms & {
    std::optional<typename Rule::Terms> &t =
        compute.isF64() ? terms64 : terms32;
    if (!t)
      t = rule.terms(b, loc, scalarInputs, hyper, compute);
    return *t;
  };
  for (int64_t i = 0; i < g.numParams; ++i)
    (void)termsFor(elementTypesFor(l.elementTypes[i], ctx).compute);

  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  for (int64_t i = 0; i < g.numParams; ++i) {
    if (l.numel[i] == 0)
      continue;
    ElementTypes et = elementTypesFor(l.elementTypes[i], ctx);
    const typename Rule::Terms &terms = termsFor(et.compute);
    Value base = arith::ConstantIndexOp::create(b, loc, l.base[i]);
    Value count = arith::ConstantIndexOp::create(b, loc, l.numel[i]);
    auto clamp = [&](Value v) -> Value {
      Value shifted = arith::SubIOp::create(b, loc, v, base);
      return arith::MinSIOp::create(
          b, loc, arith::MaxSIOp::create(b, loc, shifted, zero), count);
    };
    Value from = clamp(begin), to = clamp(end);
    Value any =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, from, to);
    auto ifOp = scf::IfOp::create(b, loc, any, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value size = arith::SubIOp::create(b, loc, to, from);
    auto part = [&](Value whole) -> Value {
      SmallVector<OpFoldResult> offsets = {from}, sizes = {size},
                                strides = {b.getIndexAttr(1)};
      return memref::SubViewOp::create(b, loc, whole, offsets, sizes, strides);
    };
    SmallVector<Value> ins, outs;
    for (int64_t k = 0; k < g.inputsPerParam; ++k)
      ins.push_back(part(args[g.input(k, i)]));
    for (int64_t k = 0; k < g.resultsPerParam; ++k)
      outs.push_back(part(args[outputArg(g, k, i)]));
    SmallVector<AffineMap> maps(ins.size() + outs.size(),
                                AffineMap::getMultiDimIdentityMap(1, ctx));
    linalg::GenericOp::create(
        b, loc, TypeRange{}, ins, outs, maps,
        SmallVector<utils::IteratorType>{utils::IteratorType::parallel},
        [&](OpBuilder &nb, Location nloc, ValueRange elements) {
          SmallVector<Value> results = rule.element(
              nb, nloc, elements.take_front(g.inputsPerParam), et, terms);
          linalg::YieldOp::create(nb, nloc, results);
        });
  }
  func::ReturnOp::create(b, loc);
  return module;
}

/// The GPU kernel: one scf.parallel over every element; an element of
/// parameter i updates that parameter's group. The terms are computed by
/// each thread (the launch passes only buffers and the call's scalars).
template <typename Rule>
OwningOpRef<ModuleOp> buildGpuModule(const UpdateLayout &l, const Rule &rule,
                                     MLIRContext *ctx, StringRef symbol) {
  Location loc = UnknownLoc::get(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(module->getBody());
  const rank::OptimizerGroups &g = l.groups;
  SmallVector<Type> argTypes = tensorArgTypes(l, ctx);
  size_t numTensorArgs = argTypes.size();
  argTypes.append(Rule::kNumHyper, Float64Type::get(ctx));
  auto fn =
      func::FuncOp::create(b, loc, symbol, b.getFunctionType(argTypes, {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  ValueRange args = entry->getArguments();
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  Value total = arith::ConstantIndexOp::create(b, loc, l.total);
  auto loop = scf::ParallelOp::create(b, loc, ValueRange{zero},
                                      ValueRange{total}, ValueRange{one});
  b.setInsertionPointToStart(loop.getBody());
  Value e = loop.getInductionVars()[0];
  SmallVector<Value> scalarInputs, hyper;
  for (unsigned k = 0; k < g.scalarInputs; ++k)
    scalarInputs.push_back(loadScalar(b, loc, args[k]));
  for (int k = 0; k < Rule::kNumHyper; ++k)
    hyper.push_back(args[numTensorArgs + k]);
  std::optional<typename Rule::Terms> terms32, terms64;
  int64_t n = g.numParams;
  for (int64_t i = 0; i < n; ++i) {
    if (l.numel[i] == 0)
      continue;
    ElementTypes et = elementTypesFor(l.elementTypes[i], ctx);
    std::optional<typename Rule::Terms> &terms =
        et.compute.isF64() ? terms64 : terms32;
    if (!terms)
      terms = rule.terms(b, loc, scalarInputs, hyper, et.compute);
    Value lo = arith::ConstantIndexOp::create(b, loc, l.base[i]);
    Value hi = arith::ConstantIndexOp::create(b, loc, l.base[i] + l.numel[i]);
    Value inside = arith::AndIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, e, lo),
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, e, hi));
    auto ifOp = scf::IfOp::create(b, loc, inside, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    Value j = arith::SubIOp::create(b, loc, e, lo);
    SmallVector<Value> stored;
    for (int64_t k = 0; k < g.inputsPerParam; ++k)
      stored.push_back(
          memref::LoadOp::create(b, loc, args[g.input(k, i)], ValueRange{j}));
    SmallVector<Value> results = rule.element(b, loc, stored, et, *terms);
    for (int64_t k = 0; k < g.resultsPerParam; ++k)
      memref::StoreOp::create(b, loc, results[k], args[outputArg(g, k, i)],
                              ValueRange{j});
  }
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
  return module;
}

wire::TensorSpec specOf(Type t) {
  auto tensor = cast<RankedTensorType>(t);
  wire::TensorSpec spec;
  spec.set_dtype(toWireDType(tensor.getElementType()));
  for (int64_t s : tensor.getShape())
    spec.add_shape(s);
  return spec;
}

void describeCall(Operation *op, int numHyper, GeneratedKernel &kernel) {
  for (Value in : op->getOperands())
    *kernel.add_inputs() = specOf(in.getType());
  for (Type t : op->getResultTypes())
    *kernel.add_outputs() = specOf(t);
  kernel.set_num_scalars(numHyper);
}

template <typename Rule>
FailureOr<std::shared_ptr<const GeneratedKernel>>
compileHost(Operation *op, const Rule &rule, const std::string &signature) {
  FailureOr<UpdateLayout> layout = layoutOf(op);
  if (failed(layout))
    return failure();
  MLIRContext &ctx = hostKernelContext();
  OwningOpRef<ModuleOp> module = buildHostModule(*layout, rule, &ctx);
  std::string symbol = Rule::kSymbolPrefix + rt::executableHash(signature);
  std::string diagnostics, error;
  FailureOr<std::string> shared = failure();
  {
    llvm::raw_string_ostream os(diagnostics);
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
      os << d << "\n";
      return success();
    });
    if (failed(mlir::verify(*module)))
      error = "the kernel function does not verify";
    else
      shared = compileHostKernelModule(
          *module, symbol, static_cast<unsigned>(op->getNumOperands()),
          static_cast<unsigned>(op->getNumResults()),
          std::max<int64_t>(layout->total, 1), /*parallelLoops=*/true, error);
  }
  if (failed(shared))
    return op->emitOpError("kernel generation failed: ")
           << error << (diagnostics.empty() ? "" : ": ") << diagnostics;
  auto kernel = std::make_shared<GeneratedKernel>();
  kernel->set_symbol(symbol);
  kernel->set_object(std::move(*shared));
  kernel->set_content_hash(rt::executableHash(kernel->object()));
  describeCall(op, Rule::kNumHyper, *kernel);
  kernel->set_target(hostKernelTarget());
  ++rule.compiles;
  return std::shared_ptr<const GeneratedKernel>(std::move(kernel));
}

template <typename Rule>
FailureOr<std::shared_ptr<const GeneratedKernel>>
compileGpu(Operation *op, const Rule &rule, StringRef arch,
           const std::string &signature) {
  FailureOr<UpdateLayout> layout = layoutOf(op);
  if (failed(layout))
    return failure();
  MLIRContext &ctx = gpuKernelContext();
  std::string symbol = std::string(Rule::kSymbolPrefix) + "gpu_" +
                       rt::executableHash(signature + arch.str());
  OwningOpRef<ModuleOp> module = buildGpuModule(*layout, rule, &ctx, symbol);
  GpuKernelBuild build;
  std::string text;
  if (failed(lowerParallelModuleToPtx(op, *module, arch, symbol, layout->total,
                                      GpuKernelStage::Ptx, text, build)))
    return failure();
  auto kernel = std::make_shared<GeneratedKernel>();
  kernel->set_symbol(build.entry);
  wire::GpuKernel &gpu = *kernel->mutable_gpu();
  gpu.set_ptx(build.ptx);
  gpu.set_entry(build.entry);
  gpu.set_arch(arch.str());
  gpu.set_grid_x(build.gridX);
  gpu.set_block_x(build.blockX);
  for (int32_t p : build.params)
    gpu.add_params(p);
  kernel->set_content_hash(rt::executableHash(gpu.SerializeAsString()));
  describeCall(op, Rule::kNumHyper, *kernel);
  kernel->set_target("nvptx64-nvidia-cuda " + arch.str());
  ++rule.compiles;
  return std::shared_ptr<const GeneratedKernel>(std::move(kernel));
}

using KernelCache =
    std::unordered_map<std::string, std::shared_ptr<const GeneratedKernel>>;

/// The cached kernel of a signature declaring `op`'s own buffers: the
/// signature counts elements, so a parameter of another shape with as many
/// elements shares the code but not the declared shapes.
std::shared_ptr<const GeneratedKernel>
forCall(Operation *op, int numHyper,
        const std::shared_ptr<const GeneratedKernel> &cached) {
  auto kernel = std::make_shared<GeneratedKernel>(*cached);
  kernel->clear_inputs();
  kernel->clear_outputs();
  describeCall(op, numHyper, *kernel);
  if (kernel->SerializeAsString() == cached->SerializeAsString())
    return cached;
  return kernel;
}

/// The kernel of `op` for `arch` ("" for the host) from its rule's
/// process-wide cache (one per rule), else compiled now.
template <typename Rule>
FailureOr<std::shared_ptr<const GeneratedKernel>>
generateKernel(Operation *op, const Rule &rule, const std::string &signature,
               StringRef arch) {
  static std::mutex mutex;
  static auto *cache = new KernelCache();
  std::string key = arch.str() + "|" + signature;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache->find(key);
  if (it != cache->end())
    return forCall(op, Rule::kNumHyper, it->second);
  FailureOr<std::shared_ptr<const GeneratedKernel>> kernel =
      arch.empty() ? compileHost(op, rule, signature)
                   : compileGpu(op, rule, arch, signature);
  if (failed(kernel))
    return failure();
  cache->emplace(key, *kernel);
  return kernel;
}

/// "dtype x numel;" per parameter: the part of a signature that the
/// parameters give.
void writeParamSignature(Operation *op, llvm::raw_ostream &os) {
  rank::OptimizerGroups g = *rank::optimizerGroupsOf(op);
  for (int64_t i = 0; i < g.numParams; ++i) {
    auto t = cast<RankedTensorType>(op->getOperand(g.input(0, i)).getType());
    os << t.getElementType() << "x" << t.getNumElements() << ";";
  }
}

} // namespace

bool generatedAdamEnabledByEnvironment() {
  const char *value = std::getenv("DTORCH_GENERATED_ADAM");
  return !(value && std::string(value) == "0");
}

std::string fusedAdamKernelSignature(rank::FusedAdamOp op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  AdamMode mode = modeOf(op);
  os << "adam n=" << op.getNumParams()
     << " decay=" << static_cast<int>(mode.decay) << " amsgrad=" << mode.amsgrad
     << " maximize=" << mode.maximize << ";";
  writeParamSignature(op, os);
  return os.str();
}

std::vector<double> fusedAdamKernelScalars(rank::FusedAdamOp op) {
  return {op.getBeta1().convertToDouble(), op.getBeta2().convertToDouble(),
          op.getEps().convertToDouble(), op.getWeightDecay().convertToDouble()};
}

FailureOr<std::shared_ptr<const GeneratedKernel>>
generateFusedAdamKernel(rank::FusedAdamOp op) {
  return generateKernel(op, AdamRule{modeOf(op)}, fusedAdamKernelSignature(op),
                        "");
}

FailureOr<std::shared_ptr<const GeneratedKernel>>
generateFusedAdamGpuKernel(rank::FusedAdamOp op, StringRef arch) {
  return generateKernel(op, AdamRule{modeOf(op)}, fusedAdamKernelSignature(op),
                        arch);
}

int64_t generatedAdamKernelCompiles() { return adamCompiles.load(); }

std::string fusedSgdKernelSignature(rank::FusedSgdOp op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  SgdMode mode = modeOf(op);
  os << "sgd n=" << op.getNumParams() << " decay=" << mode.decay
     << " momentum=" << mode.momentum << " first=" << mode.firstStep
     << " nesterov=" << mode.nesterov << " maximize=" << mode.maximize << ";";
  writeParamSignature(op, os);
  return os.str();
}

std::vector<double> fusedSgdKernelScalars(rank::FusedSgdOp op) {
  return {op.getMomentum().convertToDouble(),
          op.getDampening().convertToDouble(),
          op.getWeightDecay().convertToDouble()};
}

FailureOr<std::shared_ptr<const GeneratedKernel>>
generateFusedSgdKernel(rank::FusedSgdOp op, StringRef arch) {
  return generateKernel(op, SgdRule{modeOf(op)}, fusedSgdKernelSignature(op),
                        arch);
}

int64_t generatedSgdKernelCompiles() { return sgdCompiles.load(); }

FailureOr<std::shared_ptr<const GeneratedKernel>>
generateOptimizerKernel(Operation *op, StringRef arch,
                        std::vector<double> &scalars) {
  if (auto adam = dyn_cast<rank::FusedAdamOp>(op)) {
    scalars = fusedAdamKernelScalars(adam);
    return arch.empty() ? generateFusedAdamKernel(adam)
                        : generateFusedAdamGpuKernel(adam, arch);
  }
  auto sgd = cast<rank::FusedSgdOp>(op);
  scalars = fusedSgdKernelScalars(sgd);
  return generateFusedSgdKernel(sgd, arch);
}

} // namespace dtorch
