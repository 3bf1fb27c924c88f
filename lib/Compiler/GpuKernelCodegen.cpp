//===- GpuKernelCodegen.cpp - rank.fused bodies to PTX --------------------===//
//
// rank ops -> the host generator's linalg.generic (constants as float64
// arguments, converted in the element loop) -> scf.parallel -> one loop
// (collapsed) -> tiled by the block size -> gpu.launch (outer loop: blocks,
// inner: threads) -> gpu-kernel-outlining -> NVVM and LLVM dialects (bare
// pointers for the memrefs) -> LLVM IR -> libdevice linked, internalized,
// -O3 -> PTX (NVPTX backend). A group that ends in row reductions starts
// from the row kernel builder's GPU form instead (RowKernelCodegen.cpp,
// forGpu: one scf.parallel over the rows, each summed in order in float64)
// and takes the same road from the tiling on: one thread per row.
//
// Numerics: the kernel body is the host kernels' (KernelCodegenSupport.h):
// float32 exp, log, tanh and erf are MLIR's polynomial approximations, the
// 16-bit floats are computed in float32 and rounded after every op
// (bfloat16 by integer code), integers wrap, and maximum/minimum follow
// arith-expand. NVPTX emits IEEE division and square root (div.rn,
// sqrt.rn), no denormal flushing and no contraction of a product into a
// sum (mul.rn/add.rn), so those results are the CPU's bit for bit. What
// libdevice computes (float64 exp, log, tanh, erf; sin, cos and pow in
// every float type) is CUDA's math library, as the hand-written CUDA
// kernels call it, and can differ from glibc's in the last bit
// (docs/architecture.md, "Fused kernels on the GPU").
//
//===----------------------------------------------------------------------===//
#include "GpuKernelCodegen.h"

#include "KernelCodegenSupport.h"
#include "ProgramEmitter.h"

#include "dtorch/runtime/Executable.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Index/IR/IndexDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IRReader/IRReader.h"
#include "llvm/Linker/Linker.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Target/TargetMachine.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

using namespace mlir;

namespace dtorch {

namespace {

using namespace codegen;

constexpr llvm::StringLiteral kNvptxTriple = "nvptx64-nvidia-cuda";

std::atomic<int64_t> gpuCompiles{0};

MLIRContext &gpuCodegenContext() {
  thread_local std::unique_ptr<MLIRContext> ctx;
  if (!ctx) {
    DialectRegistry registry;
    registry.insert<affine::AffineDialect, arith::ArithDialect,
                    cf::ControlFlowDialect, func::FuncDialect, gpu::GPUDialect,
                    index::IndexDialect, linalg::LinalgDialect,
                    LLVM::LLVMDialect, math::MathDialect, memref::MemRefDialect,
                    NVVM::NVVMDialect, scf::SCFDialect>();
    // convert-gpu-to-nvvm lowers the kernel's other dialects through their
    // ConvertToLLVM interfaces.
    arith::registerConvertArithToLLVMInterface(registry);
    cf::registerConvertControlFlowToLLVMInterface(registry);
    registerConvertFuncToLLVMInterface(registry);
    index::registerConvertIndexToLLVMInterface(registry);
    registerConvertMathToLLVMInterface(registry);
    registerConvertMemRefToLLVMInterface(registry);
    registerConvertNVVMToLLVMInterface(registry);
    registerBuiltinDialectTranslation(registry);
    registerLLVMDialectTranslation(registry);
    registerNVVMDialectTranslation(registry);
    ctx = std::make_unique<MLIRContext>(registry);
    ctx->loadAllAvailableDialects();
    ctx->disableMultithreading();
  }
  return *ctx;
}

std::string printed(Operation *op) {
  std::string s;
  llvm::raw_string_ostream os(s);
  op->print(os);
  return s;
}

/// The element loop of the kernel function to a gpu.launch of blocks of
/// kGpuKernelBlockSize threads, outlined into a gpu.module.
LogicalResult mapToGpu(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  PassManager loops(ctx);
  loops.addNestedPass<func::FuncOp>(createConvertLinalgToParallelLoopsPass());
  if (failed(loops.run(module)))
    return failure();
  // One loop over every element (delinearized indices), so that a block of
  // threads covers consecutive elements whatever the group's rank.
  IRRewriter rewriter(ctx);
  SmallVector<scf::ParallelOp> nests;
  module.walk([&](scf::ParallelOp loop) { nests.push_back(loop); });
  for (scf::ParallelOp loop : nests)
    if (loop.getNumLoops() > 1) {
      std::vector<unsigned> all(loop.getNumLoops());
      for (unsigned d = 0; d < all.size(); ++d)
        all[d] = d;
      rewriter.setInsertionPoint(loop);
      collapseParallelLoops(rewriter, loop, {all});
    }
  PassManager pm(ctx);
  const int64_t tile[] = {kGpuKernelBlockSize};
  pm.addNestedPass<func::FuncOp>(
      createParallelLoopTilingPass(tile, /*noMinMaxBounds=*/true));
  pm.addNestedPass<func::FuncOp>(createGpuMapParallelLoopsPass());
  pm.addNestedPass<func::FuncOp>(createConvertParallelLoopToGpuPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createGpuLaunchSinkIndexComputationsPass());
  pm.addPass(createGpuKernelOutliningPass());
  pm.addPass(createLowerAffinePass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  return pm.run(module);
}

/// The gpu.module to the LLVM and NVVM dialects: memrefs as bare pointers
/// (their shapes are static), 64-bit indices.
LogicalResult lowerToNvvm(ModuleOp module) {
  MLIRContext *ctx = module.getContext();
  PassManager pm(ctx);
  OpPassManager &kernels = pm.nest<gpu::GPUModuleOp>();
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  kernels.addPass(arith::createArithExpandOpsPass(expand));
  ConvertGpuOpsToNVVMOpsOptions nvvm;
  nvvm.useBarePtrCallConv = true;
  nvvm.indexBitwidth = 64;
  kernels.addPass(createConvertGpuOpsToNVVMOps(nvvm));
  kernels.addPass(createReconcileUnrealizedCastsPass());
  return pm.run(module);
}

/// Reads the launch the outlining left in the host function: the kernel's
/// name, its constant grid and block sizes, and each kernel operand as an
/// index into the host function's arguments (inputs, outputs, scalars).
LogicalResult readLaunch(ModuleOp module, GpuKernelBuild &build,
                         std::string &error) {
  SmallVector<gpu::LaunchFuncOp> launches;
  module.walk([&](gpu::LaunchFuncOp l) { launches.push_back(l); });
  if (launches.size() != 1) {
    error = "expected one kernel launch, the lowering made " +
            std::to_string(launches.size());
    return failure();
  }
  gpu::LaunchFuncOp launch = launches[0];
  std::optional<int64_t> gridX = getConstantIntValue(launch.getGridSizeX());
  std::optional<int64_t> blockX = getConstantIntValue(launch.getBlockSizeX());
  for (Value v : {launch.getGridSizeY(), launch.getGridSizeZ(),
                  launch.getBlockSizeY(), launch.getBlockSizeZ()})
    if (getConstantIntValue(v) != std::optional<int64_t>(1)) {
      error = "the launch is not one-dimensional";
      return failure();
    }
  if (!gridX || !blockX) {
    error = "the launch's grid or block size is not a constant";
    return failure();
  }
  build.gridX = *gridX;
  build.blockX = static_cast<int32_t>(*blockX);
  build.entry = launch.getKernelName().str();
  auto host = launch->getParentOfType<func::FuncOp>();
  for (Value operand : launch.getKernelOperands()) {
    auto arg = dyn_cast<BlockArgument>(operand);
    if (!arg || arg.getOwner() != &host.getBody().front()) {
      error = "a kernel operand is not an argument of the kernel function";
      return failure();
    }
    build.params.push_back(static_cast<int32_t>(arg.getArgNumber()));
  }
  return success();
}

const llvm::Target *nvptxTarget(std::string &error) {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  return llvm::TargetRegistry::lookupTarget(llvm::Triple(kNvptxTriple), error);
}

/// Links the libdevice functions `m` calls (__nv_*) into it.
LogicalResult linkLibdevice(llvm::Module &m, std::string &error) {
  bool needed = false;
  for (llvm::Function &f : m)
    needed |= f.isDeclaration() && f.getName().starts_with("__nv_");
  if (!needed)
    return success();
  std::string path = cudaLibdevicePath();
  if (path.empty()) {
    error = "the kernel calls CUDA's libdevice, which was not found (set "
            "DTORCH_CUDA_LIBDEVICE or CUDA_HOME)";
    return failure();
  }
  llvm::SMDiagnostic diagnostic;
  std::unique_ptr<llvm::Module> libdevice =
      llvm::parseIRFile(path, diagnostic, m.getContext());
  if (!libdevice) {
    error = "cannot read " + path + ": " + diagnostic.getMessage().str();
    return failure();
  }
  libdevice->setTargetTriple(m.getTargetTriple());
  libdevice->setDataLayout(m.getDataLayout());
  if (llvm::Linker::linkModules(m, std::move(libdevice),
                                llvm::Linker::Flags::LinkOnlyNeeded)) {
    error = "linking " + path + " failed";
    return failure();
  }
  return success();
}

/// LLVM IR of the kernel module to PTX for `arch`, after -O3; `llvmIr`
/// receives the optimized IR when not null.
FailureOr<std::string> emitPtx(llvm::Module &m, StringRef entry, StringRef arch,
                               std::string *llvmIr, std::string &error) {
  const llvm::Target *target = nvptxTarget(error);
  if (!target)
    return failure();
  llvm::Triple triple(kNvptxTriple);
  llvm::TargetOptions options; // no fast math, no fused multiply-add
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, arch, "", options, std::nullopt, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!tm) {
    error = "cannot make an NVPTX target machine for " + arch.str();
    return failure();
  }
  m.setTargetTriple(triple);
  m.setDataLayout(tm->createDataLayout());
  // libdevice asks __nvvm_reflect whether to flush denormals: no.
  m.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t(0));
  if (failed(linkLibdevice(m, error)))
    return failure();
  // Only the entry stays visible: the optimizer drops what it does not call.
  for (llvm::Function &f : m)
    if (!f.isDeclaration() && f.getName() != entry)
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
  for (llvm::GlobalVariable &g : m.globals())
    if (!g.isDeclaration())
      g.setLinkage(llvm::GlobalValue::InternalLinkage);

  optimizeModuleO3(m, *tm);
  for (llvm::Function &f : m)
    if (f.isDeclaration() && !f.isIntrinsic() && !f.use_empty()) {
      error =
          "the kernel calls '" + f.getName().str() + "', which nothing defines";
      return failure();
    }
  if (llvmIr) {
    llvm::raw_string_ostream os(*llvmIr);
    m.print(os, nullptr);
  }

  std::string ptx;
  if (!emitWithTarget(m, *tm, /*assembly=*/true, ptx)) {
    error = "the NVPTX target cannot emit PTX";
    return failure();
  }
  return ptx;
}

/// Runs the lowering of `op` named `symbol` up to `stopAt` (its text into
/// `stageText`) or to the end (PTX and launch into `build`).
LogicalResult lowerFusedToGpu(rank::FusedOp op, StringRef arch,
                              StringRef symbol, GpuKernelStage stopAt,
                              std::string &stageText, GpuKernelBuild &build) {
  Block &body = op.getBody().front();
  auto yield = cast<rank::YieldOp>(body.getTerminator());
  bool rows = !yield.getValues().empty() && hasRowReduction(body);
  if (rows)
    build.elements = rowReductionRows(body);
  else if (!yield.getValues().empty())
    build.elements =
        cast<RankedTensorType>(yield.getValues()[0].getType()).getNumElements();
  MLIRContext &ctx = gpuCodegenContext();
  ElementwiseModuleOptions options;
  options.scalarsAsValues = true;
  options.rankZeroAsOne = true;
  // A group ending in row reductions: one thread per row, each summing its
  // row in the host kernels' order (RowKernelCodegen.cpp, forGpu).
  FailureOr<OwningOpRef<ModuleOp>> built =
      rows ? buildRowKernelModule(op, &ctx, symbol, /*forGpu=*/true)
           : buildElementwiseKernelModule(op, &ctx, symbol, options);
  if (failed(built))
    return failure();
  return lowerParallelModuleToPtx(op, **built, arch, symbol, build.elements,
                                  stopAt, stageText, build);
}

} // namespace

MLIRContext &gpuKernelContext() { return gpuCodegenContext(); }

LogicalResult lowerParallelModuleToPtx(Operation *op, ModuleOp module,
                                       StringRef arch, StringRef symbol,
                                       int64_t elements, GpuKernelStage stopAt,
                                       std::string &stageText,
                                       GpuKernelBuild &build) {
  MLIRContext &ctx = *module.getContext();
  build.elements = elements;
  std::string diagnostics;
  llvm::raw_string_ostream diag(diagnostics);
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &d) {
    diag << d << "\n";
    return success();
  });
  auto fail = [&](const std::string &what) {
    return op->emitOpError("GPU kernel generation failed: ")
           << what << (diagnostics.empty() ? "" : ": ") << diagnostics;
  };
  if (failed(mlir::verify(module)))
    return fail("the kernel function does not verify");
  applyPolynomialApproximations(module);
  if (build.elements == 0) {
    // Nothing to compute: no launch (grid 0), no code.
    build.entry = symbol.str();
    return success();
  }
  if (failed(mapToGpu(module)))
    return fail("mapping to blocks and threads");
  std::string error;
  if (failed(readLaunch(module, build, error)))
    return fail(error);
  if (stopAt == GpuKernelStage::Gpu) {
    stageText = printed(module);
    return success();
  }
  if (failed(lowerToNvvm(module)))
    return fail("lowering to NVVM");
  gpu::GPUModuleOp kernels;
  module.walk([&](gpu::GPUModuleOp m) { kernels = m; });
  if (!kernels)
    return fail("no gpu.module");
  if (stopAt == GpuKernelStage::Nvvm) {
    stageText = printed(kernels);
    return success();
  }
  // The gpu.module's functions as a module of their own, translated.
  OwningOpRef<ModuleOp> device = ModuleOp::create(UnknownLoc::get(&ctx));
  OpBuilder b(&ctx);
  b.setInsertionPointToEnd(device->getBody());
  for (Operation &inner : kernels.getBody()->getOperations())
    if (!inner.hasTrait<OpTrait::IsTerminator>())
      b.clone(inner);
  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(*device, llvmContext, "dtorch_fused_gpu");
  if (!llvmModule)
    return fail("no LLVM IR");
  std::string llvmIr;
  FailureOr<std::string> ptx =
      emitPtx(*llvmModule, build.entry, arch,
              stopAt == GpuKernelStage::LlvmIr ? &llvmIr : nullptr, error);
  if (failed(ptx))
    return fail(error);
  build.ptx = std::move(*ptx);
  stageText = stopAt == GpuKernelStage::LlvmIr ? llvmIr : build.ptx;
  return success();
}

namespace {

wire::TensorSpec specOf(Type t) {
  auto tensor = cast<RankedTensorType>(t);
  wire::TensorSpec spec;
  spec.set_dtype(toWireDType(tensor.getElementType()));
  for (int64_t s : tensor.getShape())
    spec.add_shape(s);
  return spec;
}

FailureOr<std::shared_ptr<const GeneratedKernel>>
compileFusedGpuKernel(rank::FusedOp op, StringRef arch,
                      const std::string &signature) {
  std::string symbol =
      "dtorch_fused_gpu_" + rt::executableHash(signature + arch.str());
  GpuKernelBuild build;
  std::string text;
  if (failed(
          lowerFusedToGpu(op, arch, symbol, GpuKernelStage::Ptx, text, build)))
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
  if (const char *dump = std::getenv("DTORCH_KERNEL_DUMP_DIR"); dump && *dump) {
    std::error_code ec;
    llvm::raw_fd_ostream out(std::string(dump) + "/" + build.entry + ".ptx",
                             ec);
    if (!ec)
      out << build.ptx;
  }
  // The hash covers what the worker runs: the code and how it is launched.
  kernel->set_content_hash(rt::executableHash(gpu.SerializeAsString()));
  for (Value in : op.getInputs())
    *kernel->add_inputs() = specOf(in.getType());
  for (Type t : op.getResultTypes())
    *kernel->add_outputs() = specOf(t);
  kernel->set_num_scalars(static_cast<int32_t>(fusedKernelScalars(op).size()));
  kernel->set_target(std::string(kNvptxTriple) + " " + arch.str());
  ++gpuCompiles;
  return std::shared_ptr<const GeneratedKernel>(std::move(kernel));
}

} // namespace

std::string defaultCudaArch() {
  if (const char *arch = std::getenv("DTORCH_CUDA_ARCH"); arch && *arch)
    return arch;
  return "sm_90";
}

bool gpuRowFusionEnabled() {
  const char *v = std::getenv("DTORCH_GPU_ROW_FUSION");
  return !(v && std::string(v) == "0");
}

std::string cudaLibdevicePath() {
  if (const char *path = std::getenv("DTORCH_CUDA_LIBDEVICE"); path && *path)
    return llvm::sys::fs::exists(path) ? path : "";
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *root = std::getenv(var); root && *root) {
      llvm::SmallString<256> p(root);
      llvm::sys::path::append(p, "nvvm", "libdevice", "libdevice.10.bc");
      if (llvm::sys::fs::exists(p))
        return p.str().str();
    }
  const char *fallback = "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc";
  return llvm::sys::fs::exists(fallback) ? fallback : "";
}

FailureOr<std::shared_ptr<const GeneratedKernel>>
generateFusedGpuKernel(rank::FusedOp op, StringRef arch) {
  static std::mutex mutex;
  static auto *cache =
      new std::unordered_map<std::string,
                             std::shared_ptr<const GeneratedKernel>>();
  std::string signature = fusedKernelSignature(op);
  std::string key = arch.str() + "|" + signature;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache->find(key);
  if (it != cache->end())
    return it->second;
  FailureOr<std::shared_ptr<const GeneratedKernel>> kernel =
      compileFusedGpuKernel(op, arch, signature);
  if (failed(kernel))
    return failure();
  cache->emplace(key, *kernel);
  return kernel;
}

FailureOr<std::string> fusedGpuKernelStage(rank::FusedOp op, StringRef arch,
                                           GpuKernelStage stage) {
  GpuKernelBuild build;
  std::string text;
  if (failed(lowerFusedToGpu(op, arch, "dtorch_fused_gpu", stage, text, build)))
    return failure();
  return text;
}

int64_t generatedGpuKernelCompiles() { return gpuCompiles.load(); }

} // namespace dtorch
