// Generated GPU kernels (PTX from lib/Compiler/GpuKernelCodegen.cpp, loaded
// through the driver by runtime/cuda/CudaGeneratedKernels.cpp) against the
// hand-written CUDA kernels and the CPU reference: every fusible float
// kernel in every float dtype, on the specials, random values and (16-bit
// formats) every bit pattern, run three ways from the same source:
//   - fused for the GPU (one generated kernel) on the CUDA executor;
//   - unfused on the CUDA executor (the registry's hand-written kernels);
//   - unfused on the CPU executor (the reference).
// The generated kernel computes what the CPU's generated and library
// kernels compute, so it must equal the CPU bit for bit, except where it
// calls CUDA's libdevice (sin, cos, pow in every float type; exp, log,
// tanh, erf in float64), whose results may differ from glibc's by a few
// ulp. Against the hand-written CUDA kernels: bit for bit where both do
// the same arithmetic or call the same libdevice function; where the
// hand-written kernels call libdevice and the generated ones use the
// polynomial forms (float32 and 16-bit exp, log, tanh, sigmoid, silu,
// gelu), within a tolerance on finite values. Groups ending in row
// reductions (softmax, log_softmax, layer_norm, rms_norm, cross-entropy:
// one thread per row) against the CPU's generated row kernels and the
// CPU's library kernels: bit for bit in float32, float16 and bfloat16 (the
// same float64 sums in the same order); float64 exp and log are libdevice's,
// so there a relative 1e-12. Skips with "no CUDA device: <reason>" where
// there is no GPU.
#include "CudaDevice.h"
#include "FloatBits.h"
#include "ProgramsByPosition.h"
#include "RowReductionSources.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/Kernels.h"
#include "rank/IR/FusibleKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace dtorch;

namespace {

struct FloatFormat {
  const char *mlir;
  wire::DType wire;
  int bits;
};

const FloatFormat kFormats[] = {
    {"f32", wire::F32, 32},
    {"f64", wire::F64, 64},
    {"f16", wire::F16, 16},
    {"bf16", wire::BF16, 16},
};

uint64_t bitsOf(double value, const FloatFormat &f) {
  return ::dtorch::testsupport::floatBitsOf(value, f.wire);
}

uint64_t rawAt(const rt::Tensor &t, int64_t i, int bits) {
  uint64_t u = 0;
  std::memcpy(&u, static_cast<const char *>(t.data()) + i * (bits / 8),
              bits / 8);
  return u;
}

double valueOf(uint64_t u, const FloatFormat &f) {
  switch (f.wire) {
  case wire::F64: {
    double v;
    std::memcpy(&v, &u, 8);
    return v;
  }
  case wire::F32: {
    float v;
    uint32_t w = static_cast<uint32_t>(u);
    std::memcpy(&v, &w, 4);
    return v;
  }
  case wire::F16: {
    rt::Half h;
    h.bits = static_cast<uint16_t>(u);
    return static_cast<float>(h);
  }
  default: {
    rt::BFloat16 h;
    h.bits = static_cast<uint16_t>(u);
    return static_cast<float>(h);
  }
  }
}

/// Distance in representable values (ulp) between two finite values of a
/// format given as bits.
uint64_t ulpDistance(uint64_t a, uint64_t b, int bits) {
  uint64_t sign = uint64_t(1) << (bits - 1);
  auto ordered = [&](uint64_t u) -> int64_t {
    return (u & sign) ? -static_cast<int64_t>(u & (sign - 1))
                      : static_cast<int64_t>(u);
  };
  int64_t x = ordered(a), y = ordered(b);
  return static_cast<uint64_t>(x > y ? x - y : y - x);
}

rt::Tensor tensorOfBits(const std::vector<uint64_t> &bits,
                        const FloatFormat &f) {
  wire::TensorSpec spec;
  spec.set_dtype(f.wire);
  spec.add_shape(static_cast<int64_t>(bits.size()));
  rt::Tensor t = rt::Tensor::emptyLike(spec);
  for (size_t i = 0; i < bits.size(); ++i)
    std::memcpy(static_cast<char *>(t.data()) + i * (f.bits / 8), &bits[i],
                f.bits / 8);
  return t;
}

std::vector<uint64_t> inputsFor(const FloatFormat &f, std::mt19937_64 &rng) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<uint64_t> bits;
  for (double v : {0.0,
                   -0.0,
                   inf,
                   -inf,
                   std::numeric_limits<double>::quiet_NaN(),
                   1.0,
                   -1.0,
                   0.5,
                   2.0,
                   -2.0,
                   3.0,
                   1e-40,
                   -1e-40,
                   65504.0,
                   6e-8,
                   1e30,
                   -1e30,
                   87.8,
                   88.8,
                   -87.8,
                   -88.8,
                   7.99881172,
                   0.0004,
                   3.75})
    bits.push_back(bitsOf(v, f));
  if (f.bits == 16) {
    for (uint64_t u = 0; u < 65536; ++u)
      bits.push_back(u);
    return bits;
  }
  for (double range : {1.0, 4.0, 10.0, 100.0, 1e5}) {
    std::uniform_real_distribution<double> u(-range, range);
    for (int i = 0; i < 4000; ++i)
      bits.push_back(bitsOf(u(rng), f));
  }
  std::uniform_real_distribution<double> e(f.bits == 32 ? -45.0 : -300.0,
                                           f.bits == 32 ? 38.0 : 300.0);
  for (int i = 0; i < 20000; ++i)
    bits.push_back(bitsOf((i % 2 ? -1 : 1) * std::pow(10.0, e(rng)), f));
  return bits;
}

std::string kernelSource(const std::string &kernel, unsigned operands, size_t n,
                         const char *dtype) {
  std::string t =
      "!dtensor.tensor<" + std::to_string(n) + "x" + dtype + ", #m, [R]>";
  std::string args = operands == 2 ? "%a, %b" : "%a";
  std::string argTypes = operands == 2 ? t + ", " + t : t;
  return "#m = #dtensor.mesh<[1]>\nfunc.func @f(%a: " + t + ", %b: " + t +
         ") -> (" + t + ", " + t + ") {\n  %r = dtensor." + kernel + " " +
         args + " : (" + argTypes + ") -> " + t + "\n  %c = dtensor.full " +
         "1.0 : " + t + "\n  return %r, %c : " + t + ", " + t + "\n}\n";
}

std::string deviceArch() {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, 0) != cudaSuccess)
    return "sm_90";
  return "sm_" + std::to_string(props.major * 10 + props.minor);
}

std::vector<rt::Tensor> compileAndRun(const std::string &source, bool fuse,
                                      const std::string &cudaArch,
                                      rt::Device &device,
                                      const std::vector<rt::Tensor> &inputs,
                                      int *fusedCalls) {
  CompileOptions options;
  options.fuseElementwise = fuse;
  options.cudaArch = cudaArch;
  CompileResult result = compileModule(source, "gpu-fused.mlir", options);
  EXPECT_TRUE(result.ok) << result.error;
  if (!result.ok)
    return {};
  wire::Program program = emitted::programsByPosition(result.functions[0])[0];
  *fusedCalls = 0;
  for (const auto &inst : program.instructions())
    *fusedCalls += inst.op() == "fused";
  rt::Executor executor(nullptr);
  executor.setDevice(device);
  std::vector<rt::Tensor> out = executor.run(program, inputs);
  for (rt::Tensor &t : out)
    t = t.to(rt::cpuDevice());
  return out;
}

bool callsLibdevice(const std::string &kernel, wire::DType dtype) {
  static const std::set<std::string> everyType = {"sin", "cos", "pow"};
  static const std::set<std::string> float64 = {"exp",  "log",     "tanh",
                                                "gelu", "sigmoid", "silu"};
  return everyType.count(kernel) ||
         (dtype == wire::F64 && float64.count(kernel));
}

bool polynomialVsLibdevice(const std::string &kernel, wire::DType dtype) {
  static const std::set<std::string> polynomial = {"exp",  "log",     "tanh",
                                                   "gelu", "sigmoid", "silu"};
  return dtype != wire::F64 && polynomial.count(kernel);
}

struct Comparison {
  int64_t differ = 0;  // elements whose bits differ (NaN == NaN)
  int64_t beyond = 0;  // of those, outside the tolerance
  uint64_t maxUlp = 0; // among finite pairs
  std::string examples;
};

/// Elements of `got` and `want` that differ: within tolerance when at most
/// `ulpTolerance` representable values apart (infinity counts as the one
/// after the largest finite value), or when |got - want| <= relTolerance *
/// |want| + absPerInput * max(1, |input|) (the cancellations of gelu and
/// the underflow of sigmoid, where two correct approximations differ).
Comparison compareTo(const rt::Tensor &got, const rt::Tensor &want,
                     const rt::Tensor &input, const FloatFormat &f,
                     uint64_t ulpTolerance, double relTolerance,
                     double absPerInput = 0.0) {
  Comparison c;
  for (int64_t i = 0; i < want.numel(); ++i) {
    uint64_t a = rawAt(got, i, f.bits), b = rawAt(want, i, f.bits);
    double x = valueOf(a, f), y = valueOf(b, f);
    if (a == b || (std::isnan(x) && std::isnan(y)))
      continue;
    ++c.differ;
    bool ok = false;
    if (!std::isnan(x) && !std::isnan(y)) {
      uint64_t ulp = ulpDistance(a, b, f.bits);
      c.maxUlp = std::max(c.maxUlp, ulp);
      double in = std::abs(valueOf(rawAt(input, i, f.bits), f));
      ok = ulp <= ulpTolerance ||
           (std::isfinite(x) && std::isfinite(y) &&
            std::abs(x - y) <=
                relTolerance * std::abs(y) + absPerInput * std::max(1.0, in));
    }
    if (!ok && ++c.beyond <= 5) {
      char line[160];
      std::snprintf(line, sizeof line,
                    "\n    x=%.9g: generated %.17g, %s %.17g",
                    valueOf(rawAt(input, i, f.bits), f), x, "other", y);
      c.examples += line;
    }
  }
  return c;
}

TEST(GpuFusedKernels, EveryFloatKernelAgainstHandWrittenAndCpu) {
  std::string why;
  rt::cuda::registerCudaBackend();
  if (rt::deviceCount("cuda", &why) == 0)
    GTEST_SKIP() << "no CUDA device: " << why;
  rt::Device &gpu = rt::cuda::cudaDevice(0);
  std::string arch = deviceArch();
  std::mt19937_64 rng(13);
  std::string table;
  int cases = 0;
  for (const rank::FusibleKernel &k : rank::fusibleKernels()) {
    if (k.kind != rank::FusibleKind::Elementwise ||
        !(k.types & rank::kFloatTypes))
      continue;
    std::string name(k.name);
    for (const FloatFormat &f : kFormats) {
      std::vector<uint64_t> a = inputsFor(f, rng), b = a;
      std::shuffle(b.begin(), b.end(), rng);
      std::vector<rt::Tensor> inputs = {tensorOfBits(a, f), tensorOfBits(b, f)};
      std::string source = kernelSource(name, k.numOperands, a.size(), f.mlir);
      int fusedCalls = 0, calls = 0;
      std::vector<rt::Tensor> generated =
          compileAndRun(source, true, arch, gpu, inputs, &fusedCalls);
      std::vector<rt::Tensor> handWritten =
          compileAndRun(source, false, "", gpu, inputs, &calls);
      std::vector<rt::Tensor> cpu =
          compileAndRun(source, false, "", rt::cpuDevice(), inputs, &calls);
      std::string what = name + " " + f.mlir;
      ASSERT_EQ(fusedCalls, 1) << what << ": no generated kernel";
      ASSERT_EQ(generated.size(), 2u) << what;
      ASSERT_EQ(handWritten.size(), 2u) << what;
      ASSERT_EQ(cpu.size(), 2u) << what;
      bool libdevice = callsLibdevice(name, f.wire);
      bool polynomial = polynomialVsLibdevice(name, f.wire);
      // Against the CPU: bitwise unless libdevice (a few ulp of glibc).
      uint64_t cpuUlps = libdevice ? (f.bits == 16 ? 1 : 4) : 0;
      Comparison vsCpu =
          compareTo(generated[0], cpu[0], inputs[0], f, cpuUlps, 0.0);
      // Against the hand-written CUDA kernels: bitwise unless one side is
      // polynomial and the other libdevice.
      uint64_t cudaUlps = polynomial ? (f.bits == 16 ? 2 : 16) : 0;
      double cudaRel = polynomial ? (f.bits == 16 ? 1e-2 : 1e-5) : 0.0;
      double cudaAbs = polynomial ? (f.bits == 16 ? 1e-2 : 1e-6) : 0.0;
      Comparison vsCuda = compareTo(generated[0], handWritten[0], inputs[0], f,
                                    cudaUlps, cudaRel, cudaAbs);
      char line[200];
      std::snprintf(line, sizeof line,
                    "  %-8s %-4s %7zu  vs CPU: %6" PRId64
                    " differ (max %" PRIu64 " ulp)  vs CUDA: %6" PRId64
                    " differ (max %" PRIu64 " ulp)\n",
                    name.c_str(), f.mlir, a.size(), vsCpu.differ, vsCpu.maxUlp,
                    vsCuda.differ, vsCuda.maxUlp);
      table += line;
      EXPECT_EQ(vsCpu.beyond, 0)
          << what << " against the CPU: " << vsCpu.beyond << " beyond "
          << cpuUlps << " ulp" << vsCpu.examples;
      EXPECT_EQ(vsCuda.beyond, 0)
          << what << " against the hand-written CUDA kernel: " << vsCuda.beyond
          << " beyond tolerance" << vsCuda.examples;
      ++cases;
    }
  }
  std::printf("generated GPU kernels (%s) against the CPU and the "
              "hand-written CUDA kernels:\n%s",
              arch.c_str(), table.c_str());
  EXPECT_GE(cases, 4 * 18);
}

/// A chain with a broadcast operand over a 3-D shape larger than one block,
/// every float dtype: the generated kernel's indexing against the CPU.
TEST(GpuFusedKernels, BroadcastChainMatchesCpu) {
  std::string why;
  rt::cuda::registerCudaBackend();
  if (rt::deviceCount("cuda", &why) == 0)
    GTEST_SKIP() << "no CUDA device: " << why;
  rt::Device &gpu = rt::cuda::cudaDevice(0);
  std::mt19937_64 rng(7);
  for (const FloatFormat &f : kFormats) {
    std::string x = std::string("!dtensor.tensor<3x7x1001x") + f.mlir +
                    ", #m, [R]>",
                w = std::string("!dtensor.tensor<1001x") + f.mlir +
                    ", #m, [R]>";
    std::string source =
        "#m = #dtensor.mesh<[1]>\nfunc.func @f(%x: " + x + ", %w: " + w +
        ") -> " + x + " {\n  %wb = dtensor.broadcast_to %w : (" + w + ") -> " +
        x + "\n  %m = dtensor.mul %x, %wb : (" + x + ", " + x + ") -> " + x +
        "\n  %c = dtensor.full 0.25 : " + x +
        "\n  %s = dtensor.sub %m, %c : (" + x + ", " + x + ") -> " + x +
        "\n  %g = dtensor.gelu %s : (" + x + ") -> " + x +
        "\n  %r = dtensor.maximum %g, %m : (" + x + ", " + x + ") -> " + x +
        "\n  return %r : " + x + "\n}\n";
    std::normal_distribution<double> normal(0.0, 2.0);
    std::vector<uint64_t> xs, ws;
    for (int i = 0; i < 3 * 7 * 1001; ++i)
      xs.push_back(bitsOf(normal(rng), f));
    for (int i = 0; i < 1001; ++i)
      ws.push_back(bitsOf(normal(rng), f));
    rt::Tensor xt = tensorOfBits(xs, f);
    wire::TensorSpec spec;
    spec.set_dtype(f.wire);
    for (int64_t e : {3, 7, 1001})
      spec.add_shape(e);
    rt::Tensor x3 = rt::Tensor::emptyLike(spec);
    std::memcpy(x3.data(), xt.data(), xt.nbytes());
    std::vector<rt::Tensor> inputs = {x3, tensorOfBits(ws, f)};
    int fusedCalls = 0, calls = 0;
    std::vector<rt::Tensor> generated =
        compileAndRun(source, true, deviceArch(), gpu, inputs, &fusedCalls);
    std::vector<rt::Tensor> cpu =
        compileAndRun(source, false, "", rt::cpuDevice(), inputs, &calls);
    ASSERT_EQ(fusedCalls, 1) << f.mlir;
    ASSERT_EQ(generated.size(), 1u);
    // float64 gelu calls libdevice's erf; the rest is bitwise.
    uint64_t ulps = f.wire == wire::F64 ? 4 : 0;
    Comparison c = compareTo(generated[0], cpu[0], xt, f, ulps, 0.0);
    EXPECT_EQ(c.beyond, 0) << f.mlir << c.examples;
  }
}

rt::Tensor randomOfShape(const FloatFormat &f,
                         const std::vector<int64_t> &shape, double lo,
                         double hi, std::mt19937_64 &rng) {
  int64_t n = 1;
  for (int64_t e : shape)
    n *= e;
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<uint64_t> bits;
  for (int64_t i = 0; i < n; ++i)
    bits.push_back(bitsOf(u(rng), f));
  rt::Tensor flat = tensorOfBits(bits, f);
  wire::TensorSpec spec;
  spec.set_dtype(f.wire);
  for (int64_t e : shape)
    spec.add_shape(e);
  rt::Tensor t = rt::Tensor::emptyLike(spec);
  std::memcpy(t.data(), flat.data(), flat.nbytes());
  return t;
}

/// Row kernels (one GPU thread per row) against the CPU's generated row
/// kernels and its library kernels, every float dtype; rows longer than
/// the host generator's chunk and row counts beyond one block included.
TEST(GpuFusedKernels, RowKernelsMatchCpu) {
  using namespace dtorch::row_sources;
  std::string why;
  rt::cuda::registerCudaBackend();
  if (rt::deviceCount("cuda", &why) == 0)
    GTEST_SKIP() << "no CUDA device: " << why;
  rt::Device &gpu = rt::cuda::cudaDevice(0);
  std::string arch = deviceArch();
  std::mt19937_64 rng(31);
  struct RowCase {
    const char *name;
    std::string source;
    std::vector<std::vector<int64_t>> inputs;
    bool exp; // calls exp/log (libdevice in float64)
  };
  std::string table;
  for (const FloatFormat &f : kFormats) {
    const RowCase cases[] = {
        {"softmax",
         softmaxSource(f.mlir, 300, 1500, "exp"),
         {{300, 1500}},
         true},
        {"softmax(neg)",
         softmaxSource(f.mlir, 17, 1001, "neg"),
         {{17, 1001}},
         false},
        {"log_softmax", logSoftmaxSource(f.mlir, 9, 11), {{2, 9, 3, 11}}, true},
        {"layer_norm",
         layerNormSource(f.mlir, 19, 2500),
         {{19, 2500}, {2500}, {2500}},
         false},
        {"rms_norm", rmsNormSource(f.mlir, 513, 64), {{513, 64}, {64}}, false},
        {"cross_entropy",
         crossEntropySource(f.mlir, 64, 65),
         {{64, 65}, {64, 65}},
         true},
    };
    for (const RowCase &c : cases) {
      std::vector<rt::Tensor> inputs;
      // Cross-entropy's targets are probabilities: its per-row sums do not
      // cancel, so float64's libdevice exp/log stay within the tolerance.
      bool targets = std::string(c.name) == "cross_entropy";
      for (const auto &shape : c.inputs)
        inputs.push_back(targets && !inputs.empty()
                             ? randomOfShape(f, shape, 0, 1, rng)
                             : randomOfShape(f, shape, -4, 4, rng));
      int fusedGpu = 0, fusedCpu = 0, calls = 0;
      std::vector<rt::Tensor> generated =
          compileAndRun(c.source, true, arch, gpu, inputs, &fusedGpu);
      std::vector<rt::Tensor> cpuFused =
          compileAndRun(c.source, true, "", rt::cpuDevice(), inputs, &fusedCpu);
      std::vector<rt::Tensor> cpu =
          compileAndRun(c.source, false, "", rt::cpuDevice(), inputs, &calls);
      std::string what = std::string(c.name) + " " + f.mlir;
      ASSERT_EQ(fusedGpu, 1) << what << ": not one generated GPU kernel";
      ASSERT_EQ(generated.size(), cpu.size()) << what;
      ASSERT_EQ(cpuFused.size(), cpu.size()) << what;
      double rel = (f.wire == wire::F64 && c.exp) ? 1e-12 : 0.0;
      for (size_t o = 0; o < cpu.size(); ++o) {
        Comparison vsFused =
            compareTo(generated[o], cpuFused[o], cpuFused[o], f, 0, rel);
        Comparison vsLibrary =
            compareTo(generated[o], cpu[o], cpu[o], f, 0, rel);
        char line[200];
        std::snprintf(line, sizeof line,
                      "  %-13s %-4s out %zu  vs CPU fused: %6" PRId64
                      " differ  vs CPU library: %6" PRId64 " differ\n",
                      c.name, f.mlir, o, vsFused.differ, vsLibrary.differ);
        table += line;
        EXPECT_EQ(vsFused.beyond, 0)
            << what << " output " << o << " against the CPU's row kernel"
            << vsFused.examples;
        EXPECT_EQ(vsLibrary.beyond, 0)
            << what << " output " << o << " against the CPU's library kernels"
            << vsLibrary.examples;
      }
    }
  }
  std::printf("generated GPU row kernels (%s) against the CPU:\n%s",
              arch.c_str(), table.c_str());
}

} // namespace
