//===- FusedSgdCodegenTest.cpp - generated fused_sgd == hand-written ------===//
//
// dtensor.fused_sgd compiled twice from one program: calling the kernel the
// controller generates through MLIR for its signature
// (lib/Compiler/OptimizerKernelCodegen.cpp, SgdRule) and calling the
// runtime's hand-written kernel (runtime/lib/OptimizerKernels.cpp). Both
// run on the executor on the same random inputs (with signed zeros,
// infinities and NaNs among them) and must give the same bits, for float32,
// float64, float16 and bfloat16 and every mode: no momentum, momentum on
// the first step and later, dampening, Nesterov, weight decay, maximize;
// several parameter counts and sizes not divisible by the vector width, and
// parameters of different dtypes in one call. Both also equal a plain
// per-element reference of torch's rule. Any cut of the call into element
// ranges gives the whole call's bits; a changing lr, momentum, dampening
// or weight decay does not recompile; the validator refuses a call whose
// scalars do not match; donation pairs each result with its own input.
//
//===----------------------------------------------------------------------===//

#include "FusedSgdSources.h"
#include "OptimizerCodegenTestSupport.h"
#include "OptimizerKernelCodegen.h"
#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/ProgramValidator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace dtorch;
using namespace dtorch::optimizertest;
using sgdsources::SgdConfig;

namespace {

/// The inputs of `fusedSgdSource(params, c)`.
std::vector<rt::Tensor> randomInputs(const std::vector<AdamParam> &params,
                                     const SgdConfig &c, double lr,
                                     bool specials, std::mt19937 &rng) {
  std::vector<rt::Tensor> inputs = {scalarTensor(lr)};
  for (int k = 0; k < c.inputsPerParam(); ++k)
    for (const AdamParam &p : params)
      inputs.push_back(randomTensor(p, -2.0, 2.0, specials, rng));
  return inputs;
}

/// Compiles `params` with `c` both ways, runs both on the same inputs and
/// compares the bits; returns the generated outputs (and the inputs).
std::vector<rt::Tensor>
checkBothWays(const std::vector<AdamParam> &params, const SgdConfig &c,
              double lr, uint32_t seed, const std::string &what,
              std::vector<rt::Tensor> *inputsOut = nullptr) {
  std::mt19937 rng(seed);
  std::vector<rt::Tensor> inputs =
      randomInputs(params, c, lr, /*specials=*/true, rng);
  if (inputsOut)
    *inputsOut = inputs;
  return runBothWays(sgdsources::fusedSgdSource(params, c), "fused_sgd", inputs,
                     what)
      .generated;
}

std::vector<std::pair<std::string, SgdConfig>> modes() {
  std::vector<std::pair<std::string, SgdConfig>> out;
  SgdConfig plain;
  plain.momentum = 0;
  out.push_back({"plain", plain});
  SgdConfig decay = plain;
  decay.weightDecay = 0.1;
  decay.maximize = true;
  out.push_back({"plain-decay-maximize", decay});
  SgdConfig first;
  first.firstStep = true;
  out.push_back({"momentum-first-step", first});
  SgdConfig later;
  later.dampening = 0.25;
  later.weightDecay = 0.01;
  out.push_back({"momentum-dampening-decay", later});
  SgdConfig nesterov;
  nesterov.nesterov = true;
  nesterov.momentum = 0.7;
  out.push_back({"nesterov", nesterov});
  SgdConfig nesterovFirst = nesterov;
  nesterovFirst.firstStep = true;
  nesterovFirst.weightDecay = 0.05;
  nesterovFirst.maximize = true;
  out.push_back({"nesterov-first-step-decay-maximize", nesterovFirst});
  return out;
}

const char *const kFloatDtypes[] = {"f32", "f64", "f16", "bf16"};

TEST(GeneratedFusedSgd, EveryDtypeEveryModeMatchesTheHandWrittenKernel) {
  const std::vector<std::string> shapes = {"3x37", "",      "1",
                                           "17",   "2x3x5", "1031"};
  int cases = 0;
  uint32_t seed = 1;
  for (const char *dtype : kFloatDtypes)
    for (const auto &[name, mode] : modes())
      for (size_t count : {size_t(1), size_t(3), shapes.size()}) {
        std::vector<AdamParam> params;
        for (size_t i = 0; i < count; ++i)
          params.push_back({shapes[(i + count) % shapes.size()], dtype});
        checkBothWays(params, mode, /*lr=*/1e-2 * (1 + cases % 3), seed++,
                      std::string(dtype) + " " + name + " " +
                          std::to_string(count) + " parameter(s)");
        ++cases;
      }
  EXPECT_EQ(cases, 4 * 6 * 3);
}

TEST(GeneratedFusedSgd, ParametersOfDifferentDtypesInOneCall) {
  std::vector<AdamParam> params = {
      {"5x7", "f32"}, {"33", "bf16"}, {"9", "f64"}, {"2x21", "f16"}};
  uint32_t seed = 50;
  for (const auto &[name, mode] : modes())
    checkBothWays(params, mode, 3e-3, seed++, "mixed " + name);
}

/// torch's rule per element, in the parameter's own type (float32 and
/// float64), without contraction.
#pragma clang fp contract(off)
template <typename T>
void referenceStep(const SgdConfig &c, double lr, T p, T g, T buf, T &pOut,
                   T &bufOut) {
  T d = c.maximize ? -g : g;
  if (c.weightDecay != 0)
    d = d + p * static_cast<T>(c.weightDecay);
  if (c.hasMomentum()) {
    bufOut = c.firstStep ? d
                         : buf * static_cast<T>(c.momentum) +
                               d * static_cast<T>(1.0 - c.dampening);
    d = c.nesterov ? d + bufOut * static_cast<T>(c.momentum) : bufOut;
  }
  pOut = p - static_cast<T>(lr) * d;
}

template <typename T> void checkAgainstReference(const char *dtype) {
  std::vector<AdamParam> params = {{"7x3", dtype}, {"19", dtype}};
  uint32_t seed = 70;
  for (const auto &[name, mode] : modes()) {
    std::vector<rt::Tensor> inputs;
    double lr = 0.03;
    std::vector<rt::Tensor> out = checkBothWays(
        params, mode, lr, seed++, std::string("reference ") + name, &inputs);
    ASSERT_EQ(out.size(), mode.resultsPerParam() * params.size());
    size_t n = params.size();
    for (size_t i = 0; i < n; ++i) {
      const T *p = inputs[1 + i].data_as<T>();
      const T *g = inputs[1 + n + i].data_as<T>();
      const T *buf = mode.inputsPerParam() == 3
                         ? inputs[1 + 2 * n + i].data_as<T>()
                         : nullptr;
      for (int64_t j = 0; j < out[i].numel(); ++j) {
        T pWant = 0, bufWant = 0;
        referenceStep<T>(mode, lr, p[j], g[j], buf ? buf[j] : T(0), pWant,
                         bufWant);
        T pGot = out[i].data_as<T>()[j];
        if (!(std::isnan(pWant) && std::isnan(pGot)))
          ASSERT_EQ(std::memcmp(&pWant, &pGot, sizeof(T)), 0)
              << name << " param " << i << " element " << j << ": " << pGot
              << " != " << pWant;
        if (mode.hasMomentum()) {
          T bufGot = out[n + i].data_as<T>()[j];
          if (!(std::isnan(bufWant) && std::isnan(bufGot)))
            ASSERT_EQ(std::memcmp(&bufWant, &bufGot, sizeof(T)), 0)
                << name << " buffer " << i << " element " << j;
        }
      }
    }
  }
}

TEST(GeneratedFusedSgd, BothEqualTorchsRuleElementByElement) {
  checkAgainstReference<float>("f32");
  checkAgainstReference<double>("f64");
}

TEST(GeneratedFusedSgd, AnyCutGivesTheWholeCallsBits) {
  std::vector<AdamParam> params = cutTestParams();
  SgdConfig c;
  c.nesterov = true;
  c.weightDecay = 0.01;
  wire::Program program =
      compileOptimizer(sgdsources::fusedSgdSource(params, c), true);
  std::vector<double> scalars = scalarsOf(program, "fused_sgd");
  ASSERT_EQ(scalars.size(), 3u);
  EXPECT_EQ(scalars[0], 0.9);
  std::mt19937 rng(5);
  expectAnyCutGivesTheWholeCallsBits(
      program, randomInputs(params, c, 1e-2, true, rng),
      /*leadingScalars=*/1, /*outputsPerParam=*/2, scalars);
}

TEST(GeneratedFusedSgd, HyperParametersDoNotRecompile) {
  std::vector<AdamParam> params = {{"4x9", "f32"}, {"13", "f32"}};
  SgdConfig c;
  wire::Program first =
      compileOptimizer(sgdsources::fusedSgdSource(params, c), true);
  int64_t before = generatedSgdKernelCompiles();
  c.momentum = 0.5;
  c.dampening = 0.1;
  c.weightDecay = 0; // decay off is another kernel: keep it off
  wire::Program second =
      compileOptimizer(sgdsources::fusedSgdSource(params, c), true);
  EXPECT_EQ(generatedSgdKernelCompiles(), before);
  ASSERT_EQ(first.executables_size(), 1);
  ASSERT_EQ(second.executables_size(), 1);
  EXPECT_EQ(first.executables(0).content_hash(),
            second.executables(0).content_hash());
  // Another mode is another kernel.
  c.nesterov = true;
  c.dampening = 0;
  compileOptimizer(sgdsources::fusedSgdSource(params, c), true);
  EXPECT_EQ(generatedSgdKernelCompiles(), before + 1);
}

TEST(GeneratedFusedSgd, TheValidatorRefusesAMismatchedCall) {
  std::vector<AdamParam> params = {{"4x9", "f32"}, {"13", "f32"}};
  wire::Program program =
      compileOptimizer(sgdsources::fusedSgdSource(params, SgdConfig{}), true);
  int at = expectTheValidatorRefusesAScalarFewer(program, "fused_sgd");
  ASSERT_GE(at, 0);
  // A call whose inputs do not make whole groups (a buffer missing).
  wire::Program badCount = program;
  badCount.mutable_instructions(at)->mutable_inputs()->RemoveLast();
  EXPECT_THROW(rt::validateProgram(badCount, -1), rt::RuntimeError);
  // The hand-written kernel refuses a first step without a momentum.
  wire::Program hand =
      compileOptimizer(sgdsources::fusedSgdSource(params, SgdConfig{}), false);
  for (auto &inst : *hand.mutable_instructions())
    if (inst.op() == "fused_sgd") {
      (*inst.mutable_attrs())["momentum"].set_f(0);
      (*inst.mutable_attrs())["first_step"].set_i(1);
    }
  EXPECT_THROW(rt::validateProgram(hand, -1), rt::RuntimeError);
}

TEST(GeneratedFusedSgd, DonationPairsEachResultWithTheInputItReplaces) {
  // Each result written over the input it replaces (the executor donates
  // the inputs the program's output_donors name when the caller passes
  // them as its sole holder).
  std::vector<AdamParam> params = {{"6x5", "f32"}, {"7", "f32"}};
  for (bool firstStep : {false, true}) {
    SgdConfig c;
    c.firstStep = firstStep;
    c.weightDecay = 0.02;
    std::string source = sgdsources::fusedSgdSource(params, c);
    CompileOptions options;
    options.fuseElementwise = true;
    CompileResult result = compileModule(source, "sgd.mlir", options);
    ASSERT_TRUE(result.ok) << result.error;
    wire::Program program = emitted::programsByPosition(result.functions[0])[0];
    ASSERT_EQ(program.output_donors_size(), 4) << firstStep;
    // Results p0, p1, buf0, buf1 take p0, p1 and the buffers (or, on the
    // first step, the gradients): inputs 1, 2, then 5, 6 or 3, 4.
    std::vector<int> want = {1, 2, firstStep ? 3 : 5, firstStep ? 4 : 6};
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(program.output_donors(k), want[k]) << firstStep << " " << k;
    EXPECT_NO_THROW(rt::validateProgram(program, -1));
  }
}

} // namespace
