//===- GpuKernelCodegenTest.cpp - fused groups to PTX, assembled by ptxas -===//
//
// With CompileOptions::cudaArch set, every fused group of a program is
// generated for the GPU (lib/Compiler/GpuKernelCodegen.cpp). Every fusible
// kernel in every element type it is fused for becomes PTX, which the CUDA
// toolkit's ptxas must assemble for sm_90 (a broken PTX fails the test);
// broadcast operands, several results, rank 0 and groups larger than a
// block get the right launch shape and parameters; groups ending in row
// reductions (softmax, the norms, cross-entropy) become one thread per row
// in every float dtype and assemble too, unless DTORCH_GPU_ROW_FUSION=0
// keeps them out; the host executor refuses GPU code; groups mixing element
// types (i1, where, casts, iota) assemble too.
// The tests that need ptxas skip with the reason where the toolkit is
// missing. Running the kernels is test/cpp/cuda/GpuFusedKernelTest.cpp.
//
//===----------------------------------------------------------------------===//

#include "FusedAdamSources.h"
#include "FusedSgdSources.h"
#include "ProgramsByPosition.h"
#include "RowReductionSources.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "rank/IR/FusibleKernels.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace dtorch;

namespace {

const char *const kArch = "sm_90";

std::string ptxasPath() {
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *root = std::getenv(var); root && *root) {
      std::string p = std::string(root) + "/bin/ptxas";
      if (access(p.c_str(), X_OK) == 0)
        return p;
    }
  const char *fallback = "/usr/local/cuda/bin/ptxas";
  return access(fallback, X_OK) == 0 ? fallback : "";
}

/// Assembles `ptx` with ptxas for `arch`; "" on success, else its output.
std::string assemble(const std::string &ptx, const std::string &arch) {
  char dir[] = "/tmp/dtorch-ptxas-XXXXXX";
  if (!mkdtemp(dir))
    return "cannot make a temporary folder";
  std::string in = std::string(dir) + "/k.ptx", out = std::string(dir) + "/k.o",
              log = std::string(dir) + "/log";
  {
    std::ofstream f(in);
    f << ptx;
  }
  std::string command = ptxasPath() + " -arch=" + arch + " " + in + " -o " +
                        out + " > " + log + " 2>&1";
  int rc = std::system(command.c_str());
  std::ifstream l(log);
  std::stringstream text;
  text << l.rdbuf();
  std::remove(in.c_str());
  std::remove(out.c_str());
  std::remove(log.c_str());
  rmdir(dir);
  if (rc != 0)
    return "ptxas exit " + std::to_string(WEXITSTATUS(rc)) + ": " + text.str();
  return "";
}

std::string tensorType(const std::string &shape, const std::string &dtype) {
  return "!dtensor.tensor<" + (shape.empty() ? "" : shape + "x") + dtype +
         ", #m, [R]>";
}

/// `kernel` applied to the arguments, then multiplied by a constant: a
/// group of three ops (kernel, full, mul), or a `full` and the kernel for
/// a kernel that takes no mul (bool).
std::string oneKernelSource(const std::string &kernel, unsigned operands,
                            const std::string &shape,
                            const std::string &dtype) {
  std::string t = tensorType(shape, dtype);
  std::string args = operands == 2 ? "%a, %b" : "%a";
  std::string argTypes = operands == 2 ? t + ", " + t : t;
  return "#m = #dtensor.mesh<[1]>\nfunc.func @f(%a: " + t + ", %b: " + t +
         ") -> (" + t + ", " + t + ") {\n  %r = dtensor." + kernel + " " +
         args + " : (" + argTypes + ") -> " + t + "\n  %c = dtensor.full " +
         "1.0 : " + t + "\n  return %r, %c : " + t + ", " + t + "\n}\n";
}

CompileResult compileForGpu(const std::string &source) {
  CompileOptions options;
  options.fuseElementwise = true;
  options.cudaArch = kArch;
  return compileModule(source, "gpu.mlir", options);
}

/// The program of mesh position 0 and its GPU executables.
wire::Program programOf(const CompileResult &result) {
  return emitted::programsByPosition(result.functions[0])[0];
}

struct DtypeName {
  const char *mlir;
  unsigned typeBit; // rank::FusibleTypes
};

const DtypeName kDtypes[] = {
    {"f32", rank::kFloatTypes},   {"f64", rank::kFloatTypes},
    {"f16", rank::kFloatTypes},   {"bf16", rank::kFloatTypes},
    {"i32", rank::kIntegerTypes}, {"i64", rank::kIntegerTypes},
    {"i1", rank::kBoolType},
};

TEST(GpuKernelCodegen, EveryFusibleKernelEveryDtypeAssembles) {
  std::string ptxas = ptxasPath();
  if (ptxas.empty())
    GTEST_SKIP()
        << "no ptxas (CUDA toolkit) under CUDA_HOME or /usr/local/cuda";
  // The check itself fails on a broken PTX.
  EXPECT_NE(assemble(".version 7.8\n.target sm_90\n.address_size 64\n"
                     ".visible .entry k() { bogus.f32 %r1; }\n",
                     kArch),
            "");
  int cases = 0, floatCases = 0;
  for (const rank::FusibleKernel &k : rank::fusibleKernels()) {
    if (k.kind != rank::FusibleKind::Elementwise)
      continue;
    for (const DtypeName &d : kDtypes) {
      if (!(k.types & d.typeBit))
        continue;
      std::string what = std::string(k.name) + " " + d.mlir;
      CompileResult result = compileForGpu(
          oneKernelSource(std::string(k.name), k.numOperands, "1000", d.mlir));
      ASSERT_TRUE(result.ok) << what << ": " << result.error;
      wire::Program program = programOf(result);
      ASSERT_EQ(program.executables_size(), 1) << what;
      const wire::Executable &exe = program.executables(0);
      ASSERT_TRUE(exe.has_gpu()) << what;
      EXPECT_TRUE(exe.object().empty()) << what;
      const wire::GpuKernel &gpu = exe.gpu();
      EXPECT_EQ(gpu.arch(), kArch);
      EXPECT_NE(gpu.ptx().find(".target sm_90"), std::string::npos) << what;
      EXPECT_NE(gpu.ptx().find(".entry " + gpu.entry()), std::string::npos)
          << what;
      // 1000 elements in blocks of 256 threads.
      EXPECT_EQ(gpu.block_x(), 256) << what;
      EXPECT_EQ(gpu.grid_x(), 4) << what;
      // Every input and output is a parameter, and nothing else.
      EXPECT_EQ(gpu.params_size(),
                exe.inputs_size() + exe.outputs_size() + exe.num_scalars())
          << what;
      std::string failure = assemble(gpu.ptx(), kArch);
      EXPECT_EQ(failure, "") << what << "\n" << gpu.ptx();
      ++cases;
      floatCases += d.typeBit == rank::kFloatTypes;
    }
  }
  std::printf("PTX assembled by ptxas for %s: %d kernels (%d float)\n", kArch,
              cases, floatCases);
  EXPECT_GE(floatCases, 4 * 18);
}

/// A chain with a broadcast operand, a constant and two results over a
/// 3-D shape: one generated kernel, launched over every element.
TEST(GpuKernelCodegen, ChainWithBroadcastAndTwoResults) {
  for (const char *dtype : {"f32", "bf16", "f16", "f64"}) {
    std::string x = tensorType("3x5x700", dtype), w = tensorType("700", dtype);
    std::string source =
        "#m = #dtensor.mesh<[1]>\nfunc.func @f(%x: " + x + ", %w: " + w +
        ") -> (" + x + ", " + x + ") {\n  %wb = dtensor.broadcast_to %w : (" +
        w + ") -> " + x + "\n  %m = dtensor.mul %x, %wb : (" + x + ", " + x +
        ") -> " + x + "\n  %c = dtensor.full 0.5 : " + x +
        "\n  %s = dtensor.add %m, %c : (" + x + ", " + x + ") -> " + x +
        "\n  %g = dtensor.gelu %s : (" + x + ") -> " + x +
        "\n  %t = dtensor.tanh %g : (" + x + ") -> " + x +
        "\n  return %g, %t : " + x + ", " + x + "\n}\n";
    CompileResult result = compileForGpu(source);
    ASSERT_TRUE(result.ok) << dtype << ": " << result.error;
    wire::Program program = programOf(result);
    int fused = 0;
    for (const auto &inst : program.instructions())
      fused += inst.op() == "fused";
    EXPECT_EQ(fused, 1) << dtype;
    ASSERT_EQ(program.executables_size(), 1) << dtype;
    const wire::Executable &exe = program.executables(0);
    ASSERT_TRUE(exe.has_gpu());
    EXPECT_EQ(exe.inputs_size(), 2) << dtype;
    EXPECT_EQ(exe.outputs_size(), 2) << dtype;
    EXPECT_EQ(exe.num_scalars(), 1) << dtype;
    EXPECT_EQ(exe.gpu().grid_x(), (3 * 5 * 700 + 255) / 256) << dtype;
    // The parameters name each input, output and the constant once.
    std::vector<int> seen(5, 0);
    for (int p : exe.gpu().params()) {
      ASSERT_GE(p, 0);
      ASSERT_LT(p, 5);
      ++seen[p];
    }
    EXPECT_EQ(seen, std::vector<int>(5, 1)) << dtype;
    // What the kernel needs of libdevice (float64 erf and tanh, the fma of
    // the float32 polynomials) is linked in and inlined: no call is left to
    // resolve.
    EXPECT_EQ(exe.gpu().ptx().find("__nv_"), std::string::npos) << dtype;
    EXPECT_EQ(exe.gpu().ptx().find(".extern"), std::string::npos) << dtype;
    if (!ptxasPath().empty())
      EXPECT_EQ(assemble(exe.gpu().ptx(), kArch), "") << dtype;
  }
}

TEST(GpuKernelCodegen, RankZeroAndOtherArchitecture) {
  std::string t = tensorType("", "f32");
  std::string source = "#m = #dtensor.mesh<[1]>\nfunc.func @f(%a: " + t +
                       ") -> " + t + " {\n  %e = dtensor.exp %a : (" + t +
                       ") -> " + t + "\n  %s = dtensor.sin %e : (" + t +
                       ") -> " + t + "\n  return %s : " + t + "\n}\n";
  CompileOptions options;
  options.fuseElementwise = true;
  options.cudaArch = "sm_80";
  CompileResult result = compileModule(source, "gpu.mlir", options);
  ASSERT_TRUE(result.ok) << result.error;
  wire::Program program = programOf(result);
  ASSERT_EQ(program.executables_size(), 1);
  const wire::GpuKernel &gpu = program.executables(0).gpu();
  EXPECT_EQ(gpu.arch(), "sm_80");
  EXPECT_EQ(gpu.grid_x(), 1);
  EXPECT_NE(gpu.ptx().find(".target sm_80"), std::string::npos);
  if (!ptxasPath().empty())
    EXPECT_EQ(assemble(gpu.ptx(), "sm_80"), "");
}

int reductionInstructions(const wire::Program &program) {
  int n = 0;
  for (const auto &inst : program.instructions())
    n += inst.op() == "sum" || inst.op() == "max" || inst.op() == "min" ||
         inst.op() == "mean";
  return n;
}

/// A group ending in row reductions (softmax, log_softmax, layer_norm,
/// rms_norm, cross-entropy) becomes one GPU kernel of one thread per row in
/// every float dtype, which ptxas assembles; its launch covers the rows.
TEST(GpuKernelCodegen, RowKernelsEveryDtypeAssemble) {
  using namespace dtorch::row_sources;
  bool haveAssembler = !ptxasPath().empty();
  struct RowCase {
    const char *name;
    std::string (*source)(const std::string &, int64_t, int64_t);
    int64_t rows, n, threads; // threads: rows of the kernel
  };
  auto softmax = [](const std::string &d, int64_t r, int64_t n) {
    return softmaxSource(d, r, n, "exp");
  };
  const RowCase cases[] = {
      {"softmax", +softmax, 300, 129, 300},
      {"log_softmax", logSoftmaxSource, 9, 11, 2 * 9},
      {"layer_norm", layerNormSource, 19, 1001, 19},
      {"rms_norm", rmsNormSource, 513, 64, 513},
      {"cross_entropy", crossEntropySource, 64, 65, 64},
  };
  int assembled = 0;
  for (const RowCase &c : cases)
    for (const char *dtype : kFloatDtypes) {
      std::string what = std::string(c.name) + " " + dtype;
      CompileResult result = compileForGpu(c.source(dtype, c.rows, c.n));
      ASSERT_TRUE(result.ok) << what << ": " << result.error;
      wire::Program program = programOf(result);
      EXPECT_EQ(reductionInstructions(program), 0) << what;
      ASSERT_EQ(program.executables_size(), 1) << what;
      const wire::Executable &exe = program.executables(0);
      ASSERT_TRUE(exe.has_gpu()) << what;
      const wire::GpuKernel &gpu = exe.gpu();
      EXPECT_EQ(gpu.block_x(), 256) << what;
      EXPECT_EQ(gpu.grid_x(), (c.threads + 255) / 256) << what;
      EXPECT_EQ(gpu.params_size(),
                exe.inputs_size() + exe.outputs_size() + exe.num_scalars())
          << what;
      EXPECT_EQ(gpu.ptx().find(".extern"), std::string::npos) << what;
      // The rows are summed in float64, in order: an add.f64 chain.
      EXPECT_NE(gpu.ptx().find("add.rn.f64"), std::string::npos) << what;
      if (haveAssembler) {
        EXPECT_EQ(assemble(gpu.ptx(), kArch), "") << what << "\n" << gpu.ptx();
        ++assembled;
      }
    }
  if (!haveAssembler)
    GTEST_SKIP() << "no ptxas (CUDA toolkit) under CUDA_HOME or "
                    "/usr/local/cuda: the row kernels were generated, not "
                    "assembled";
  std::printf("row kernels assembled by ptxas for %s: %d\n", kArch, assembled);
  EXPECT_EQ(assembled, 5 * 4);
}

/// DTORCH_GPU_ROW_FUSION=0: the GPU groups leave their reductions to the
/// kernel registry and fuse what is elementwise; the host still fuses them.
TEST(GpuKernelCodegen, RowFusionCanBeTurnedOffForTheGpu) {
  std::string source =
      dtorch::row_sources::softmaxSource("f32", 16, 100, "exp");
  CompileResult fused = compileForGpu(source);
  ASSERT_TRUE(fused.ok) << fused.error;
  EXPECT_EQ(reductionInstructions(programOf(fused)), 0);
  setenv("DTORCH_GPU_ROW_FUSION", "0", 1);
  CompileResult result = compileForGpu(source);
  unsetenv("DTORCH_GPU_ROW_FUSION");
  ASSERT_TRUE(result.ok) << result.error;
  wire::Program program = programOf(result);
  EXPECT_EQ(reductionInstructions(program), 2);
  EXPECT_GE(program.executables_size(), 1);
  for (const auto &exe : program.executables())
    EXPECT_TRUE(exe.has_gpu());
  // For the host the same source fuses the reductions in.
  CompileOptions host;
  host.fuseElementwise = true;
  CompileResult onHost = compileModule(source, "host.mlir", host);
  ASSERT_TRUE(onHost.ok) << onHost.error;
  EXPECT_EQ(reductionInstructions(programOf(onHost)), 0);
}

TEST(GpuKernelCodegen, HostExecutorRefusesGpuCode) {
  std::string t = tensorType("64", "f32");
  CompileResult result = compileForGpu(oneKernelSource("exp", 1, "64", "f32"));
  ASSERT_TRUE(result.ok) << result.error;
  wire::Program program = programOf(result);
  rt::Executor executor(nullptr);
  wire::TensorSpec spec;
  spec.set_dtype(wire::F32);
  spec.add_shape(64);
  rt::Tensor in = rt::Tensor::emptyLike(spec);
  try {
    executor.run(program, {in, in});
    FAIL() << "a GPU kernel ran on the host";
  } catch (const rt::RuntimeError &error) {
    EXPECT_NE(std::string(error.what()).find("is GPU code"), std::string::npos)
        << error.what();
  }
  // A PTX changed after the controller hashed it is refused at upload.
  wire::Program corrupt = program;
  corrupt.mutable_executables(0)->mutable_gpu()->mutable_ptx()->append(" ");
  EXPECT_THROW(executor.validate(corrupt), rt::RuntimeError);
  // So is a parameter outside the executable's operands.
  wire::Program badParam = program;
  wire::Executable &exe = *badParam.mutable_executables(0);
  exe.mutable_gpu()->set_params(0, 9);
  exe.set_content_hash(rt::executableHash(exe.gpu().SerializeAsString()));
  EXPECT_THROW(executor.validate(badParam), rt::RuntimeError);
}

/// Groups that mix element types (comparisons into i1, `where`, casts
/// between any two element types, `iota`) generate PTX that ptxas
/// assembles, as one kernel each.
TEST(GpuKernelCodegen, MixedTypeGroupsAssemble) {
  if (ptxasPath().empty())
    GTEST_SKIP()
        << "no ptxas (CUDA toolkit) under CUDA_HOME or /usr/local/cuda";
  const char *const names[] = {"f32", "f64", "f16", "bf16", "i32", "i64", "i1"};
  std::vector<std::pair<std::string, std::string>> sources;
  auto group = [](const std::string &args, const std::string &body,
                  const std::string &result) {
    return "#m = #dtensor.mesh<[1]>\nfunc.func @f(" + args + ") -> (" + result +
           ", " + result + ") {\n" + body +
           "  %k = dtensor.full 1.0 : " + result +
           "\n  return %r, %k : " + result + ", " + result + "\n}\n";
  };
  for (const char *from : names) {
    std::string t = tensorType("1000", from), m = tensorType("1000", "i1");
    for (const char *cmp : {"eq", "lt"})
      sources.push_back(
          {std::string(cmp) + " " + from,
           group("%a: " + t + ", %b: " + t,
                 std::string("  %r = dtensor.") + cmp + " %a, %b : (" + t +
                     ", " + t + ") -> " + m + "\n",
                 m)});
    sources.push_back({std::string("where ") + from,
                       group("%c: " + m + ", %a: " + t + ", %b: " + t,
                             "  %r = dtensor.where %c, %a, %b : (" + m + ", " +
                                 t + ", " + t + ") -> " + t + "\n",
                             t)});
    for (const char *to : names)
      if (std::string(from) != to) {
        std::string u = tensorType("1000", to);
        sources.push_back(
            {std::string("cast ") + from + " -> " + to,
             group("%a: " + t,
                   "  %r = dtensor.cast %a : (" + t + ") -> " + u + "\n", u)});
      }
    if (std::string(from) != "i1") {
      std::string it = tensorType("40x25", from);
      sources.push_back(
          {std::string("iota ") + from,
           group("",
                 "  %i = dtensor.iota {dim = 1 : i64, start = 3.0 : f64, step "
                 "= -2.0 : f64} : () -> " +
                     it + "\n  %r = dtensor.neg %i : (" + it + ") -> " + it +
                     "\n",
                 it)});
    }
  }
  int cases = 0;
  for (const auto &[what, source] : sources) {
    CompileResult result = compileForGpu(source);
    ASSERT_TRUE(result.ok) << what << ": " << result.error;
    wire::Program program = programOf(result);
    ASSERT_EQ(program.executables_size(), 1) << what;
    const wire::Executable &exe = program.executables(0);
    ASSERT_TRUE(exe.has_gpu()) << what;
    EXPECT_EQ(assemble(exe.gpu().ptx(), kArch), "") << what << "\n"
                                                    << exe.gpu().ptx();
    ++cases;
  }
  std::printf("mixed-type PTX assembled by ptxas for %s: %d kernels\n", kArch,
              cases);
  EXPECT_EQ(cases, 7 * 2 + 7 + 42 + 6);
}

} // namespace

namespace {

/// dtensor.fused_adam compiled for a CUDA mesh: the program calls one
/// generated GPU kernel (one thread per element of every parameter), for
/// every float dtype and mode and a mix of dtypes, and ptxas assembles it.
TEST(GpuKernelCodegen, FusedAdamEveryDtypeAndModeAssembles) {
  using adamsources::AdamConfig;
  using adamsources::AdamParam;
  bool haveAssembler = !ptxasPath().empty();
  std::vector<std::vector<AdamParam>> groups;
  for (const char *dtype : {"f32", "f64", "f16", "bf16"})
    groups.push_back({{"3x37", dtype}, {"", dtype}, {"1031", dtype}});
  groups.push_back({{"5x7", "f32"}, {"33", "bf16"}, {"9", "f64"}});
  std::vector<AdamConfig> configs(4);
  configs[1].decoupled = false;
  configs[2].weightDecay = 0;
  configs[3].amsgrad = true;
  configs[3].maximize = true;
  int assembled = 0;
  for (const auto &params : groups)
    for (const AdamConfig &c : configs) {
      std::string what = params[0].dtype + " group of " +
                         std::to_string(params.size()) +
                         (c.amsgrad ? " amsgrad" : "");
      CompileResult result =
          compileForGpu(adamsources::fusedAdamSource(params, c));
      ASSERT_TRUE(result.ok) << what << ": " << result.error;
      wire::Program program = programOf(result);
      int calls = 0;
      for (const auto &inst : program.instructions())
        if (inst.op() == "fused_adam") {
          ++calls;
          EXPECT_TRUE(rt::callsGeneratedKernel(inst)) << what;
        }
      ASSERT_EQ(calls, 1) << what;
      ASSERT_EQ(program.executables_size(), 1) << what;
      const wire::Executable &exe = program.executables(0);
      ASSERT_TRUE(exe.has_gpu()) << what;
      int64_t total = 0;
      for (const AdamParam &p : params)
        total += p.shape == "3x37"  ? 111
                 : p.shape == ""    ? 1
                 : p.shape == "5x7" ? 35
                                    : std::stoll(p.shape);
      EXPECT_EQ(exe.gpu().grid_x(), (total + 255) / 256) << what;
      EXPECT_EQ(exe.num_scalars(), 4) << what;
      if (haveAssembler) {
        std::string error = assemble(exe.gpu().ptx(), kArch);
        EXPECT_EQ(error, "") << what;
        ++assembled;
      }
    }
  if (!haveAssembler)
    GTEST_SKIP() << "no ptxas (CUDA toolkit) under CUDA_HOME or "
                    "/usr/local/cuda: the PTX was generated, not assembled";
  std::printf("fused_adam kernels assembled by ptxas for %s: %d\n", kArch,
              assembled);
}

/// dtensor.fused_sgd compiled for a CUDA mesh: one generated GPU kernel per
/// program for every float dtype and mode (no momentum, first step, later
/// steps with Nesterov and decay) and a mix of dtypes; ptxas assembles it.
TEST(GpuKernelCodegen, FusedSgdEveryDtypeAndModeAssembles) {
  using adamsources::AdamParam;
  using sgdsources::SgdConfig;
  bool haveAssembler = !ptxasPath().empty();
  std::vector<std::vector<AdamParam>> groups;
  for (const char *dtype : {"f32", "f64", "f16", "bf16"})
    groups.push_back({{"3x37", dtype}, {"", dtype}, {"1031", dtype}});
  groups.push_back({{"5x7", "f32"}, {"33", "bf16"}, {"9", "f64"}});
  std::vector<SgdConfig> configs(4);
  configs[0].momentum = 0;
  configs[0].weightDecay = 0.1;
  configs[1].firstStep = true;
  configs[1].maximize = true;
  configs[2].nesterov = true;
  configs[2].weightDecay = 0.01;
  configs[3].dampening = 0.5;
  int assembled = 0;
  for (const auto &params : groups)
    for (const SgdConfig &c : configs) {
      std::string what = params[0].dtype + " group of " +
                         std::to_string(params.size()) + " momentum " +
                         std::to_string(c.momentum) +
                         (c.firstStep ? " first step" : "");
      CompileResult result =
          compileForGpu(sgdsources::fusedSgdSource(params, c));
      ASSERT_TRUE(result.ok) << what << ": " << result.error;
      wire::Program program = programOf(result);
      int calls = 0;
      for (const auto &inst : program.instructions())
        if (inst.op() == "fused_sgd") {
          ++calls;
          EXPECT_TRUE(rt::callsGeneratedKernel(inst)) << what;
        }
      ASSERT_EQ(calls, 1) << what;
      ASSERT_EQ(program.executables_size(), 1) << what;
      const wire::Executable &exe = program.executables(0);
      ASSERT_TRUE(exe.has_gpu()) << what;
      EXPECT_EQ(exe.num_scalars(), 3) << what;
      EXPECT_EQ(static_cast<size_t>(exe.outputs_size()),
                c.resultsPerParam() * params.size())
          << what;
      if (haveAssembler) {
        std::string error = assemble(exe.gpu().ptx(), kArch);
        EXPECT_EQ(error, "") << what;
        ++assembled;
      }
    }
  if (!haveAssembler)
    GTEST_SKIP() << "no ptxas (CUDA toolkit) under CUDA_HOME or "
                    "/usr/local/cuda: the PTX was generated, not assembled";
  std::printf("fused_sgd kernels assembled by ptxas for %s: %d\n", kArch,
              assembled);
}

} // namespace
