//===- FusedAdamCodegenTest.cpp - generated fused_adam == hand-written ----===//
//
// dtensor.fused_adam compiled twice from one program: calling the kernel the
// controller generates through MLIR for its signature
// (lib/Compiler/OptimizerKernelCodegen.cpp) and calling the runtime's
// hand-written kernel (runtime/lib/OptimizerKernels.cpp). Both run on the
// executor on the same random inputs (with signed zeros, infinities and
// NaNs among them) and must give the same bits, for float32, float64,
// float16 and bfloat16, every mode (AdamW, Adam with L2 decay, no decay,
// amsgrad, maximize, beta1 on both sides of lerp's switch), several
// parameter counts and sizes not divisible by the vector width, and
// parameters of different dtypes in one call. Any cut of the call into
// element ranges gives the whole call's bits; a changing lr, step or beta
// does not recompile; the validator refuses a call whose scalars do not
// match.
//
//===----------------------------------------------------------------------===//

#include "FusedAdamSources.h"
#include "OptimizerCodegenTestSupport.h"
#include "OptimizerKernelCodegen.h"
#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/ProgramValidator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace dtorch;
using adamsources::AdamConfig;
using adamsources::AdamParam;
using namespace optimizertest;

namespace {

/// The inputs of `fusedAdamSource(params, c)`.
std::vector<rt::Tensor> randomInputs(const std::vector<AdamParam> &params,
                                     const AdamConfig &c, double step,
                                     double lr, bool specials,
                                     std::mt19937 &rng) {
  std::vector<rt::Tensor> inputs = {scalarTensor(step), scalarTensor(lr)};
  int perParam = c.amsgrad ? 5 : 4;
  for (int k = 0; k < perParam; ++k)
    for (const AdamParam &p : params)
      // Second moments and their maxima are non-negative.
      inputs.push_back(
          randomTensor(p, k >= 3 ? 0.0 : -2.0, 2.0, specials && k < 3, rng));
  return inputs;
}

/// Compiles `params` with `c` both ways, runs both on the same inputs and
/// compares the bits; returns the number of elements compared.
int64_t checkBothWays(const std::vector<AdamParam> &params, const AdamConfig &c,
                      double step, double lr, uint32_t seed,
                      const std::string &what) {
  std::mt19937 rng(seed);
  return runBothWays(adamsources::fusedAdamSource(params, c), "fused_adam",
                     randomInputs(params, c, step, lr, /*specials=*/true, rng),
                     what)
      .compared;
}

const char *const kFloatDtypes[] = {"f32", "f64", "f16", "bf16"};

struct ModeCase {
  const char *name;
  AdamConfig config;
};

std::vector<ModeCase> modes() {
  std::vector<ModeCase> out;
  out.push_back({"adamw", AdamConfig{}});
  AdamConfig l2;
  l2.decoupled = false;
  l2.weightDecay = 0.1;
  out.push_back({"adam-l2", l2});
  AdamConfig none;
  none.weightDecay = 0;
  out.push_back({"no-decay", none});
  AdamConfig ams;
  ams.amsgrad = true;
  out.push_back({"amsgrad", ams});
  AdamConfig max;
  max.maximize = true;
  max.decoupled = false;
  out.push_back({"maximize-l2", max});
  AdamConfig lerp; // 1 - beta1 >= 0.5: lerp from the end
  lerp.beta1 = 0.3;
  lerp.beta2 = 0.9;
  lerp.eps = 1e-3;
  out.push_back({"small-beta1", lerp});
  return out;
}

TEST(GeneratedFusedAdam, EveryDtypeEveryModeMatchesTheHandWrittenKernel) {
  // Sizes around vector widths (16 float32 lanes of AVX-512): tails, a 0-d
  // parameter, one element, and a larger one.
  const std::vector<std::string> shapes = {"3x37", "",      "1",
                                           "17",   "2x3x5", "1031"};
  int64_t compared = 0;
  int cases = 0;
  uint32_t seed = 1;
  for (const char *dtype : kFloatDtypes)
    for (const ModeCase &mode : modes())
      for (size_t count : {size_t(1), size_t(3), shapes.size()}) {
        std::vector<AdamParam> params;
        for (size_t i = 0; i < count; ++i)
          params.push_back({shapes[(i + count) % shapes.size()], dtype});
        compared += checkBothWays(params, mode.config, /*step=*/3 + cases % 5,
                                  /*lr=*/1e-2, seed++,
                                  std::string(dtype) + " " + mode.name + " " +
                                      std::to_string(count) + " parameter(s)");
        ++cases;
      }
  EXPECT_EQ(cases, 4 * 6 * 3);
  std::printf("generated fused_adam == hand-written: %d cases, %lld elements\n",
              cases, static_cast<long long>(compared));
}

TEST(GeneratedFusedAdam, ParametersOfDifferentDtypesInOneCall) {
  std::vector<AdamParam> params = {
      {"5x7", "f32"}, {"33", "bf16"}, {"9", "f64"}, {"2x21", "f16"}};
  for (const ModeCase &mode : modes())
    checkBothWays(params, mode.config, 7, 3e-3, 99,
                  std::string("mixed ") + mode.name);
}

TEST(GeneratedFusedAdam, ParametersOfOtherShapesWithAsManyElementsShareIt) {
  // The kernel depends on element counts, not shapes: the second program
  // reuses the first one's code and declares its own shapes (the validator
  // checks them when it runs), and an empty parameter of either shape too.
  AdamConfig c;
  c.weightDecay = 0.125;
  checkBothWays({{"2x3", "f32"}, {"6x0", "f32"}, {"7", "f32"}}, c, 2, 1e-2, 4,
                "2x3, 6x0");
  int64_t before = generatedAdamKernelCompiles();
  checkBothWays({{"3x2", "f32"}, {"0x5", "f32"}, {"7", "f32"}}, c, 2, 1e-2, 5,
                "3x2, 0x5");
  EXPECT_EQ(generatedAdamKernelCompiles(), before);
}

TEST(GeneratedFusedAdam, AnyCutGivesTheWholeCallsBits) {
  std::vector<AdamParam> params = cutTestParams();
  AdamConfig c;
  c.amsgrad = true;
  wire::Program program =
      compileOptimizer(adamsources::fusedAdamSource(params, c), true);
  std::vector<double> scalars = scalarsOf(program, "fused_adam");
  ASSERT_EQ(scalars.size(), 4u);
  std::mt19937 rng(5);
  expectAnyCutGivesTheWholeCallsBits(
      program, randomInputs(params, c, 4, 1e-2, true, rng),
      /*leadingScalars=*/2, /*outputsPerParam=*/4, scalars);
}

TEST(GeneratedFusedAdam, HyperParametersDoNotRecompile) {
  std::vector<AdamParam> params = {{"4x9", "f32"}, {"13", "f32"}};
  AdamConfig c;
  wire::Program first =
      compileOptimizer(adamsources::fusedAdamSource(params, c), true);
  int64_t before = generatedAdamKernelCompiles();
  c.beta1 = 0.8;
  c.beta2 = 0.99;
  c.eps = 1e-6;
  c.weightDecay = 0.2;
  wire::Program second =
      compileOptimizer(adamsources::fusedAdamSource(params, c), true);
  EXPECT_EQ(generatedAdamKernelCompiles(), before);
  ASSERT_EQ(first.executables_size(), 1);
  ASSERT_EQ(second.executables_size(), 1);
  EXPECT_EQ(first.executables(0).content_hash(),
            second.executables(0).content_hash());
  // Another mode is another kernel.
  c.amsgrad = true;
  compileOptimizer(adamsources::fusedAdamSource(params, c), true);
  EXPECT_EQ(generatedAdamKernelCompiles(), before + 1);
}

TEST(GeneratedFusedAdam, TheValidatorRefusesAMismatchedCall) {
  std::vector<AdamParam> params = {{"4x9", "f32"}, {"13", "f32"}};
  wire::Program program = compileOptimizer(
      adamsources::fusedAdamSource(params, AdamConfig{}), true);
  int at = expectTheValidatorRefusesAScalarFewer(program, "fused_adam");
  ASSERT_GE(at, 0);
  wire::Program badIndex = program;
  badIndex.mutable_instructions(at)->set_executable(3);
  EXPECT_THROW(rt::validateProgram(badIndex, -1), rt::RuntimeError);
}

TEST(GeneratedFusedAdam, TurnedOffByTheEnvironment) {
  setenv("DTORCH_GENERATED_ADAM", "0", 1);
  EXPECT_FALSE(generatedAdamEnabledByEnvironment());
  EXPECT_FALSE(CompileOptions{}.generateOptimizerKernels);
  EXPECT_NE(compilerConfiguration().find("generated_adam=0"),
            std::string::npos);
  unsetenv("DTORCH_GENERATED_ADAM");
  EXPECT_TRUE(CompileOptions{}.generateOptimizerKernels);
}

/// Not a check: the compile cost of one signature and the call time, for
/// bench/results (printed).
TEST(GeneratedFusedAdam, CompileCostAndCallTime) {
  // The parameters of a GPT like examples/gpt's (d_model 64, 2 blocks with
  // q, k, v and the projection as 192x64 and 64x64, MLP 256, vocabulary 65),
  // plus one of a size drawn per run, so that the signature is new.
  std::vector<AdamParam> params;
  for (const char *shape :
       {"65x64",  "32x64", "64",     "64",  "192x64", "192", "64x64",  "64",
        "64",     "64",    "256x64", "256", "64x256", "64",  "64",     "64",
        "192x64", "192",   "64x64",  "64",  "64",     "64",  "256x64", "256",
        "64x256", "64",    "64",     "64",  "65x64",  "65"})
    params.push_back({shape, "f32"});
  params.push_back({std::to_string(1 + std::random_device{}() % 997), "f32"});
  int64_t elements = 0;
  for (const AdamParam &p : params) {
    int64_t n = 1;
    for (int64_t e : shapeOf(p.shape))
      n *= e;
    elements += n;
  }
  AdamConfig c;
  std::string source = adamsources::fusedAdamSource(params, c);
  auto cpuMs = [] { return 1e3 * std::clock() / CLOCKS_PER_SEC; };
  double c0 = cpuMs();
  auto t0 = std::chrono::steady_clock::now();
  wire::Program generated = compileOptimizer(source, true);
  double wallGenerated = std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - t0)
                             .count();
  double c1 = cpuMs();
  wire::Program handWritten = compileOptimizer(source, false);
  double c2 = cpuMs();
  std::mt19937 rng(3);
  std::vector<rt::Tensor> inputs = randomInputs(params, c, 5, 1e-3, false, rng);
  rt::Executor executor(nullptr);
  auto best = [&](const wire::Program &p) {
    double bestMs = 1e30;
    for (int r = 0; r < 30; ++r) {
      auto s = std::chrono::steady_clock::now();
      executor.run(p, inputs);
      bestMs = std::min(bestMs, std::chrono::duration<double, std::milli>(
                                    std::chrono::steady_clock::now() - s)
                                    .count());
    }
    return bestMs;
  };
  double gen = 1e30, hand = 1e30;
  for (int round = 0; round < 3; ++round) { // interleaved
    gen = std::min(gen, best(generated));
    hand = std::min(hand, best(handWritten));
  }
  std::printf(
      "fused_adam, %zu float32 parameters (%lld elements): compile of the "
      "program with the generated kernel %.1f ms CPU (%.1f ms wall), "
      "without %.1f ms CPU; one run, best of 90 (interleaved): generated "
      "%.3f ms, hand-written %.3f ms\n",
      params.size(), static_cast<long long>(elements), c1 - c0, wallGenerated,
      c2 - c1, gen, hand);
}

} // namespace
