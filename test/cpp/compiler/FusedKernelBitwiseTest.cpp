//===- FusedKernelBitwiseTest.cpp - generated == hand-written, bit for bit ===//
//
// A segment runs with the runtime's hand-written kernels on its first run
// and with generated (fused) kernels from its second, so the two must give
// the same bits, or a result would depend on the fusion tier. Every float
// kernel the fusion pass may fuse (rank/IR/FusibleKernels.h), for float32,
// float64, float16 and bfloat16, runs both ways on the same inputs: random
// values in several ranges, a spread of bit patterns over the whole format
// (every bit pattern of the 16-bit formats), and the specials (+-0, +-inf,
// NaN, denormals, the largest and smallest magnitudes, the thresholds of
// the float32 approximations). Results must be equal bit for bit; a NaN
// must be a NaN on both sides (its sign and payload are not specified).
//
// DTORCH_EXHAUSTIVE_FLOAT32=1 adds a run over all 2^32 float32 inputs of the
// transcendental kernels (about 11 minutes for the 8 kernels on 2 busy cores;
// skipped otherwise).
//
//===----------------------------------------------------------------------===//

#include "FloatBits.h"
#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/Half.h"
#include "rank/IR/FusibleKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace dtorch;

namespace {

struct FloatFormat {
  const char *mlir;
  wire::DType wire;
  int bits; // storage width
};

const FloatFormat kFormats[] = {
    {"f32", wire::F32, 32},
    {"f64", wire::F64, 64},
    {"f16", wire::F16, 16},
    {"bf16", wire::BF16, 16},
};

/// Bit patterns of `value` in a format.
uint64_t bitsOf(double value, const FloatFormat &f) {
  return ::dtorch::testsupport::floatBitsOf(value, f.wire);
}

/// Element i of a float tensor as a double (for messages and NaN checks).
double valueAt(const rt::Tensor &t, int64_t i) {
  switch (t.dtype()) {
  case wire::F32:
    return t.data_as<float>()[i];
  case wire::F64:
    return t.data_as<double>()[i];
  case wire::F16:
    return static_cast<float>(t.data_as<rt::Half>()[i]);
  default:
    return static_cast<float>(t.data_as<rt::BFloat16>()[i]);
  }
}

uint64_t rawAt(const rt::Tensor &t, int64_t i) {
  uint64_t u = 0;
  size_t width = t.nbytes() / std::max<int64_t>(1, t.numel());
  std::memcpy(&u, static_cast<const char *>(t.data()) + i * width, width);
  return u;
}

rt::Tensor tensorOfBits(const std::vector<uint64_t> &bits, const FloatFormat &f,
                        std::vector<int64_t> shape = {}) {
  wire::TensorSpec spec;
  spec.set_dtype(f.wire);
  if (shape.empty())
    shape = {static_cast<int64_t>(bits.size())};
  for (int64_t e : shape)
    spec.add_shape(e);
  rt::Tensor t = rt::Tensor::emptyLike(spec);
  size_t width = f.bits / 8;
  for (size_t i = 0; i < bits.size(); ++i)
    std::memcpy(static_cast<char *>(t.data()) + i * width, &bits[i], width);
  return t;
}

/// Values every kernel is tried on: signed zeros, infinities, NaNs, the
/// extremes of the format, denormals, and the points where the float32
/// approximations switch branches or clamp.
std::vector<double> specialValues() {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> v = {0.0,
                           -0.0,
                           inf,
                           -inf,
                           std::numeric_limits<double>::quiet_NaN(),
                           -std::numeric_limits<double>::quiet_NaN(),
                           1.0,
                           -1.0,
                           0.5,
                           2.0,
                           -2.0,
                           3.0,
                           0.25,
                           M_PI,
                           std::numeric_limits<float>::max(),
                           -std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::min(),
                           -std::numeric_limits<float>::min(),
                           std::numeric_limits<float>::denorm_min(),
                           -std::numeric_limits<float>::denorm_min(),
                           1e-40,
                           -1e-40,
                           65504.0,
                           6.1e-5,
                           6e-8,
                           std::numeric_limits<double>::max(),
                           std::numeric_limits<double>::min(),
                           std::numeric_limits<double>::denorm_min(),
                           -std::numeric_limits<double>::denorm_min(),
                           1e300,
                           -1e300,
                           1e-300};
  // Thresholds of exp (clamps at -87.8 and 88.8, overflow near 88.72),
  // tanh (0.0004, 7.99881172), erf (0.8, 2, 3.75; the piecewise one's 1
  // and saturation point, as gelu's inputs: times sqrt(2)), log
  // (1/sqrt(2)).
  for (double t :
       {87.8, 88.8, 88.72283935546875, 88.7228, 103.97, 0.0004, 7.99881172, 0.8,
        3.75, 0.707106769, 9.0, 20.0, 50.0, M_SQRT2, M_SQRT2 * 3.92})
    for (double s : {1.0, -1.0})
      for (double d : {0.0, 1e-7, -1e-7, 1e-3, -1e-3})
        v.push_back(s * t * (1 + d));
  return v;
}

/// The inputs of a unary kernel in format `f`.
std::vector<uint64_t> unaryInputs(const FloatFormat &f, std::mt19937_64 &rng) {
  std::vector<uint64_t> bits;
  for (double v : specialValues())
    bits.push_back(bitsOf(v, f));
  if (f.bits == 16) { // every bit pattern
    for (uint64_t u = 0; u < 65536; ++u)
      bits.push_back(u);
    return bits;
  }
  // Uniform in ranges.
  for (double range : {1.0, 4.0, 10.0, 30.0, 100.0, 1000.0, 1e5}) {
    std::uniform_real_distribution<double> u(-range, range);
    for (int i = 0; i < 6000; ++i)
      bits.push_back(bitsOf(u(rng), f));
  }
  // Log-uniform magnitudes over the format's whole range, both signs.
  double maxExp = f.bits == 32 ? 38.5 : 308.0;
  double minExp = f.bits == 32 ? -45.0 : -323.0;
  std::uniform_real_distribution<double> e(minExp, maxExp);
  for (int i = 0; i < 20000; ++i)
    bits.push_back(bitsOf((i % 2 ? -1 : 1) * std::pow(10.0, e(rng)), f));
  // An even spread over all bit patterns.
  if (f.bits == 32) {
    for (uint64_t i = 0; i < 65536; ++i)
      bits.push_back((i * 65537u + 12345u) & 0xffffffffu);
  } else {
    for (uint64_t i = 0; i < 65536; ++i)
      bits.push_back(rng());
  }
  return bits;
}

/// Operand pairs of a binary kernel: each unary input against a shuffled
/// copy, then every pair of specials.
std::pair<std::vector<uint64_t>, std::vector<uint64_t>>
binaryInputs(const FloatFormat &f, std::mt19937_64 &rng) {
  std::vector<uint64_t> a = unaryInputs(f, rng);
  std::vector<uint64_t> b = a;
  std::shuffle(b.begin(), b.end(), rng);
  std::vector<double> specials = specialValues();
  for (double x : specials)
    for (double y : specials) {
      a.push_back(bitsOf(x, f));
      b.push_back(bitsOf(y, f));
    }
  return {a, b};
}

std::string tensorType(size_t n, const char *dtype) {
  return "!dtensor.tensor<" + std::to_string(n) + "x" + dtype + ", #m, [R]>";
}

/// The kernel and a constant (a group of two ops, so the fusion pass makes a
/// generated kernel of it).
std::string oneKernelSource(const std::string &kernel, unsigned operands,
                            size_t n, const char *dtype) {
  std::string t = tensorType(n, dtype);
  std::string args = operands == 2 ? "%a, %b" : "%a";
  std::string argTypes = operands == 2 ? t + ", " + t : t;
  return "#m = #dtensor.mesh<[1]>\nfunc.func @f(%a: " + t + ", %b: " + t +
         ") -> (" + t + ", " + t + ") {\n  %r = dtensor." + kernel + " " +
         args + " : (" + argTypes + ") -> " + t + "\n  %c = dtensor.full " +
         "1.0 : " + t + "\n  return %r, %c : " + t + ", " + t + "\n}\n";
}

std::vector<rt::Tensor> compileAndRun(const std::string &source, bool fuse,
                                      const std::vector<rt::Tensor> &inputs,
                                      int *fusedCalls) {
  CompileOptions options;
  options.fuseElementwise = fuse;
  CompileResult result = compileModule(source, "bitwise.mlir", options);
  EXPECT_TRUE(result.ok) << result.error;
  if (!result.ok)
    return {};
  wire::Program program = emitted::programsByPosition(result.functions[0])[0];
  *fusedCalls = 0;
  for (const auto &inst : program.instructions())
    *fusedCalls += inst.op() == "fused";
  rt::Executor executor(nullptr);
  return executor.run(program, inputs);
}

struct Mismatches {
  int64_t count = 0;
  int64_t total = 0;
  std::string examples;
};

std::string hex(uint64_t bits, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*" PRIx64, width / 4, bits);
  return buf;
}

/// Elements where `fused` and `plain` differ in a bit (both NaN counts as
/// equal), with up to five examples naming the operands.
Mismatches compareBitwise(const rt::Tensor &fused, const rt::Tensor &plain,
                          const std::vector<rt::Tensor> &inputs,
                          const FloatFormat &f) {
  Mismatches m;
  m.total = plain.numel();
  for (int64_t i = 0; i < plain.numel(); ++i) {
    uint64_t a = rawAt(fused, i), b = rawAt(plain, i);
    if (a == b ||
        (std::isnan(valueAt(fused, i)) && std::isnan(valueAt(plain, i))))
      continue;
    if (++m.count <= 5) {
      m.examples += "\n    in";
      for (const rt::Tensor &in : inputs) {
        char value[64];
        std::snprintf(value, sizeof value, " %.9g", valueAt(in, i));
        m.examples += " " + hex(rawAt(in, i), f.bits) + value;
      }
      char values[96];
      std::snprintf(values, sizeof values, " (%.17g vs %.17g)",
                    valueAt(fused, i), valueAt(plain, i));
      m.examples += ": generated " + hex(a, f.bits) + ", hand-written " +
                    hex(b, f.bits) + values;
    }
  }
  return m;
}

TEST(FusedKernelsBitwise, EveryFloatKernelEveryFloatDtype) {
  std::mt19937_64 rng(2026);
  int cases = 0;
  std::string summary;
  for (const rank::FusibleKernel &k : rank::fusibleKernels()) {
    if (k.kind != rank::FusibleKind::Elementwise ||
        !(k.types & rank::kFloatTypes))
      continue;
    for (const FloatFormat &f : kFormats) {
      std::vector<rt::Tensor> inputs;
      if (k.numOperands == 2) {
        auto [a, b] = binaryInputs(f, rng);
        inputs = {tensorOfBits(a, f), tensorOfBits(b, f)};
      } else {
        std::vector<uint64_t> a = unaryInputs(f, rng);
        inputs = {tensorOfBits(a, f), tensorOfBits(a, f)};
      }
      size_t n = static_cast<size_t>(inputs[0].numel());
      std::string source =
          oneKernelSource(std::string(k.name), k.numOperands, n, f.mlir);
      int fusedCalls = 0, plainCalls = 0;
      std::vector<rt::Tensor> fused =
          compileAndRun(source, true, inputs, &fusedCalls);
      std::vector<rt::Tensor> plain =
          compileAndRun(source, false, inputs, &plainCalls);
      std::string what = std::string(k.name) + " " + f.mlir;
      ASSERT_EQ(fusedCalls, 1) << what << ": no generated kernel";
      ASSERT_EQ(plainCalls, 0) << what;
      ASSERT_EQ(fused.size(), 2u) << what;
      ASSERT_EQ(plain.size(), 2u) << what;
      std::vector<rt::Tensor> operands(inputs.begin(),
                                       inputs.begin() + k.numOperands);
      Mismatches m = compareBitwise(fused[0], plain[0], operands, f);
      char line[160];
      std::snprintf(line, sizeof line,
                    "  %-8s %-4s %7" PRId64 " inputs: %6" PRId64 " differ\n",
                    std::string(k.name).c_str(), f.mlir, m.total, m.count);
      summary += line;
      EXPECT_EQ(m.count, 0) << what << ": " << m.count << " of " << m.total
                            << " results differ" << m.examples;
      ++cases;
    }
  }
  std::printf("generated against hand-written kernels, bit for bit:\n%s",
              summary.c_str());
  EXPECT_GE(cases, 70);
}

/// A chain of the transcendental kernels with broadcast operands, as a
/// training step has them: both ways, bit for bit, in every float dtype.
TEST(FusedKernelsBitwise, ChainsOfTranscendentalKernels) {
  std::mt19937_64 rng(99);
  for (const FloatFormat &f : kFormats) {
    const int64_t rows = 7, cols = 1001;
    std::string x =
        "!dtensor.tensor<7x1001x" + std::string(f.mlir) + ", #m, [R]>";
    std::string w =
        "!dtensor.tensor<1001x" + std::string(f.mlir) + ", #m, [R]>";
    auto unary = [&](const char *op, const char *in, const char *out) {
      return std::string("  %") + out + " = dtensor." + op + " %" + in +
             " : (" + x + ") -> " + x + "\n";
    };
    auto binary = [&](const char *op, const char *a, const char *b,
                      const char *out) {
      return std::string("  %") + out + " = dtensor." + op + " %" + a + ", %" +
             b + " : (" + x + ", " + x + ") -> " + x + "\n";
    };
    // y = gelu(x*w + 0.1); t = tanh(y) * sigmoid(y); e = exp(-silu(t));
    // l = log(1 + e) / 3; out = l - y
    std::string source =
        "#m = #dtensor.mesh<[1]>\nfunc.func @f(%x: " + x + ", %w: " + w +
        ") -> " + x + " {\n  %wb = dtensor.broadcast_to %w : (" + w + ") -> " +
        x + "\n" + binary("mul", "x", "wb", "m") +
        "  %c = dtensor.full 0.1 : " + x + "\n" + binary("add", "m", "c", "s") +
        unary("gelu", "s", "y") + unary("tanh", "y", "t0") +
        unary("sigmoid", "y", "t1") + binary("mul", "t0", "t1", "t") +
        unary("silu", "t", "u") + unary("neg", "u", "v") +
        unary("exp", "v", "e") + "  %one = dtensor.full 1.0 : " + x + "\n" +
        binary("add", "one", "e", "p") + unary("log", "p", "q") +
        "  %three = dtensor.full 3.0 : " + x + "\n" +
        binary("div", "q", "three", "l") + binary("sub", "l", "y", "out") +
        "  return %out : " + x + "\n}\n";
    std::vector<uint64_t> xs, ws;
    std::normal_distribution<double> normal(0.0, 3.0);
    for (int64_t i = 0; i < rows * cols; ++i)
      xs.push_back(bitsOf(normal(rng), f));
    for (int64_t i = 0; i < cols; ++i)
      ws.push_back(bitsOf(normal(rng), f));
    std::vector<rt::Tensor> inputs = {tensorOfBits(xs, f, {rows, cols}),
                                      tensorOfBits(ws, f)};
    int fusedCalls = 0, plainCalls = 0;
    std::vector<rt::Tensor> fused =
        compileAndRun(source, true, inputs, &fusedCalls);
    std::vector<rt::Tensor> plain =
        compileAndRun(source, false, inputs, &plainCalls);
    ASSERT_EQ(fusedCalls, 1) << f.mlir;
    ASSERT_EQ(plainCalls, 0) << f.mlir;
    Mismatches m = compareBitwise(fused[0], plain[0], {inputs[0]}, f);
    EXPECT_EQ(m.count, 0) << "chain " << f.mlir << ": " << m.count << " of "
                          << m.total << " results differ" << m.examples;
  }
}

/// Every float kernel in one group, each result multiplied by a constant 1
/// and returned: one generated kernel with 20 results whose loop calls libm
/// (sin, cos, pow) and so is not vectorized. The LLVM backend once turned
/// its bfloat16 rounding into vcvtneps2bf16, which flushes denormals.
TEST(FusedKernelsBitwise, OneGroupOfEveryKernel) {
  std::mt19937_64 rng(5);
  for (const FloatFormat &f : kFormats) {
    auto [as, bs] = binaryInputs(f, rng);
    size_t n = as.size();
    std::string t = tensorType(n, f.mlir);
    std::string body, results, resultTypes;
    int k = 0;
    for (const rank::FusibleKernel &kernel : rank::fusibleKernels()) {
      if (kernel.kind != rank::FusibleKind::Elementwise ||
          !(kernel.types & rank::kFloatTypes))
        continue;
      std::string r = "%r" + std::to_string(k), y = "%y" + std::to_string(k);
      bool two = kernel.numOperands == 2;
      body += "  " + r + " = dtensor." + std::string(kernel.name) +
              (two ? " %a, %b : (" + t + ", " + t : " %a : (" + t) + ") -> " +
              t + "\n  " + y + " = dtensor.mul " + r + ", %one : (" + t + ", " +
              t + ") -> " + t + "\n";
      results += (k ? ", " : "") + y;
      resultTypes += (k ? ", " : "") + t;
      ++k;
    }
    std::string source = "#m = #dtensor.mesh<[1]>\nfunc.func @f(%a: " + t +
                         ", %b: " + t + ") -> (" + resultTypes +
                         ") {\n  %one = dtensor.full 1.0 : " + t + "\n" + body +
                         "  return " + results + " : " + resultTypes + "\n}\n";
    std::vector<rt::Tensor> inputs = {tensorOfBits(as, f), tensorOfBits(bs, f)};
    int fusedCalls = 0, plainCalls = 0;
    std::vector<rt::Tensor> fused =
        compileAndRun(source, true, inputs, &fusedCalls);
    std::vector<rt::Tensor> plain =
        compileAndRun(source, false, inputs, &plainCalls);
    ASSERT_EQ(fusedCalls, 1) << f.mlir;
    ASSERT_EQ(fused.size(), static_cast<size_t>(k)) << f.mlir;
    ASSERT_EQ(plain.size(), static_cast<size_t>(k)) << f.mlir;
    for (int i = 0; i < k; ++i) {
      Mismatches m = compareBitwise(fused[i], plain[i], inputs, f);
      EXPECT_EQ(m.count, 0)
          << "result " << i << " " << f.mlir << ": " << m.count << " of "
          << m.total << " differ" << m.examples;
    }
  }
}

/// All 2^32 float32 inputs of the transcendental kernels, in blocks of 2^24.
TEST(FusedKernelsBitwise, ExhaustiveFloat32) {
  const char *flag = std::getenv("DTORCH_EXHAUSTIVE_FLOAT32");
  if (!flag || std::string(flag) != "1")
    GTEST_SKIP() << "set DTORCH_EXHAUSTIVE_FLOAT32=1 to run all 2^32 float32 "
                    "inputs (about 11 minutes on 2 busy cores)";
  const FloatFormat &f = kFormats[0];
  const size_t block = size_t(1) << 24;
  for (const char *kernel :
       {"exp", "log", "tanh", "gelu", "sigmoid", "silu", "sqrt", "rsqrt"}) {
    std::string source = oneKernelSource(kernel, 1, block, f.mlir);
    CompileOptions options;
    options.fuseElementwise = true;
    CompileResult fusedResult = compileModule(source, "f.mlir", options);
    options.fuseElementwise = false;
    CompileResult plainResult = compileModule(source, "p.mlir", options);
    ASSERT_TRUE(fusedResult.ok && plainResult.ok);
    wire::Program fusedProgram =
        emitted::programsByPosition(fusedResult.functions[0])[0];
    wire::Program plainProgram =
        emitted::programsByPosition(plainResult.functions[0])[0];
    rt::Executor executor(nullptr);
    wire::TensorSpec spec;
    spec.set_dtype(f.wire);
    spec.add_shape(static_cast<int64_t>(block));
    rt::Tensor in = rt::Tensor::emptyLike(spec);
    int64_t differ = 0;
    std::string examples;
    for (uint64_t start = 0; start < (uint64_t(1) << 32); start += block) {
      uint32_t *bits = in.data_as<uint32_t>();
      for (size_t i = 0; i < block; ++i)
        bits[i] = static_cast<uint32_t>(start + i);
      std::vector<rt::Tensor> a = executor.run(fusedProgram, {in, in});
      std::vector<rt::Tensor> b = executor.run(plainProgram, {in, in});
      // Bits first (fast); the full comparison only for a block that has a
      // difference.
      if (std::memcmp(a[0].data(), b[0].data(), a[0].nbytes()) == 0)
        continue;
      Mismatches m = compareBitwise(a[0], b[0], {in}, f);
      differ += m.count;
      if (examples.size() < 400)
        examples += m.examples;
    }
    std::printf("  %-8s f32 all 2^32 inputs: %" PRId64 " differ\n", kernel,
                differ);
    EXPECT_EQ(differ, 0) << kernel << examples;
  }
}

} // namespace
