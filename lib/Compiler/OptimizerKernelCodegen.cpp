//===- OptimizerKernelCodegen.cpp - rank.fused_adam to native code --------===//
//
// Host: func @dtorch_fused_impl(step, lr, tensors..., outputs..., scalars,
// begin, end) computes the 0-d terms once, then for each parameter the part
// of [begin, end) (the elements of every parameter one after the other)
// that falls on it, as one linalg.generic over subviews of its group; the
// kernel codegen lowers it to loops and LLVM and links it
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

/// What the builders need to know of the op.
struct AdamLayout {
  int64_t numParams = 0;
  int64_t perParam = 4;
  SmallVector<Type> elementTypes; // per parameter
  SmallVector<int64_t> numel;     // per parameter
  SmallVector<int64_t> base;      // first element of each in the sequence
  int64_t total = 0;
  AdamMode mode;
};

FailureOr<AdamLayout> layoutOf(rank::FusedAdamOp op) {
  AdamLayout l;
  l.numParams = op.getNumParams();
  l.perParam = op.getTensorsPerParam();
  l.mode = modeOf(op);
  for (int64_t i = 0; i < l.numParams; ++i) {
    auto t = cast<RankedTensorType>(op.getInputs()[2 + i].getType());
    Type e = t.getElementType();
    if (!e.isF32() && !e.isF64() && !e.isF16() && !e.isBF16())
      return op.emitOpError("cannot generate the update of a parameter of ")
             << e;
    l.elementTypes.push_back(e);
    l.base.push_back(l.total);
    l.numel.push_back(t.getNumElements());
    l.total += t.getNumElements();
  }
  return l;
}

/// The kernel function's arguments: step and lr as memref<1xf64>, every
/// tensor and output flattened to memref<numel x storage>; then `extra`.
SmallVector<Type> tensorArgTypes(const AdamLayout &l, MLIRContext *ctx) {
  SmallVector<Type> types;
  Type f64 = Float64Type::get(ctx);
  types.push_back(MemRefType::get({1}, f64));
  types.push_back(MemRefType::get({1}, f64));
  auto flat = [&](int64_t i) {
    return MemRefType::get({l.numel[i]},
                           elementTypesFor(l.elementTypes[i], ctx).storage);
  };
  for (int64_t k = 0; k < l.perParam; ++k)
    for (int64_t i = 0; i < l.numParams; ++i)
      types.push_back(flat(i));
  for (int64_t k = 0; k + 1 < l.perParam; ++k)
    for (int64_t i = 0; i < l.numParams; ++i)
      types.push_back(flat(i));
  return types;
}

/// Loads element 0 of a memref<1xf64>.
Value loadScalar(OpBuilder &b, Location loc, Value memref) {
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  return memref::LoadOp::create(b, loc, memref, ValueRange{zero});
}

/// The host kernel: terms once, then one linalg.generic per parameter over
/// its part of [begin, end).
OwningOpRef<ModuleOp> buildHostModule(const AdamLayout &l, MLIRContext *ctx) {
  Location loc = UnknownLoc::get(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(module->getBody());
  SmallVector<Type> argTypes = tensorArgTypes(l, ctx);
  size_t numTensorArgs = argTypes.size();
  argTypes.push_back(MemRefType::get({4}, Float64Type::get(ctx)));
  argTypes.push_back(b.getIndexType());
  argTypes.push_back(b.getIndexType());
  auto fn = func::FuncOp::create(b, loc, kHostKernelImplName,
                                 b.getFunctionType(argTypes, {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  ValueRange args = entry->getArguments();
  Value scalars = args[numTensorArgs];
  Value begin = args[numTensorArgs + 1], end = args[numTensorArgs + 2];
  auto hyper = [&](int64_t k) -> Value {
    return memref::LoadOp::create(
        b, loc, scalars, ValueRange{arith::ConstantIndexOp::create(b, loc, k)});
  };
  Value step = loadScalar(b, loc, args[0]), lr = loadScalar(b, loc, args[1]);
  Value beta1 = hyper(0), beta2 = hyper(1), eps = hyper(2), wd = hyper(3);
  // The terms in each compute type the parameters need.
  std::optional<AdamTerms> terms32, terms64;
  auto termsFor = [&](Type compute) -> const AdamTerms & {
    std::optional<AdamTerms> &t = compute.isF64() ? terms64 : terms32;
    if (!t)
      t = emitTerms(b, loc, step, lr, beta1, beta2, eps, wd, compute, l.mode);
    return *t;
  };
  for (int64_t i = 0; i < l.numParams; ++i)
    (void)termsFor(elementTypesFor(l.elementTypes[i], ctx).compute);

  int64_t n = l.numParams;
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (l.numel[i] == 0)
      continue;
    ElementTypes et = elementTypesFor(l.elementTypes[i], ctx);
    const AdamTerms &terms = termsFor(et.compute);
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
    for (int64_t k = 0; k < l.perParam; ++k)
      ins.push_back(part(args[2 + k * n + i]));
    for (int64_t k = 0; k + 1 < l.perParam; ++k)
      outs.push_back(part(args[2 + l.perParam * n + k * n + i]));
    SmallVector<AffineMap> maps(ins.size() + outs.size(),
                                AffineMap::getMultiDimIdentityMap(1, ctx));
    linalg::GenericOp::create(
        b, loc, TypeRange{}, ins, outs, maps,
        SmallVector<utils::IteratorType>{utils::IteratorType::parallel},
        [&](OpBuilder &nb, Location nloc, ValueRange elements) {
          SmallVector<Value> results = emitAdamElement(
              nb, nloc, elements.take_front(l.perParam), et, terms, l.mode);
          linalg::YieldOp::create(nb, nloc, results);
        });
  }
  func::ReturnOp::create(b, loc);
  return module;
}

/// The GPU kernel: one scf.parallel over every element; an element of
/// parameter i updates that parameter's group. The terms are computed by
/// each thread (the launch passes only buffers and the call's scalars).
OwningOpRef<ModuleOp> buildGpuModule(const AdamLayout &l, MLIRContext *ctx,
                                     StringRef symbol) {
  Location loc = UnknownLoc::get(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  OpBuilder b(ctx);
  b.setInsertionPointToEnd(module->getBody());
  SmallVector<Type> argTypes = tensorArgTypes(l, ctx);
  size_t numTensorArgs = argTypes.size();
  argTypes.append(4, Float64Type::get(ctx));
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
  Value step = loadScalar(b, loc, args[0]), lr = loadScalar(b, loc, args[1]);
  Value beta1 = args[numTensorArgs], beta2 = args[numTensorArgs + 1];
  Value eps = args[numTensorArgs + 2], wd = args[numTensorArgs + 3];
  std::optional<AdamTerms> terms32, terms64;
  int64_t n = l.numParams;
  for (int64_t i = 0; i < n; ++i) {
    if (l.numel[i] == 0)
      continue;
    ElementTypes et = elementTypesFor(l.elementTypes[i], ctx);
    std::optional<AdamTerms> &terms = et.compute.isF64() ? terms64 : terms32;
    if (!terms)
      terms = emitTerms(b, loc, step, lr, beta1, beta2, eps, wd, et.compute,
                        l.mode);
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
    for (int64_t k = 0; k < l.perParam; ++k)
      stored.push_back(
          memref::LoadOp::create(b, loc, args[2 + k * n + i], ValueRange{j}));
    SmallVector<Value> results =
        emitAdamElement(b, loc, stored, et, *terms, l.mode);
    for (int64_t k = 0; k + 1 < l.perParam; ++k)
      memref::StoreOp::create(b, loc, results[k],
                              args[2 + l.perParam * n + k * n + i],
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

void describeCall(rank::FusedAdamOp op, GeneratedKernel &kernel) {
  for (Value in : op.getInputs())
    *kernel.add_inputs() = specOf(in.getType());
  for (Type t : op.getResultTypes())
    *kernel.add_outputs() = specOf(t);
  kernel.set_num_scalars(4);
}

FailureOr<std::shared_ptr<const GeneratedKernel>>
compileHostAdam(rank::FusedAdamOp op, const std::string &signature) {
  FailureOr<AdamLayout> layout = layoutOf(op);
  if (failed(layout))
    return failure();
  MLIRContext &ctx = hostKernelContext();
  OwningOpRef<ModuleOp> module = buildHostModule(*layout, &ctx);
  std::string symbol = "dtorch_adam_" + rt::executableHash(signature);
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
          *module, symbol, static_cast<unsigned>(op.getInputs().size()),
          static_cast<unsigned>(op.getNumResults()),
          std::max<int64_t>(layout->total, 1), /*parallelLoops=*/true, error);
  }
  if (failed(shared))
    return op.emitOpError("kernel generation failed: ")
           << error << (diagnostics.empty() ? "" : ": ") << diagnostics;
  auto kernel = std::make_shared<GeneratedKernel>();
  kernel->set_symbol(symbol);
  kernel->set_object(std::move(*shared));
  kernel->set_content_hash(rt::executableHash(kernel->object()));
  describeCall(op, *kernel);
  kernel->set_target(hostKernelTarget());
  ++adamCompiles;
  return std::shared_ptr<const GeneratedKernel>(std::move(kernel));
}

FailureOr<std::shared_ptr<const GeneratedKernel>>
compileGpuAdam(rank::FusedAdamOp op, StringRef arch,
               const std::string &signature) {
  FailureOr<AdamLayout> layout = layoutOf(op);
  if (failed(layout))
    return failure();
  MLIRContext &ctx = gpuKernelContext();
  std::string symbol =
      "dtorch_adam_gpu_" + rt::executableHash(signature + arch.str());
  OwningOpRef<ModuleOp> module = buildGpuModule(*layout, &ctx, symbol);
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
  describeCall(op, *kernel);
  kernel->set_target("nvptx64-nvidia-cuda " + arch.str());
  ++adamCompiles;
  return std::shared_ptr<const GeneratedKernel>(std::move(kernel));
}

using KernelCache =
    std::unordered_map<std::string, std::shared_ptr<const GeneratedKernel>>;

/// The cached kernel of a signature declaring `op`'s own buffers: the
/// signature counts elements, so a parameter of another shape with as many
/// elements shares the code but not the declared shapes.
std::shared_ptr<const GeneratedKernel>
forCall(rank::FusedAdamOp op,
        const std::shared_ptr<const GeneratedKernel> &cached) {
  auto kernel = std::make_shared<GeneratedKernel>(*cached);
  kernel->clear_inputs();
  kernel->clear_outputs();
  describeCall(op, *kernel);
  if (kernel->SerializeAsString() == cached->SerializeAsString())
    return cached;
  return kernel;
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
  for (int64_t i = 0; i < op.getNumParams(); ++i) {
    auto t = cast<RankedTensorType>(op.getInputs()[2 + i].getType());
    os << t.getElementType() << "x" << t.getNumElements() << ";";
  }
  return os.str();
}

std::vector<double> fusedAdamKernelScalars(rank::FusedAdamOp op) {
  return {op.getBeta1().convertToDouble(), op.getBeta2().convertToDouble(),
          op.getEps().convertToDouble(), op.getWeightDecay().convertToDouble()};
}

FailureOr<std::shared_ptr<const GeneratedKernel>>
generateFusedAdamKernel(rank::FusedAdamOp op) {
  static std::mutex mutex;
  static auto *cache = new KernelCache();
  std::string signature = fusedAdamKernelSignature(op);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache->find(signature);
  if (it != cache->end())
    return forCall(op, it->second);
  FailureOr<std::shared_ptr<const GeneratedKernel>> kernel =
      compileHostAdam(op, signature);
  if (failed(kernel))
    return failure();
  cache->emplace(signature, *kernel);
  return kernel;
}

FailureOr<std::shared_ptr<const GeneratedKernel>>
generateFusedAdamGpuKernel(rank::FusedAdamOp op, StringRef arch) {
  static std::mutex mutex;
  static auto *cache = new KernelCache();
  std::string signature = fusedAdamKernelSignature(op);
  std::string key = arch.str() + "|" + signature;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache->find(key);
  if (it != cache->end())
    return forCall(op, it->second);
  FailureOr<std::shared_ptr<const GeneratedKernel>> kernel =
      compileGpuAdam(op, arch, signature);
  if (failed(kernel))
    return failure();
  cache->emplace(key, *kernel);
  return kernel;
}

int64_t generatedAdamKernelCompiles() { return adamCompiles.load(); }

} // namespace dtorch
