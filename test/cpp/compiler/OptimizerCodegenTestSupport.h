// Helpers of the tests of the generated multi-tensor optimizer kernels
// (FusedAdamCodegenTest.cpp, FusedSgdCodegenTest.cpp): random inputs with
// special values, compiling one optimizer program both ways and running
// both, bitwise comparison of outputs, calling a kernel cut into element
// ranges, and the validator's check of a call's scalars.
#pragma once

#include "FloatBits.h"
#include "FusedAdamSources.h"
#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/Tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace dtorch::optimizertest {

using adamsources::AdamParam;

inline wire::DType wireOf(const std::string &dtype) {
  if (dtype == "f32")
    return wire::F32;
  if (dtype == "f64")
    return wire::F64;
  if (dtype == "f16")
    return wire::F16;
  return wire::BF16;
}

inline std::vector<int64_t> shapeOf(const std::string &shape) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at < shape.size()) {
    size_t x = shape.find('x', at);
    if (x == std::string::npos)
      x = shape.size();
    out.push_back(std::stoll(shape.substr(at, x - at)));
    at = x + 1;
  }
  return out;
}

inline rt::Tensor scalarTensor(double v) {
  wire::TensorSpec spec;
  spec.set_dtype(wire::F64);
  rt::Tensor t = rt::Tensor::emptyLike(spec);
  *t.data_as<double>() = v;
  return t;
}

/// Random values in [lo, hi]; with `specials`, one element in 16 is a signed
/// zero, an infinity or a NaN.
inline rt::Tensor randomTensor(const AdamParam &p, double lo, double hi,
                               bool specials, std::mt19937 &rng) {
  wire::TensorSpec spec;
  spec.set_dtype(wireOf(p.dtype));
  for (int64_t e : shapeOf(p.shape))
    spec.add_shape(e);
  rt::Tensor t = rt::Tensor::emptyLike(spec);
  std::uniform_real_distribution<double> u(lo, hi);
  const double kSpecials[] = {0.0, -0.0,
                              std::numeric_limits<double>::infinity(),
                              std::numeric_limits<double>::quiet_NaN()};
  size_t width = t.nbytes() / std::max<int64_t>(1, t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = u(rng);
    if (specials && rng() % 16 == 0)
      v = kSpecials[rng() % 4];
    uint64_t bits = testsupport::floatBitsOf(v, t.dtype());
    std::memcpy(static_cast<char *>(t.data()) + i * width, &bits, width);
  }
  return t;
}

/// `source` (one class function on a one-rank mesh) compiled with the
/// optimizer kernels generated or hand-written.
inline wire::Program compileOptimizer(const std::string &source, bool generated,
                                      const std::string &cudaArch = "") {
  CompileOptions options;
  options.fuseElementwise = true;
  options.generateOptimizerKernels = generated;
  options.cudaArch = cudaArch;
  CompileResult result = compileModule(source, "optimizer.mlir", options);
  EXPECT_TRUE(result.ok) << result.error.substr(0, 600);
  if (!result.ok)
    return {};
  return emitted::programsByPosition(result.functions[0])[0];
}

/// The index of the program's first instruction of `op`, or -1.
inline int instructionIndexOf(const wire::Program &program,
                              const std::string &op) {
  for (int i = 0; i < program.instructions_size(); ++i)
    if (program.instructions(i).op() == op)
      return i;
  return -1;
}

/// The program's first instruction of `op`, or null.
inline const wire::Instruction *instructionOf(const wire::Program &program,
                                              const std::string &op) {
  int at = instructionIndexOf(program, op);
  return at < 0 ? nullptr : &program.instructions(at);
}

/// The `scalars` attribute of the program's first instruction of `op`
/// (empty when there is none).
inline std::vector<double> scalarsOf(const wire::Program &program,
                                     const std::string &op) {
  const wire::Instruction *inst = instructionOf(program, op);
  if (!inst || !inst->attrs().count("scalars"))
    return {};
  const std::string &bytes = inst->attrs().at("scalars").data();
  std::vector<double> scalars(bytes.size() / sizeof(double));
  std::memcpy(scalars.data(), bytes.data(), bytes.size());
  return scalars;
}

inline uint64_t rawAt(const rt::Tensor &t, int64_t i) {
  uint64_t u = 0;
  size_t width = t.nbytes() / std::max<int64_t>(1, t.numel());
  std::memcpy(&u, static_cast<const char *>(t.data()) + i * width, width);
  return u;
}

inline bool isNaNAt(const rt::Tensor &t, int64_t i) {
  switch (t.dtype()) {
  case wire::F32:
    return std::isnan(t.data_as<float>()[i]);
  case wire::F64:
    return std::isnan(t.data_as<double>()[i]);
  case wire::F16:
    return std::isnan(static_cast<float>(t.data_as<rt::Half>()[i]));
  default:
    return std::isnan(static_cast<float>(t.data_as<rt::BFloat16>()[i]));
  }
}

/// Every output equal bit for bit (a NaN a NaN on both sides); returns the
/// number of elements compared.
inline int64_t expectSameBits(const std::vector<rt::Tensor> &a,
                              const std::vector<rt::Tensor> &b,
                              const std::string &what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  int64_t compared = 0;
  for (size_t o = 0; o < a.size() && o < b.size(); ++o) {
    EXPECT_EQ(a[o].dtype(), b[o].dtype()) << what;
    EXPECT_EQ(a[o].numel(), b[o].numel()) << what;
    int bad = 0;
    for (int64_t i = 0; i < a[o].numel() && bad < 3; ++i, ++compared) {
      if (isNaNAt(a[o], i) && isNaNAt(b[o], i))
        continue;
      if (rawAt(a[o], i) != rawAt(b[o], i)) {
        ++bad;
        ADD_FAILURE() << what << ": output " << o << " element " << i
                      << ": generated bits " << std::hex << rawAt(a[o], i)
                      << ", hand-written " << rawAt(b[o], i) << std::dec;
      }
    }
  }
  return compared;
}

/// What `runBothWays` found.
struct BothWays {
  std::vector<rt::Tensor> generated; // the outputs with the generated kernel
  int64_t compared = 0;              // elements compared
};

/// `source` compiled with the kernel of the multi-tensor optimizer op `op`
/// generated (one executable) and hand-written (none); both programs run on
/// the executor on `inputs` and must give the same bits.
inline BothWays runBothWays(const std::string &source, const std::string &op,
                            const std::vector<rt::Tensor> &inputs,
                            const std::string &what) {
  wire::Program generated = compileOptimizer(source, true);
  wire::Program handWritten = compileOptimizer(source, false);
  const wire::Instruction *gen = instructionOf(generated, op);
  const wire::Instruction *hand = instructionOf(handWritten, op);
  EXPECT_TRUE(gen && hand) << what;
  if (!gen || !hand)
    return {};
  EXPECT_TRUE(rt::callsGeneratedKernel(*gen)) << what;
  EXPECT_FALSE(rt::callsGeneratedKernel(*hand)) << what;
  EXPECT_EQ(generated.executables_size(), 1) << what;
  EXPECT_EQ(handWritten.executables_size(), 0) << what;
  rt::Executor executor(nullptr);
  BothWays out;
  out.generated = executor.run(generated, inputs);
  std::vector<rt::Tensor> b = executor.run(handWritten, inputs);
  out.compared = expectSameBits(out.generated, b, what);
  return out;
}

/// The parameters of `expectAnyCutGivesTheWholeCallsBits`: element ranges
/// [0, 111), [111, 116), [116, 117) (a 0-d one) and [117, 1148).
inline std::vector<AdamParam> cutTestParams() {
  return {{"3x37", "f32"}, {"5", "f32"}, {"", "f32"}, {"1031", "f32"}};
}

/// Calls the generated kernel of `program` (its only executable) directly
/// on `inputs`, whole and cut into element ranges inside parameters, on
/// their boundaries and past the end: every cut gives the whole call's
/// bits, and a range writes only its elements. The parameters are
/// `cutTestParams()`; `inputs` start with `leadingScalars` scalar tensors,
/// then the parameters; the call writes `outputsPerParam` outputs per
/// parameter, each like its parameter; `scalars` are the call's.
inline void expectAnyCutGivesTheWholeCallsBits(
    const wire::Program &program, const std::vector<rt::Tensor> &inputs,
    size_t leadingScalars, size_t outputsPerParam,
    const std::vector<double> &scalars) {
  size_t numParams = cutTestParams().size();
  ASSERT_EQ(program.executables_size(), 1);
  rt::GeneratedKernelFn whole = rt::loadExecutable(program.executables(0));
  rt::GeneratedRowsKernelFn rows =
      rt::loadExecutableRows(program.executables(0));
  ASSERT_NE(rows, nullptr) << "the kernel has no range entry";
  int64_t total = 3 * 37 + 5 + 1 + 1031;
  auto outputsLike = [&] {
    std::vector<rt::Tensor> outs;
    for (size_t k = 0; k < outputsPerParam; ++k)
      for (size_t i = 0; i < numParams; ++i) {
        const rt::Tensor &like = inputs[leadingScalars + i];
        outs.push_back(rt::Tensor::empty(like.dtype(), like.shape()));
        std::memset(outs.back().data(), 0, outs.back().nbytes());
      }
    return outs;
  };
  auto pointers = [](auto &tensors) {
    std::vector<void *> out;
    for (auto &t : tensors)
      out.push_back(const_cast<void *>(static_cast<const void *>(t.data())));
    return out;
  };
  std::vector<void *> in = pointers(inputs);
  std::vector<rt::Tensor> expected = outputsLike();
  std::vector<void *> expectedOut = pointers(expected);
  whole(in.data(), expectedOut.data(), scalars.data());
  for (std::vector<int64_t> cuts : {std::vector<int64_t>{0, total},
                                    {0, 1, total},
                                    {0, 111, 116, total},
                                    {0, 50, 117, 600, total},
                                    {0, 7, 8, 9, 1000, total}}) {
    std::vector<rt::Tensor> got = outputsLike();
    std::vector<void *> out = pointers(got);
    for (size_t k = 0; k + 1 < cuts.size(); ++k)
      rows(in.data(), out.data(), scalars.data(), cuts[k], cuts[k + 1]);
    expectSameBits(got, expected, "cuts");
  }
  // A range writes only its elements.
  std::vector<rt::Tensor> part = outputsLike();
  std::vector<void *> partOut = pointers(part);
  rows(in.data(), partOut.data(), scalars.data(), 111,
       116); // parameter 1
  for (size_t o = 0; o < part.size(); ++o)
    for (int64_t i = 0; i < part[o].numel(); ++i)
      if (o % numParams != 1)
        ASSERT_EQ(rawAt(part[o], i), 0u) << "output " << o << " element " << i;
}

/// Expects the validator to accept `program` and to refuse it once its
/// call of `op` has one scalar fewer than the kernel takes; returns the
/// call's index (-1 when there is none).
inline int expectTheValidatorRefusesAScalarFewer(const wire::Program &program,
                                                 const std::string &op) {
  EXPECT_NO_THROW(rt::validateProgram(program, -1));
  int at = instructionIndexOf(program, op);
  EXPECT_GE(at, 0) << "no " << op;
  if (at < 0)
    return at;
  size_t count = scalarsOf(program, op).size();
  EXPECT_GT(count, 0u);
  wire::Program badScalars = program;
  (*badScalars.mutable_instructions(at)->mutable_attrs())["scalars"].set_data(
      std::string((count - 1) * sizeof(double), '\0'));
  EXPECT_THROW(rt::validateProgram(badScalars, -1), rt::RuntimeError);
  return at;
}

} // namespace dtorch::optimizertest
