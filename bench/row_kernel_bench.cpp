//===- row_kernel_bench.cpp - every generated kernel of a graph, timed ----===//
//
//   build/bin/row_kernel_bench GRAPH.mlir [--repeat 300] [--json FILE]
//
// Compiles a dtensor graph (e.g. the GPT step's segment: dtorch.last_ir(
// "input") saved to a file) for rank 0 of its mesh with fusion, as the
// controller does, and calls every generated kernel of the program
// (the fused groups and a generated fused_adam) directly, `repeat` times on
// random inputs of its operands' shapes (values in [-2, 2], bools 0/1, integers
// 0), taking the fastest call in wall time (preemption on a shared machine only
// adds to it; the thread's CPU clock of a VM can under-count a call). One line
// per executable: the instruction that runs it, the microseconds of one
// call, its operands' bytes, its symbol and source location. The compiler
// switches (DTORCH_ROW_SWEEP_REUSE, DTORCH_ROW_TREE_MAX, ...) are read
// from the environment, so runs with different settings compare the
// code they generate (bench/row_kernel_ab.py alternates them). Not run by
// the tests.
//
// --pair DIR: each kernel also from DIR/<symbol>.so (the same kernel as
// another process generated it, DTORCH_KERNEL_DUMP_DIR=DIR, e.g. with a
// switch off), the two called in turn `repeat` times: the JSON adds the
// other's fastest call ("us_pair") and the medians of both ("median_us",
// "median_us_pair"), taken call by call, so a busy host slows both alike.
//
//===----------------------------------------------------------------------===//
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/MeshContext.h"
#include "dtorch/runtime/Tensor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace dtorch;

namespace {

double wallSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

rt::Tensor randomOf(const wire::TensorSpec &spec, std::mt19937 &rng) {
  rt::Tensor t = rt::Tensor::emptyLike(spec);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  int64_t n = t.numel();
  switch (spec.dtype()) {
  case wire::F32:
    for (int64_t i = 0; i < n; ++i)
      t.data_as<float>()[i] = u(rng);
    break;
  case wire::F64:
    for (int64_t i = 0; i < n; ++i)
      t.data_as<double>()[i] = u(rng);
    break;
  case wire::F16:
    for (int64_t i = 0; i < n; ++i)
      t.data_as<rt::Half>()[i] = rt::Half(u(rng));
    break;
  case wire::BF16:
    for (int64_t i = 0; i < n; ++i)
      t.data_as<rt::BFloat16>()[i] = rt::BFloat16(u(rng));
    break;
  case wire::BOOL:
    for (int64_t i = 0; i < n; ++i)
      static_cast<uint8_t *>(t.data())[i] = rng() & 1;
    break;
  default:
    std::memset(t.data(), 0, t.nbytes());
    break;
  }
  return t;
}

} // namespace

int main(int argc, char **argv) {
  std::string path, jsonPath, pairDir;
  int repeat = 300;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc)
      repeat = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc)
      jsonPath = argv[++i];
    else if (a == "--pair" && i + 1 < argc)
      pairDir = argv[++i];
    else
      path = a;
  }
  if (path.empty()) {
    std::fprintf(
        stderr, "usage: row_kernel_bench GRAPH.mlir [--repeat N] [--json F]\n");
    return 2;
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CompileOptions options;
  options.fuseElementwise = true;
  CompileResult result = compileModule(text.str(), path, options);
  if (!result.ok) {
    std::fprintf(stderr, "compile failed: %s\n", result.error.c_str());
    return 1;
  }
  const CompiledFunction &fn = result.functions[0];
  std::vector<int64_t> ranks(static_cast<size_t>(meshSize(fn.meshShape)));
  for (size_t r = 0; r < ranks.size(); ++r)
    ranks[r] = static_cast<int64_t>(r);
  wire::Program program =
      rt::resolveForRank(fn.programs[fn.programAt(0)],
                         rt::RankContext::of(fn.meshShape, ranks, 0));
  std::mt19937 rng(7);
  std::FILE *json =
      jsonPath.empty() ? nullptr : std::fopen(jsonPath.c_str(), "w");
  if (json)
    std::fprintf(json, "[\n");
  bool first = true;
  for (int i = 0; i < program.instructions_size(); ++i) {
    const wire::Instruction &inst = program.instructions(i);
    if (inst.op() != "fused" && inst.op() != "fused_adam")
      continue;
    const wire::Executable &exe = program.executables(inst.executable());
    if (exe.object().empty())
      continue;
    rt::GeneratedKernelFn kernel = rt::loadExecutable(exe);
    const wire::Executable &g = exe;
    std::vector<rt::Tensor> ins, outs;
    std::vector<void *> inPtrs, outPtrs;
    int64_t bytes = 0;
    for (const wire::TensorSpec &s : g.inputs()) {
      ins.push_back(randomOf(s, rng));
      bytes += static_cast<int64_t>(ins.back().nbytes());
    }
    for (const wire::TensorSpec &s : g.outputs()) {
      outs.push_back(rt::Tensor::emptyLike(s));
      bytes += static_cast<int64_t>(outs.back().nbytes());
    }
    for (rt::Tensor &t : ins)
      inPtrs.push_back(t.data());
    for (rt::Tensor &t : outs)
      outPtrs.push_back(t.data());
    std::vector<double> scalars(static_cast<size_t>(g.num_scalars()) + 1, 0.0);
    auto it = inst.attrs().find("scalars");
    if (it != inst.attrs().end())
      std::memcpy(
          scalars.data(), it->second.data().data(),
          std::min(it->second.data().size(), scalars.size() * sizeof(double)));
    rt::GeneratedKernelFn other = nullptr;
    if (!pairDir.empty()) {
      std::ifstream so(pairDir + "/" + exe.symbol() + ".so", std::ios::binary);
      std::stringstream bytes;
      bytes << so.rdbuf();
      if (so && !bytes.str().empty()) {
        wire::Executable copy = exe;
        copy.set_object(bytes.str());
        copy.set_content_hash(rt::executableHash(copy.object()));
        other = rt::loadExecutable(copy);
      }
    }
    kernel(inPtrs.data(), outPtrs.data(), scalars.data());
    if (other)
      other(inPtrs.data(), outPtrs.data(), scalars.data());
    double best = 1e30, bestOther = 1e30;
    std::vector<double> times, otherTimes;
    for (int r = 0; r < repeat; ++r) {
      double t = wallSeconds();
      kernel(inPtrs.data(), outPtrs.data(), scalars.data());
      times.push_back(wallSeconds() - t);
      best = std::min(best, times.back());
      if (!other)
        continue;
      t = wallSeconds();
      other(inPtrs.data(), outPtrs.data(), scalars.data());
      otherTimes.push_back(wallSeconds() - t);
      bestOther = std::min(bestOther, otherTimes.back());
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v.empty() ? 0.0 : v[v.size() / 2];
    };
    std::string where = inst.location();
    std::printf("#%-4d %8.2f us  %7.1f KB  %s  %s\n", i, best * 1e6,
                bytes / 1024.0, exe.symbol().c_str(),
                where.substr(0, 60).c_str());
    if (json) {
      std::fprintf(
          json, "%s {\"instruction\": %d, \"us\": %.3f, \"bytes\": %lld",
          first ? "" : ",\n", i, best * 1e6, static_cast<long long>(bytes));
      if (other)
        std::fprintf(json,
                     ", \"us_pair\": %.3f, \"median_us\": %.3f, "
                     "\"median_us_pair\": %.3f",
                     bestOther * 1e6, median(times) * 1e6,
                     median(otherTimes) * 1e6);
      std::fprintf(json, "}");
      first = false;
    }
  }
  if (json) {
    std::fprintf(json, "\n]\n");
    std::fclose(json);
  }
  return 0;
}
