//===- Compiler.cpp - dtensor graphs to per-rank programs ----------------===//
#include "dtorch/Compiler.h"

#include "GraphBuilder.h"
#include "KernelCodegen.h"
#include "KernelCodegenSupport.h"
#include "ProgramEmitter.h"
#include "dtensor/IR/DTensor.h"
#include "dtensor/Transforms/Passes.h"
#include "dtensor/Transforms/StageVerification.h"
#include "dtorch/runtime/PolynomialMath.h"
#include "rank/IR/Rank.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/SourceMgr.h"

#include <cstdlib>
#include <ctime>
#include <map>

using namespace mlir;

namespace dtorch {
namespace {

std::unique_ptr<MLIRContext> makeContext() {
  DialectRegistry registry;
  registry
      .insert<dtensor::DTensorDialect, rank::RankDialect, func::FuncDialect>();
  auto ctx = std::make_unique<MLIRContext>(registry);
  ctx->loadAllAvailableDialects();
  ctx->disableMultithreading();
  return ctx;
}

/// The context compiles on this thread use: made once per thread and kept
/// across compiles (a context costs more to make than a small segment to
/// compile). Types and attributes it uniques stay for its lifetime, so it is
/// renewed after kCompilesPerContext compiles to bound that.
MLIRContext &threadContext() {
  constexpr unsigned kCompilesPerContext = 256;
  thread_local std::unique_ptr<MLIRContext> ctx;
  thread_local unsigned compiles = 0;
  if (!ctx || ++compiles > kCompilesPerContext) {
    ctx = makeContext();
    compiles = 0;
  }
  return *ctx;
}

/// CPU seconds of the calling thread: phase times that do not count the
/// time the thread waited for a core.
struct Clock {
  using time_point = double;
  static time_point now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) +
           1e-9 * static_cast<double>(ts.tv_nsec);
  }
};

double secondsSince(Clock::time_point start) { return Clock::now() - start; }

/// Seconds per pass (summed over the functions a nested pass runs on), in
/// the order the passes first ran; a stage boundary counts as "verify".
class PassTimer : public PassInstrumentation {
public:
  explicit PassTimer(std::vector<std::pair<std::string, double>> &timings)
      : timings(timings) {}
  void runBeforePass(Pass *, Operation *) override { start = Clock::now(); }
  void runAfterPass(Pass *pass, Operation *) override {
    std::optional<StringRef> stage = dtensor::stageBoundaryName(pass);
    if (!stage && pass->getArgument().empty())
      return; // a pass manager's adaptor: its passes are counted
    if (stage && !dtensor::stageBoundaryVerifies(pass))
      return; // a boundary that only marks its stage
    std::string name =
        stage ? "verify (" + stage->str() + ")" : pass->getArgument().str();
    double s = secondsSince(start);
    for (auto &[n, t] : timings)
      if (n == name) {
        t += s;
        return;
      }
    timings.emplace_back(name, s);
  }

private:
  std::vector<std::pair<std::string, double>> &timings;
  Clock::time_point start;
};

TensorInfo infoOf(Type t) {
  TensorInfo info;
  if (auto dt = dyn_cast<dtensor::DTensorType>(t)) {
    info.shape.assign(dt.getShape().begin(), dt.getShape().end());
    info.dtype = toWireDType(dt.getElementType());
    info.meshShape.assign(dt.getMesh().getShape().begin(),
                          dt.getMesh().getShape().end());
    info.placements = dt.getLayout();
  }
  return info;
}

const char *diagnosticKind(DiagnosticSeverity severity) {
  switch (severity) {
  case DiagnosticSeverity::Error:
    return "error";
  case DiagnosticSeverity::Warning:
    return "warning";
  case DiagnosticSeverity::Remark:
    return "remark";
  case DiagnosticSeverity::Note:
    return "note";
  }
  return "error";
}

/// `file:line:col: error: message`, as the parser's diagnostics read.
void writeDiagnostic(llvm::raw_ostream &os, Diagnostic &diag,
                     const char *kind) {
  if (auto file = dyn_cast<FileLineColLoc>(diag.getLocation()))
    os << file.getFilename().getValue() << ":" << file.getLine() << ":"
       << file.getColumn();
  else
    os << diag.getLocation();
  os << ": " << kind << ": " << diag << "\n";
}

std::string printModule(ModuleOp m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os);
  return os.str();
}

/// Runs the pipeline on `module` (parsed or built) and emits the programs
/// into `result`; diagnostics go to the handler the caller installed.
void compileModuleOp(ModuleOp module, const CompileOptions &options,
                     CompileResult &result) {
  MLIRContext *ctx = module.getContext();
  // The global signatures, before SPMD lowering replaces the functions.
  std::map<std::string, CompiledFunction> byName;
  for (auto fn : module.getOps<func::FuncOp>()) {
    CompiledFunction cf;
    cf.name = fn.getSymName().str();
    for (Type t : fn.getFunctionType().getInputs())
      cf.inputs.push_back(infoOf(t));
    for (Type t : fn.getFunctionType().getResults())
      cf.outputs.push_back(infoOf(t));
    for (const TensorInfo &i : cf.inputs)
      if (!i.meshShape.empty())
        cf.meshShape = i.meshShape;
    for (const TensorInfo &i : cf.outputs)
      if (!i.meshShape.empty())
        cf.meshShape = i.meshShape;
    byName[cf.name] = std::move(cf);
  }

  // One pipeline definition (buildDTensorToRankPipeline); its stage
  // boundaries verify the IR between phases (all of them in a debug build
  // or with DTORCH_VERIFY_STAGES=1, the last one in release:
  // StageVerification.h), so the pass manager's verifier after every pass
  // is off. Stages are printed, and redistributions explained, only when
  // asked for.
  if (options.recordStages)
    result.stages.emplace_back("input", printModule(module));
  Clock::time_point setupStart = Clock::now();
  PassManager pm(ctx);
  pm.enableVerifier(false);
  dtensor::DTensorToRankPipelineOptions pipeline;
  pipeline.fuseElementwise = options.fuseElementwise;
  // GPU groups take in row reductions too (one thread per row,
  // GpuKernelCodegen.cpp); DTORCH_GPU_ROW_FUSION=0 leaves them to the
  // registry's CUDA kernels.
  pipeline.fuseRowReductions =
      options.cudaArch.empty() || gpuRowFusionEnabled();
  pipeline.foldBmmLayout = options.cudaArch.empty();
  pipeline.verifyEachStage = dtensor::verifyEachStageByDefault();
  dtensor::buildDTensorToRankPipeline(pm, pipeline);
  if (options.planBuffers) {
    dtensor::PlanBuffersOptions planOptions;
    planOptions.views = dtensor::planViewsFromEnvironment();
    // The host executor binds a returned reshape as a view of a source with
    // storage of its own; a device's copies it.
    planOptions.resultViews = planOptions.views && options.cudaArch.empty();
    pm.addNestedPass<func::FuncOp>(dtensor::createPlanBuffers(planOptions));
  }
  if (options.markDonations)
    pm.addNestedPass<func::FuncOp>(dtensor::createMarkDonations());
  if (options.profile)
    result.timings.emplace_back("pipeline setup", secondsSince(setupStart));
  if (options.recordStages || options.explain)
    pm.addInstrumentation(std::make_unique<dtensor::StageObserver>(
        [&](StringRef stage, ModuleOp m) {
          if (options.recordStages)
            result.stages.emplace_back(stage.str(), printModule(m));
          if (options.explain && stage == dtensor::kStageSharded)
            for (auto fn : m.getOps<func::FuncOp>())
              for (dtensor::ExplainedRedistribute &r :
                   dtensor::explainRedistributions(fn))
                result.explanations.push_back(std::move(r.info));
        }));
  if (options.profile)
    pm.addInstrumentation(std::make_unique<PassTimer>(result.timings));
  if (failed(pm.run(module)))
    return;

  Clock::time_point emitStart = Clock::now();
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (!fn->hasAttr(rank::kMeshAttrName))
      continue;
    std::string name = fn.getSymName().str();
    std::string base = name.substr(0, name.rfind("_class"));
    auto it = byName.find(base);
    if (it == byName.end()) {
      fn.emitOpError("has no source function '") << base << "'";
      return;
    }
    FailureOr<wire::Program> program = emitProgram(
        fn, options.cudaArch,
        options.fuseElementwise && options.generateOptimizerKernels);
    if (failed(program))
      return;
    it->second.programs.push_back(std::move(*program));
  }
  for (auto &[name, cf] : byName)
    result.functions.push_back(std::move(cf));
  if (options.profile)
    result.timings.emplace_back("emit", secondsSince(emitStart));
  result.ok = true;
}

} // namespace

bool bufferPlanningDefault() {
  const char *value = std::getenv("DTORCH_BUFFER_PLANNING");
  return !(value && std::string(value) == "0");
}

bool fusionEnabledByEnvironment() {
  const char *value = std::getenv("DTORCH_FUSION");
  return !(value && std::string(value) == "0");
}

CompileResult compileModule(const std::string &source,
                            const std::string &sourceName,
                            const CompileOptions &options) {
  CompileResult result;
  Clock::time_point start = Clock::now();
  MLIRContext &ctx = threadContext();
  if (options.profile)
    result.timings.emplace_back("context", secondsSince(start));
  llvm::raw_string_ostream diagStream(result.error);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source, sourceName), llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(sourceMgr, &ctx, diagStream);

  start = Clock::now();
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &ctx);
  if (options.profile)
    result.timings.emplace_back("parse", secondsSince(start));
  if (!module)
    return result;
  compileModuleOp(*module, options, result);
  return result;
}

CompileResult compileGraph(const SegmentGraph &graph,
                           const CompileOptions &options) {
  CompileResult result;
  Clock::time_point start = Clock::now();
  MLIRContext &ctx = threadContext();
  if (options.profile)
    result.timings.emplace_back("context", secondsSince(start));
  llvm::raw_string_ostream diagStream(result.error);
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
    writeDiagnostic(diagStream, diag, diagnosticKind(diag.getSeverity()));
    for (Diagnostic &note : diag.getNotes())
      writeDiagnostic(diagStream, note, "note");
    return success();
  });

  start = Clock::now();
  OwningOpRef<ModuleOp> module = buildGraphModule(graph, &ctx);
  if (options.profile)
    result.timings.emplace_back("build", secondsSince(start));
  if (!module)
    return result;
  compileModuleOp(*module, options, result);
  return result;
}

bool programRunsAt(const wire::Program &program,
                   const std::vector<int64_t> &coords) {
  for (const wire::MeshBox &box : program.positions()) {
    if (box.lo_size() != (int)coords.size() ||
        box.hi_size() != (int)coords.size())
      continue;
    bool inside = true;
    for (size_t a = 0; a < coords.size() && inside; ++a)
      inside = box.lo(a) <= coords[a] && coords[a] < box.hi(a);
    if (inside)
      return true;
  }
  return false;
}

int CompiledFunction::programAt(int64_t position) const {
  if (position < 0 || position >= meshSize(meshShape))
    return -1;
  std::vector<int64_t> coords = meshCoords(meshShape, position);
  for (size_t k = 0; k < programs.size(); ++k)
    if (programRunsAt(programs[k], coords))
      return static_cast<int>(k);
  return -1;
}

std::string compilerConfiguration() {
  return "schedule=" + dtensor::collectiveScheduleDescription() +
         ",fold_transpose=" +
         (dtensor::foldTransposeFromEnvironment() ? "1" : "0") +
         ",fuse_mixed_types=" +
         (dtensor::fuseMixedTypesFromEnvironment() ? "1" : "0") +
         ",generated_adam=" +
         (generatedAdamEnabledByEnvironment() ? "1" : "0") +
         ",fold_bmm_layout=" +
         (dtensor::foldBmmLayoutFromEnvironment() ? "1" : "0") +
         ",rematerialize=" +
         (dtensor::rematerializeFromEnvironment() ? "1" : "0") +
         ",row_lane_vectors=" +
         (codegen::rowLaneVectorsFromEnvironment() ? "1" : "0") +
         ",row_sweep_reuse=" +
         (codegen::rowSweepReuseFromEnvironment() ? "1" : "0") +
         ",row_tree_max=" + (codegen::rowTreeMaxFromEnvironment() ? "1" : "0") +
         ",row_masked_tails=" +
         (codegen::rowMaskedTailsFromEnvironment() ? "1" : "0") +
         ",erf_piecewise=" +
         (rt::polynomial::erfPiecewiseFromEnvironment() ? "1" : "0") +
         ",row_kernel_noalias=" +
         (rowKernelNoAliasFromEnvironment() ? "1" : "0") +
         ",row_vector_loops=" + (rowVectorLoopsFromEnvironment() ? "1" : "0") +
         ",wide_vectors=" + (wideVectorsFromEnvironment() ? "1" : "0") +
         ",plan_views=" + (dtensor::planViewsFromEnvironment() ? "1" : "0");
}

} // namespace dtorch
