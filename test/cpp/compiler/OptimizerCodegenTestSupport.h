// Helpers of the tests of the generated multi-tensor optimizer kernels
// (FusedAdamCodegenTest.cpp, FusedSgdCodegenTest.cpp): random inputs with
// special values, compiling one optimizer program both ways, and bitwise
// comparison of outputs.
#pragma once

#include "FloatBits.h"
#include "FusedAdamSources.h"
#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Half.h"
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

/// The program's first instruction of `op`, or null.
inline const wire::Instruction *instructionOf(const wire::Program &program,
                                              const std::string &op) {
  for (const auto &inst : program.instructions())
    if (inst.op() == op)
      return &inst;
  return nullptr;
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

} // namespace dtorch::optimizertest
