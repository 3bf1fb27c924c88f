//===- dtorch-gpu-kernel.cpp - a fused group's GPU lowering, stage by stage
//===//
//
// Reads rank-dialect IR holding rank.fused ops (as --rank-fuse-elementwise
// makes them) and prints, for each group in order, its GPU kernel at one
// stage of lib/Compiler/GpuKernelCodegen.cpp: after outlining (gpu), in the
// NVVM dialect (nvvm), as optimized LLVM IR (llvm) or as PTX (ptx). For
// inspection and the lit tests:
//
//   dtorch-gpu-kernel FILE.mlir --stage=ptx --arch=sm_90
//
//===----------------------------------------------------------------------===//
#include "GpuKernelCodegen.h"

#include "rank/IR/Rank.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace {

llvm::cl::opt<std::string> inputFile(llvm::cl::Positional,
                                     llvm::cl::desc("<input .mlir>"),
                                     llvm::cl::init("-"));
llvm::cl::opt<std::string>
    stageName("stage", llvm::cl::desc("gpu, nvvm, llvm or ptx (default)"),
              llvm::cl::init("ptx"));
llvm::cl::opt<int>
    onlyGroup("group",
              llvm::cl::desc("print only this group (0-based; default: all)"),
              llvm::cl::init(-1));
llvm::cl::opt<std::string> arch("arch",
                                llvm::cl::desc("CUDA architecture (sm_90)"),
                                llvm::cl::init(""));

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  llvm::cl::ParseCommandLineOptions(
      argc, argv, "Prints the GPU kernels of the rank.fused ops of a file\n");
  dtorch::GpuKernelStage stage;
  if (stageName == "gpu")
    stage = dtorch::GpuKernelStage::Gpu;
  else if (stageName == "nvvm")
    stage = dtorch::GpuKernelStage::Nvvm;
  else if (stageName == "llvm")
    stage = dtorch::GpuKernelStage::LlvmIr;
  else if (stageName == "ptx")
    stage = dtorch::GpuKernelStage::Ptx;
  else {
    llvm::errs() << "unknown --stage '" << stageName
                 << "' (gpu, nvvm, llvm, ptx)\n";
    return 1;
  }
  std::string chosenArch = arch.empty() ? dtorch::defaultCudaArch() : arch;

  DialectRegistry registry;
  registry.insert<dtorch::rank::RankDialect, func::FuncDialect>();
  MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input = openInputFile(inputFile, &error);
  if (!input) {
    llvm::errs() << error << "\n";
    return 1;
  }
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(sourceMgr, &ctx);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sourceMgr, &ctx);
  if (!module)
    return 1;
  int index = 0, printedGroups = 0;
  bool failed = false;
  module->walk([&](dtorch::rank::FusedOp op) {
    if (onlyGroup >= 0 && index++ != onlyGroup)
      return;
    FailureOr<std::string> text =
        dtorch::fusedGpuKernelStage(op, chosenArch, stage);
    if (mlir::failed(text)) {
      failed = true;
      return;
    }
    llvm::outs() << "// ---- fused group "
                 << (onlyGroup >= 0 ? onlyGroup.getValue() : index++) << " ("
                 << chosenArch << ", " << stageName << ")\n"
                 << *text << "\n";
    ++printedGroups;
  });
  if (printedGroups == 0 && !failed) {
    llvm::errs() << "no rank.fused op in " << inputFile << "\n";
    return 1;
  }
  return failed ? 1 : 0;
}
