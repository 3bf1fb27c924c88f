//===- Compiler.cpp - dtensor graphs to per-rank programs ----------------===//
#include "dtorch/Compiler.h"

#include "ProgramEmitter.h"
#include "dtensor/IR/DTensor.h"
#include "dtensor/Transforms/Passes.h"
#include "rank/IR/Rank.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/SourceMgr.h"

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

std::string printModule(ModuleOp m) {
  std::string s;
  llvm::raw_string_ostream os(s);
  m.print(os);
  return os.str();
}

} // namespace

CompileResult compileModule(const std::string &source,
                            const std::string &sourceName,
                            const CompileOptions &options) {
  CompileResult result;
  std::unique_ptr<MLIRContext> ctx = makeContext();
  llvm::raw_string_ostream diagStream(result.error);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source, sourceName), llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(sourceMgr, ctx.get(), diagStream);

  OwningOpRef<ModuleOp> module =
      parseSourceFile<ModuleOp>(sourceMgr, ctx.get());
  if (!module)
    return result;

  // The global signatures, before SPMD lowering replaces the functions.
  std::map<std::string, CompiledFunction> byName;
  for (auto fn : module->getOps<func::FuncOp>()) {
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

  auto record = [&](const char *stage) {
    if (options.recordStages)
      result.stages.emplace_back(stage, printModule(*module));
  };
  record("input");
  struct Stage {
    const char *name;
    std::function<void(PassManager &)> add;
  };
  std::vector<Stage> stages = {
      {"sharded",
       [](PassManager &pm) {
         pm.addNestedPass<func::FuncOp>(dtensor::createPropagateSharding());
         pm.addNestedPass<func::FuncOp>(createCSEPass());
       }},
      {"redistributed",
       [](PassManager &pm) {
         pm.addNestedPass<func::FuncOp>(dtensor::createLowerRedistribute());
       }},
      {"rank",
       [](PassManager &pm) { pm.addPass(dtensor::createLowerToRank()); }},
  };
  for (const Stage &stage : stages) {
    PassManager pm(ctx.get());
    stage.add(pm);
    if (failed(pm.run(*module)))
      return result;
    record(stage.name);
    if (options.explain && std::string(stage.name) == "sharded")
      for (auto fn : module->getOps<func::FuncOp>())
        for (dtensor::ExplainedRedistribute &r :
             dtensor::explainRedistributions(fn))
          result.explanations.push_back(std::move(r.info));
  }

  for (auto fn : module->getOps<func::FuncOp>()) {
    if (!fn->hasAttr(rank::kMeshAttrName))
      continue;
    std::string name = fn.getSymName().str();
    std::string base = name.substr(0, name.rfind("_class"));
    auto it = byName.find(base);
    if (it == byName.end()) {
      fn.emitOpError("has no source function '") << base << "'";
      return result;
    }
    FailureOr<wire::Program> program = emitProgram(fn);
    if (failed(program))
      return result;
    it->second.programs.push_back(std::move(*program));
  }
  for (auto &[name, cf] : byName)
    result.functions.push_back(std::move(cf));
  result.ok = true;
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

} // namespace dtorch
