//===- dtorch-run.cpp - run a dtensor graph on local or given workers ----===//
//
//   dtorch-run graph.mlir --world-size 4 --procs 2 --input a.npy --input b.npy
//
// Compiles a dtensor-dialect file (text or bytecode) with the foundation
// pipeline, starts local workers (or connects to --workers), feeds inputs
// from .npy files (or seeded random values), writes every output as .npy and
// prints each output's shape and checksum and the wall time. Options are
// llvm::cl options (--help lists them); bad input is an error message and
// exit code 1.
//
//===----------------------------------------------------------------------===//
#include "Npy.h"
#include "TensorData.h"
#include "dtorch/Client/Backend.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Kernels.h"

#include "llvm/Support/CommandLine.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <unistd.h>

using namespace dtorch;
using namespace dtorch::client;

namespace {

struct Options {
  std::string file, entry, backend, outputDir, printIr, token;
  int worldSize = 4, procs = 2, repeat = 1;
  uint64_t seed = 0;
  std::vector<std::string> inputs, workers;
};

llvm::cl::OptionCategory runCategory("dtorch-run options");

llvm::cl::opt<std::string> inputFile(llvm::cl::Positional, llvm::cl::Required,
                                     llvm::cl::desc("<graph.mlir|.mlirbc>"),
                                     llvm::cl::cat(runCategory));
llvm::cl::opt<std::string>
    entryName("entry", llvm::cl::value_desc("name"),
              llvm::cl::desc("Function to run (needed when the file has "
                             "several)"),
              llvm::cl::cat(runCategory));
llvm::cl::opt<int> worldSize("world-size", llvm::cl::init(4),
                             llvm::cl::value_desc("N"),
                             llvm::cl::desc("Ranks in the world"),
                             llvm::cl::cat(runCategory));
llvm::cl::opt<int> procs("procs", llvm::cl::init(2), llvm::cl::value_desc("P"),
                         llvm::cl::desc("Local worker processes to start"),
                         llvm::cl::cat(runCategory));
llvm::cl::opt<std::string>
    backendKind("backend", llvm::cl::init("cluster"),
                llvm::cl::value_desc("cluster|inprocess"),
                llvm::cl::desc("Worker processes, or ranks as threads of this "
                               "process"),
                llvm::cl::cat(runCategory));
llvm::cl::list<std::string>
    workerAddresses("workers", llvm::cl::CommaSeparated,
                    llvm::cl::value_desc("addr,addr,..."),
                    llvm::cl::desc("Connect to workers started by hand instead "
                                   "of starting local ones"),
                    llvm::cl::cat(runCategory));
llvm::cl::opt<std::string>
    token("token", llvm::cl::value_desc("secret"),
          llvm::cl::desc("Shared secret of --workers (default: "
                         "$DTORCH_TOKEN)"),
          llvm::cl::cat(runCategory));
llvm::cl::list<std::string>
    inputFiles("input", llvm::cl::value_desc("x.npy"),
               llvm::cl::desc("Value of the next function input, in order "
                              "(default: seeded random values)"),
               llvm::cl::cat(runCategory));
llvm::cl::opt<uint64_t> seed("seed", llvm::cl::init(0),
                             llvm::cl::value_desc("S"),
                             llvm::cl::desc("Seed of the random inputs"),
                             llvm::cl::cat(runCategory));
llvm::cl::opt<std::string>
    outputDir("output-dir", llvm::cl::init("."), llvm::cl::value_desc("dir"),
              llvm::cl::desc("Where out<i>.npy are written"),
              llvm::cl::cat(runCategory));
llvm::cl::opt<int> repeat("repeat", llvm::cl::init(1),
                          llvm::cl::value_desc("K"),
                          llvm::cl::desc("Run the program K times (timing)"),
                          llvm::cl::cat(runCategory));
llvm::cl::opt<std::string>
    printIr("print-ir", llvm::cl::value_desc("stage"),
            llvm::cl::desc("Print the IR after a stage: input, sharded, "
                           "redistributed or rank"),
            llvm::cl::cat(runCategory));

[[noreturn]] void fail(const std::string &error) {
  std::cerr << "dtorch-run: " << error << "\n";
  std::exit(1);
}

/// Parses the command line the LLVM way: --help lists the options above, a
/// bad option or value prints "dtorch-run: ..." and exits with code 1.
Options parse(int argc, char **argv) {
  llvm::cl::alias helpShort(
      "h", llvm::cl::desc("Alias for --help"),
      llvm::cl::aliasopt(*llvm::cl::getRegisteredOptions().lookup("help")),
      llvm::cl::cat(runCategory));
  llvm::cl::HideUnrelatedOptions(runCategory);
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "compiles a dtensor-dialect graph, runs it on local (or given) workers "
      "and writes every output as .npy\n");
  Options o;
  o.file = inputFile;
  o.entry = entryName;
  o.worldSize = worldSize;
  o.procs = procs;
  o.backend = backendKind;
  for (const std::string &address : workerAddresses)
    if (!address.empty())
      o.workers.push_back(address);
  o.token = token;
  o.inputs.assign(inputFiles.begin(), inputFiles.end());
  o.seed = seed;
  o.outputDir = outputDir;
  o.repeat = repeat;
  o.printIr = printIr;
  if (o.worldSize < 1 || o.procs < 1 || o.repeat < 1)
    fail("--world-size, --procs and --repeat must be positive");
  return o;
}

std::string workerExecutable(const char *argv0) {
  if (const char *env = std::getenv("DTORCH_WORKER"))
    return env;
  std::string self = argv0;
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0)
    self.assign(buf, n);
  return self.substr(0, self.rfind('/') + 1) + "dtorch-worker";
}

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i)
    out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

rt::Tensor randomInput(const TensorInfo &info, uint64_t seed) {
  rt::Tensor t = rt::Tensor::empty(info.dtype, info.shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = rt::randomNormal(seed, i);
    switch (info.dtype) {
    case wire::F32:
      t.data_as<float>()[i] = static_cast<float>(v);
      break;
    case wire::F64:
      t.data_as<double>()[i] = v;
      break;
    case wire::I32:
      t.data_as<int32_t>()[i] =
          static_cast<int32_t>(rt::randomBits(seed, i, 0) % 10);
      break;
    case wire::I64:
      t.data_as<int64_t>()[i] =
          static_cast<int64_t>(rt::randomBits(seed, i, 0) % 10);
      break;
    case wire::BOOL:
      static_cast<uint8_t *>(t.data())[i] = rt::randomBits(seed, i, 0) & 1;
      break;
    default:
      throw std::runtime_error("cannot generate random inputs of this dtype");
    }
  }
  return t;
}

double checksum(const rt::Tensor &t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype()) {
    case wire::F32:
      s += t.data_as<float>()[i];
      break;
    case wire::F64:
      s += t.data_as<double>()[i];
      break;
    case wire::I32:
      s += t.data_as<int32_t>()[i];
      break;
    case wire::I64:
      s += static_cast<double>(t.data_as<int64_t>()[i]);
      break;
    case wire::BOOL:
      s += static_cast<const uint8_t *>(t.data())[i];
      break;
    default:
      break;
    }
  }
  return s;
}

int run(const Options &o, const char *argv0) {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  std::ifstream in(o.file, std::ios::binary);
  if (!in)
    throw std::runtime_error(o.file + ": cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  CompileOptions copts;
  copts.recordStages = !o.printIr.empty();
  CompileResult compiled = compileModule(buf.str(), o.file, copts);
  if (!compiled.ok)
    throw std::runtime_error("cannot compile " + o.file + ":\n" +
                             compiled.error);
  if (compiled.functions.empty())
    throw std::runtime_error(o.file + " has no function");
  const CompiledFunction *fn = &compiled.functions[0];
  if (!o.entry.empty()) {
    fn = nullptr;
    for (const CompiledFunction &f : compiled.functions)
      if (f.name == o.entry)
        fn = &f;
    if (!fn)
      throw std::runtime_error("no function @" + o.entry + " in " + o.file);
  } else if (compiled.functions.size() > 1) {
    throw std::runtime_error(o.file +
                             " has several functions; pick one with --entry");
  }
  if (!o.printIr.empty()) {
    bool found = false;
    for (const auto &[stage, ir] : compiled.stages)
      if (stage == o.printIr) {
        std::cout << ir;
        found = true;
      }
    if (!found)
      throw std::runtime_error("unknown stage '" + o.printIr + "'");
  }
  int64_t meshRanks = meshSize(fn->meshShape);
  if (meshRanks > o.worldSize)
    throw std::runtime_error(
        "@" + fn->name + " runs on a mesh of " + std::to_string(meshRanks) +
        " ranks but --world-size is " + std::to_string(o.worldSize));
  if (!o.inputs.empty() && o.inputs.size() != fn->inputs.size())
    throw std::runtime_error("@" + fn->name + " takes " +
                             std::to_string(fn->inputs.size()) + " inputs, " +
                             std::to_string(o.inputs.size()) + " given");
  std::vector<rt::Tensor> inputs;
  for (size_t i = 0; i < fn->inputs.size(); ++i) {
    const TensorInfo &info = fn->inputs[i];
    rt::Tensor t =
        o.inputs.empty() ? randomInput(info, o.seed + i) : readNpy(o.inputs[i]);
    if (t.shape() != info.shape || t.dtype() != info.dtype)
      throw std::runtime_error("input " + std::to_string(i) + " is " +
                               t.describe() + " but @" + fn->name +
                               " expects " + rt::dtypeName(info.dtype) +
                               shapeStr(info.shape));
    inputs.push_back(std::move(t));
  }
  auto t1 = Clock::now();

  ClusterConfig cfg;
  cfg.worldSize = o.worldSize;
  cfg.numProcesses = o.procs;
  cfg.workerExecutable = workerExecutable(argv0);
  cfg.workerAddresses = o.workers;
  cfg.token = o.token;
  if (!o.workers.empty() && o.token.empty())
    if (const char *env = std::getenv("DTORCH_TOKEN"))
      cfg.token = env;
  std::unique_ptr<Backend> backend = makeBackend(o.backend, cfg);
  auto t2 = Clock::now();

  Handle next = 1;
  std::vector<Handle> inHandles, outHandles;
  for (size_t i = 0; i < inputs.size(); ++i) {
    Handle h = next++;
    inHandles.push_back(h);
    std::vector<rt::Tensor> pieces = scatterPieces(
        inputs[i], fn->inputs[i].meshShape, fn->inputs[i].placements);
    for (int64_t r = 0; r < meshRanks; ++r)
      backend->put(r, h, pieces[r]);
  }
  std::vector<int64_t> ranks;
  for (int64_t r = 0; r < meshRanks; ++r)
    ranks.push_back(r);
  backend->uploadPrograms(1, fn->programs, ranks);
  double runSeconds = 0;
  for (int k = 0; k < o.repeat; ++k) {
    for (Handle h : outHandles)
      for (int64_t r = 0; r < meshRanks; ++r)
        backend->free(r, {h});
    outHandles.clear();
    for (size_t i = 0; i < fn->outputs.size(); ++i)
      outHandles.push_back(next++);
    auto s = Clock::now();
    for (int64_t r = 0; r < meshRanks; ++r)
      backend->run(r, 1, inHandles, outHandles);
    backend->synchronize();
    runSeconds += std::chrono::duration<double>(Clock::now() - s).count();
  }
  std::printf("%-8s %-10s %-20s %-22s %s\n", "output", "dtype", "shape",
              "checksum", "file");
  for (size_t i = 0; i < fn->outputs.size(); ++i) {
    std::vector<rt::Tensor> pieces;
    for (int64_t r = 0; r < meshRanks; ++r)
      pieces.push_back(backend->fetch(r, outHandles[i]).get());
    const TensorInfo &info = fn->outputs[i];
    rt::Tensor full = assemblePieces(pieces, info.shape, info.dtype,
                                     info.meshShape, info.placements);
    std::string path = o.outputDir + "/out" + std::to_string(i) + ".npy";
    writeNpy(path, full);
    std::printf("%-8s %-10s %-20s %-22.10g %s\n",
                ("out" + std::to_string(i)).c_str(), rt::dtypeName(info.dtype),
                shapeStr(info.shape).c_str(), checksum(full), path.c_str());
  }
  backend->shutdown();
  auto t3 = Clock::now();
  auto sec = [](auto a, auto b) {
    return std::chrono::duration<double>(b - a).count();
  };
  std::printf("compile %.3f s, start workers %.3f s, run %.6f s per iteration "
              "(%d), total %.3f s\n",
              sec(t0, t1), sec(t1, t2), runSeconds / o.repeat, o.repeat,
              sec(t0, t3));
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  try {
    return run(o, argv[0]);
  } catch (const std::exception &e) {
    std::cerr << "dtorch-run: error: " << e.what() << "\n";
    return 1;
  }
}
