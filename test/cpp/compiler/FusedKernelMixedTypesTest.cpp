//===- FusedKernelMixedTypesTest.cpp - mixed-type groups, bit for bit -----===//
//
// Fused groups may mix element types: comparisons make i1, `where` reads
// it, `cast` converts between any two element types and `iota` counts
// positions (rank/IR/FusibleKernels.h). Each of them, in every element
// type it is fused for, and the mixed groups of a GPT step (the gelu
// backward, the causal mask and softmax, the cross-entropy mask, a row
// group with per-row comparisons and positions) run once with the runtime's
// hand-written kernels and once as generated kernels: the results must be
// equal bit for bit (a NaN must be a NaN on both sides). Inputs: the
// specials of each format (+-0, +-inf, NaN, denormals, the integer limits
// and the floats around them), random values, and every bit pattern of
// the 16-bit floats.
//
//===----------------------------------------------------------------------===//

#include "FloatBits.h"
#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/Half.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace dtorch;

namespace {

struct Dtype {
  const char *mlir;
  wire::DType wire;
  int bytes;
  bool isFloat;
  bool isBool;
};

const Dtype kDtypes[] = {
    {"f32", wire::F32, 4, true, false},  {"f64", wire::F64, 8, true, false},
    {"f16", wire::F16, 2, true, false},  {"bf16", wire::BF16, 2, true, false},
    {"i32", wire::I32, 4, false, false}, {"i64", wire::I64, 8, false, false},
    {"i1", wire::BOOL, 1, false, true},
};

const Dtype &dtypeNamed(const std::string &name) {
  for (const Dtype &d : kDtypes)
    if (name == d.mlir)
      return d;
  return kDtypes[0];
}

/// The bits of `value` in a float format.
uint64_t floatBits(double value, const Dtype &d) {
  return ::dtorch::testsupport::floatBitsOf(value, d.wire);
}

/// Values of a float format every conversion and comparison is tried on:
/// specials, the integer limits and the floats next to them, fractions,
/// random values in several ranges, and a spread of bit patterns (every
/// one of a 16-bit format).
std::vector<uint64_t> floatValues(const Dtype &d, std::mt19937_64 &rng) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> specials = {0.0,
                                  -0.0,
                                  inf,
                                  -inf,
                                  std::numeric_limits<double>::quiet_NaN(),
                                  -std::numeric_limits<double>::quiet_NaN(),
                                  0.5,
                                  -0.5,
                                  1.5,
                                  -1.5,
                                  0.999999,
                                  -0.999999,
                                  2.5,
                                  -2.5,
                                  1e-40,
                                  -1e-40,
                                  std::numeric_limits<double>::denorm_min(),
                                  std::numeric_limits<float>::max(),
                                  -std::numeric_limits<float>::max(),
                                  std::numeric_limits<double>::max(),
                                  -std::numeric_limits<double>::max(),
                                  65504.0,
                                  65520.0,
                                  1e10,
                                  -1e10,
                                  1e30,
                                  -1e30};
  // Around the int32 and int64 limits (as doubles and as the floats next
  // to them).
  for (double limit : {2147483648.0, 9223372036854775808.0})
    for (double s : {1.0, -1.0})
      for (double delta :
           {-1.0, -0.5, 0.0, 0.5, 1.0, 2.0, -1024.0, 1024.0, -128.0, 128.0})
        specials.push_back(s * (limit + delta));
  specials.push_back(
      std::nextafter(static_cast<float>(2147483648.0), 0.0f)); // 2^31 - 128
  specials.push_back(-std::nextafter(static_cast<float>(2147483648.0), 0.0f));
  specials.push_back(std::nextafter(9223372036854775808.0, 0.0));
  specials.push_back(-std::nextafter(9223372036854775808.0, 0.0));
  std::vector<uint64_t> bits;
  for (double v : specials)
    bits.push_back(floatBits(v, d));
  if (d.bytes == 2) {
    for (uint64_t u = 0; u < 65536; ++u)
      bits.push_back(u);
    return bits;
  }
  for (double range : {2.0, 100.0, 1e5, 3e9, 1e19}) {
    std::uniform_real_distribution<double> u(-range, range);
    for (int i = 0; i < 3000; ++i)
      bits.push_back(floatBits(u(rng), d));
  }
  // Small integers (exact in every format: comparisons find them equal).
  std::uniform_int_distribution<int> small(-20, 20);
  for (int i = 0; i < 2000; ++i)
    bits.push_back(floatBits(small(rng), d));
  for (uint64_t i = 0; i < 20000; ++i)
    bits.push_back(d.bytes == 4 ? (i * 214013u + 2531011u) & 0xffffffffu
                                : rng());
  return bits;
}

std::vector<uint64_t> integerValues(const Dtype &d, std::mt19937_64 &rng) {
  std::vector<int64_t> values = {0, 1, -1, 2, -2, 100, -100};
  int64_t lo = d.bytes == 4 ? std::numeric_limits<int32_t>::min()
                            : std::numeric_limits<int64_t>::min();
  int64_t hi = d.bytes == 4 ? std::numeric_limits<int32_t>::max()
                            : std::numeric_limits<int64_t>::max();
  for (int64_t v : {lo, lo + 1, hi, hi - 1, lo / 2, hi / 2})
    values.push_back(v);
  // Integers a float32 or float64 cannot hold exactly.
  values.push_back(16777217);
  values.push_back(-16777217);
  if (d.bytes == 8) {
    values.push_back((int64_t(1) << 53) + 1);
    values.push_back(-((int64_t(1) << 53) + 1));
  }
  std::uniform_int_distribution<int64_t> any(lo, hi);
  std::uniform_int_distribution<int64_t> small(-70000, 70000);
  for (int i = 0; i < 20000; ++i)
    values.push_back(any(rng));
  for (int i = 0; i < 20000; ++i)
    values.push_back(small(rng));
  std::vector<uint64_t> bits;
  uint64_t mask = d.bytes == 4 ? 0xffffffffu : ~uint64_t(0);
  for (int64_t v : values)
    bits.push_back(static_cast<uint64_t>(v) & mask);
  return bits;
}

std::vector<uint64_t> valuesOf(const Dtype &d, std::mt19937_64 &rng) {
  if (d.isFloat)
    return floatValues(d, rng);
  if (!d.isBool)
    return integerValues(d, rng);
  std::vector<uint64_t> bits;
  for (int i = 0; i < 5000; ++i)
    bits.push_back(rng() & 1);
  return bits;
}

/// A second operand for `a`: a shuffled copy in which every third value is
/// `a`'s own and every seventh its negation (equal and signed-zero pairs).
std::vector<uint64_t> otherOperand(const std::vector<uint64_t> &a,
                                   const Dtype &d, std::mt19937_64 &rng) {
  std::vector<uint64_t> b = a;
  std::shuffle(b.begin(), b.end(), rng);
  uint64_t sign = d.isBool ? 0 : uint64_t(1) << (d.bytes * 8 - 1);
  for (size_t i = 0; i < b.size(); ++i) {
    if (i % 3 == 0)
      b[i] = a[i];
    else if (i % 7 == 0 && d.isFloat)
      b[i] = a[i] ^ sign;
  }
  return b;
}

rt::Tensor tensorOfBits(const std::vector<uint64_t> &bits, const Dtype &d,
                        std::vector<int64_t> shape = {}) {
  wire::TensorSpec spec;
  spec.set_dtype(d.wire);
  if (shape.empty())
    shape = {static_cast<int64_t>(bits.size())};
  for (int64_t e : shape)
    spec.add_shape(e);
  rt::Tensor t = rt::Tensor::emptyLike(spec);
  for (size_t i = 0; i < bits.size(); ++i)
    std::memcpy(static_cast<char *>(t.data()) + i * d.bytes, &bits[i], d.bytes);
  return t;
}

uint64_t rawAt(const rt::Tensor &t, int64_t i, int bytes) {
  uint64_t u = 0;
  std::memcpy(&u, static_cast<const char *>(t.data()) + i * bytes, bytes);
  return u;
}

bool isNaNAt(const rt::Tensor &t, int64_t i) {
  switch (t.dtype()) {
  case wire::F32:
    return std::isnan(t.data_as<float>()[i]);
  case wire::F64:
    return std::isnan(t.data_as<double>()[i]);
  case wire::F16:
    return std::isnan(static_cast<float>(t.data_as<rt::Half>()[i]));
  case wire::BF16:
    return std::isnan(static_cast<float>(t.data_as<rt::BFloat16>()[i]));
  default:
    return false;
  }
}

const Dtype &dtypeOf(const rt::Tensor &t) {
  for (const Dtype &d : kDtypes)
    if (d.wire == t.dtype())
      return d;
  return kDtypes[0];
}

/// Elements where the two results differ in a bit (a NaN on both sides
/// counts as equal), with up to four examples naming the operands' bits.
std::string differences(const rt::Tensor &fused, const rt::Tensor &plain,
                        const std::vector<rt::Tensor> &inputs, int64_t *count) {
  *count = 0;
  std::string examples;
  const Dtype &d = dtypeOf(plain);
  if (fused.dtype() != plain.dtype() || fused.numel() != plain.numel()) {
    *count = plain.numel() + 1;
    return " (dtype or size differ)";
  }
  for (int64_t i = 0; i < plain.numel(); ++i) {
    uint64_t a = rawAt(fused, i, d.bytes), b = rawAt(plain, i, d.bytes);
    if (a == b || (isNaNAt(fused, i) && isNaNAt(plain, i)))
      continue;
    if (++*count > 4)
      continue;
    char line[96];
    examples += "\n    element " + std::to_string(i) + " in";
    for (const rt::Tensor &in : inputs)
      if (in.numel() == plain.numel()) {
        std::snprintf(line, sizeof line, " 0x%" PRIx64,
                      rawAt(in, i, dtypeOf(in).bytes));
        examples += line;
      }
    std::snprintf(line, sizeof line,
                  ": generated 0x%" PRIx64 ", hand-written 0x%" PRIx64, a, b);
    examples += line;
  }
  return examples;
}

struct RunResult {
  std::vector<rt::Tensor> outputs;
  int fused = 0;   // generated-kernel instructions
  int kernels = 0; // every other kernel instruction
};

RunResult compileAndRun(const std::string &source, bool fuse,
                        const std::vector<rt::Tensor> &inputs) {
  CompileOptions options;
  options.fuseElementwise = fuse;
  CompileResult result = compileModule(source, "mixed.mlir", options);
  EXPECT_TRUE(result.ok) << result.error << "\n" << source;
  RunResult run;
  if (!result.ok)
    return run;
  wire::Program program = emitted::programsByPosition(result.functions[0])[0];
  for (const auto &inst : program.instructions()) {
    if (inst.op() == "fused")
      ++run.fused;
    else if (inst.op() != "copy")
      ++run.kernels;
  }
  rt::Executor executor(nullptr);
  run.outputs = executor.run(program, inputs);
  return run;
}

/// Runs `source` both ways and expects `fusedKernels` generated kernels,
/// `otherKernels` other instructions fused, and equal bits in every result.
void expectBitwise(const std::string &what, const std::string &source,
                   const std::vector<rt::Tensor> &inputs, int fusedKernels,
                   int otherKernels) {
  RunResult fused = compileAndRun(source, true, inputs);
  RunResult plain = compileAndRun(source, false, inputs);
  if (fusedKernels >= 0) { // -1: rows the fusion pass folds (extent 1)
    EXPECT_EQ(fused.fused, fusedKernels) << what << "\n" << source;
    EXPECT_EQ(fused.kernels, otherKernels) << what;
  }
  EXPECT_EQ(plain.fused, 0) << what;
  ASSERT_EQ(fused.outputs.size(), plain.outputs.size()) << what;
  for (size_t r = 0; r < plain.outputs.size(); ++r) {
    int64_t count = 0;
    std::string examples =
        differences(fused.outputs[r], plain.outputs[r], inputs, &count);
    EXPECT_EQ(count, 0) << what << ": result " << r << ": " << count << " of "
                        << plain.outputs[r].numel() << " differ" << examples;
  }
}

std::string tensorType(const std::string &shape, const std::string &dtype) {
  return "!dtensor.tensor<" + (shape.empty() ? "" : shape + "x") + dtype +
         ", #m, [R]>";
}

const char *kHeader = "#m = #dtensor.mesh<[1]>\n";

TEST(FusedKernelsMixedTypes, ComparisonsEveryDtype) {
  std::mt19937_64 rng(17);
  int cases = 0;
  for (const Dtype &d : kDtypes) {
    std::vector<uint64_t> a = valuesOf(d, rng);
    std::vector<uint64_t> b = otherOperand(a, d, rng);
    std::string n = std::to_string(a.size());
    std::string t = tensorType(n, d.mlir), m = tensorType(n, "i1");
    std::vector<rt::Tensor> inputs = {tensorOfBits(a, d), tensorOfBits(b, d)};
    for (const char *cmp : {"eq", "ne", "lt", "le", "gt", "ge"}) {
      // The comparison and a constant: a group of two, one kernel.
      std::string source = std::string(kHeader) + "func.func @f(%a: " + t +
                           ", %b: " + t + ") -> (" + m + ", " + m +
                           ") {\n  %r = dtensor." + cmp + " %a, %b : (" + t +
                           ", " + t + ") -> " + m +
                           "\n  %c = dtensor.full 1.0 : " + m +
                           "\n  return %r, %c : " + m + ", " + m + "\n}\n";
      expectBitwise(std::string(cmp) + " " + d.mlir, source, inputs, 1, 0);
      ++cases;
    }
  }
  EXPECT_EQ(cases, 42);
}

TEST(FusedKernelsMixedTypes, WhereEveryDtype) {
  std::mt19937_64 rng(23);
  for (const Dtype &d : kDtypes) {
    std::vector<uint64_t> a = valuesOf(d, rng);
    std::vector<uint64_t> b = otherOperand(a, d, rng);
    std::vector<uint64_t> c;
    for (size_t i = 0; i < a.size(); ++i)
      c.push_back(rng() & 1);
    std::string n = std::to_string(a.size());
    std::string t = tensorType(n, d.mlir), m = tensorType(n, "i1");
    std::string source = std::string(kHeader) + "func.func @f(%c: " + m +
                         ", %a: " + t + ", %b: " + t + ") -> (" + t + ", " + t +
                         ") {\n  %r = dtensor.where %c, %a, %b : (" + m + ", " +
                         t + ", " + t + ") -> " + t +
                         "\n  %k = dtensor.full 1.0 : " + t +
                         "\n  return %r, %k : " + t + ", " + t + "\n}\n";
    std::vector<rt::Tensor> inputs = {tensorOfBits(c, dtypeNamed("i1")),
                                      tensorOfBits(a, d), tensorOfBits(b, d)};
    RunResult fused = compileAndRun(source, true, inputs);
    RunResult plain = compileAndRun(source, false, inputs);
    ASSERT_EQ(fused.fused, 1) << d.mlir;
    ASSERT_EQ(fused.outputs.size(), 2u);
    ASSERT_EQ(plain.outputs.size(), 2u);
    // `where` copies the chosen bits: NaN payloads too.
    EXPECT_EQ(std::memcmp(fused.outputs[0].data(), plain.outputs[0].data(),
                          plain.outputs[0].nbytes()),
              0)
        << "where " << d.mlir;
  }
}

TEST(FusedKernelsMixedTypes, CastEveryPairOfDtypes) {
  std::mt19937_64 rng(31);
  int cases = 0;
  for (const Dtype &from : kDtypes) {
    std::vector<uint64_t> a = valuesOf(from, rng);
    std::string n = std::to_string(a.size());
    std::vector<rt::Tensor> inputs = {tensorOfBits(a, from)};
    for (const Dtype &to : kDtypes) {
      if (&from == &to)
        continue;
      std::string s = tensorType(n, from.mlir), t = tensorType(n, to.mlir);
      std::string source = std::string(kHeader) + "func.func @f(%a: " + s +
                           ") -> (" + t + ", " + t +
                           ") {\n  %r = dtensor.cast %a : (" + s + ") -> " + t +
                           "\n  %c = dtensor.full 1.0 : " + t +
                           "\n  return %r, %c : " + t + ", " + t + "\n}\n";
      expectBitwise(std::string("cast ") + from.mlir + " -> " + to.mlir, source,
                    inputs, 1, 0);
      ++cases;
    }
  }
  EXPECT_EQ(cases, 42);
}

TEST(FusedKernelsMixedTypes, IotaEveryNumericDtype) {
  struct Counting {
    double start, step;
  };
  for (const char *name : {"f32", "f64", "f16", "bf16", "i32", "i64"}) {
    const Dtype &d = dtypeNamed(name);
    std::vector<Counting> countings = {{0, 1}, {-5, 3}, {7, -2}, {1e15, 3}};
    if (!d.isFloat) {
      countings.push_back({2147483640.0, 1});          // wraps in int32
      countings.push_back({4611686018427387904.0, 3}); // wraps in int64
      countings.push_back({-9007199254740991.0, -4096});
    }
    for (int dim : {0, 1})
      for (Counting c : countings) {
        std::string t = tensorType("37x29", d.mlir);
        char attrs[160];
        std::snprintf(attrs, sizeof attrs,
                      "{dim = %d : i64, start = %.17e : f64, step = %.17e : "
                      "f64}",
                      dim, c.start, c.step);
        // The positions, and their negation (a group of three).
        std::string source =
            std::string(kHeader) + "func.func @f() -> (" + t + ", " + t +
            ") {\n  %i = dtensor.iota " + attrs + " : () -> " + t +
            "\n  %n = dtensor.neg %i : (" + t + ") -> " + t +
            "\n  %c = dtensor.full 1.0 : " + t +
            "\n  %r = dtensor.mul %n, %c : (" + t + ", " + t + ") -> " + t +
            "\n  return %i, %r : " + t + ", " + t + "\n}\n";
        expectBitwise(std::string("iota ") + name + " " + attrs, source, {}, 1,
                      0);
      }
  }
}

/// An iota whose values a double would round is left to the library kernel
/// (its values are computed in double there); integer steps are fused.
TEST(FusedKernelsMixedTypes, InexactFloatIotaIsNotFused) {
  std::string t = tensorType("4x3", "f32");
  std::string source = std::string(kHeader) + "func.func @f() -> " + t +
                       " {\n  %i = dtensor.iota {dim = 1 : i64, start = 0.5 "
                       ": f64, step = 0.25 : f64} : () -> " +
                       t + "\n  %n = dtensor.neg %i : (" + t + ") -> " + t +
                       "\n  return %n : " + t + "\n}\n";
  RunResult run = compileAndRun(source, true, {});
  EXPECT_EQ(run.fused, 0);
  EXPECT_EQ(run.kernels, 2);
}

/// The gelu backward as autograd records it (DTensorOps.td):
/// g * (where(x == 0, 0.5, gelu(x) / x) + x * exp(x * x * -0.5) * c), the
/// constants broadcast from rank 0: one generated kernel.
TEST(FusedKernelsMixedTypes, GeluBackwardIsOneKernel) {
  std::mt19937_64 rng(41);
  for (const char *name : {"f32", "f64", "f16", "bf16"}) {
    const Dtype &d = dtypeNamed(name);
    std::vector<uint64_t> xs = floatValues(d, rng);
    std::vector<uint64_t> gs = otherOperand(xs, d, rng);
    // Zeros and values near zero (where the `where` picks 0.5).
    for (size_t i = 0; i < xs.size(); i += 11)
      xs[i] = floatBits(i % 2 ? 0.0 : -0.0, d);
    std::string n = std::to_string(xs.size());
    std::string x = tensorType(n, name), s = tensorType("", name),
                m = tensorType(n, "i1");
    auto bin = [&](const char *op, const char *a, const char *b,
                   const char *r) {
      return std::string("  %") + r + " = dtensor." + op + " %" + a + ", %" +
             b + " : (" + x + ", " + x + ") -> " + x + "\n";
    };
    auto scalar = [&](const char *r, const char *value) {
      return std::string("  %") + r + "0 = dtensor.full " + value + " : " + s +
             "\n  %" + r + " = dtensor.broadcast_to %" + r + "0 : (" + s +
             ") -> " + x + "\n";
    };
    std::string source =
        std::string(kHeader) + "func.func @f(%x: " + x + ", %g: " + x +
        ") -> " + x + " {\n  %y = dtensor.gelu %x : (" + x + ") -> " + x +
        "\n" + scalar("zero", "0.0") + "  %isz = dtensor.eq %x, %zero : (" + x +
        ", " + x + ") -> " + m + "\n" + scalar("half", "0.5") +
        bin("div", "y", "x", "q") + "  %w = dtensor.where %isz, %half, %q : (" +
        m + ", " + x + ", " + x + ") -> " + x + "\n" +
        bin("mul", "x", "x", "xx") + scalar("mhalf", "-0.5") +
        bin("mul", "xx", "mhalf", "e0") + "  %e = dtensor.exp %e0 : (" + x +
        ") -> " + x + "\n" + bin("mul", "x", "e", "xe") +
        scalar("c", "0.3989422804014327") + bin("mul", "xe", "c", "t") +
        bin("add", "w", "t", "d") + bin("mul", "g", "d", "out") +
        "  return %out : " + x + "\n}\n";
    // The rank-0 constants spread over x are constants of the group.
    expectBitwise(std::string("gelu backward ") + name, source,
                  {tensorOfBits(xs, d), tensorOfBits(gs, d)}, 1, 0);
  }
}

/// Causal attention's mask and softmax: the mask from two iotas and `ge`
/// (one kernel of the mask's shape, collected while the scores' group stays
/// open), then `where(mask, scores * scale, -inf)` and the softmax's row
/// reductions in one kernel.
TEST(FusedKernelsMixedTypes, CausalMaskAndSoftmax) {
  std::mt19937_64 rng(43);
  for (const char *name : {"f32", "f64", "f16", "bf16"}) {
    const Dtype &d = dtypeNamed(name);
    const int64_t B = 3, H = 2, L = 9;
    std::string ls = std::to_string(L) + "x" + std::to_string(L);
    std::string shape = std::to_string(B) + "x" + std::to_string(H) + "x" + ls;
    std::string kept = std::to_string(B) + "x" + std::to_string(H) + "x" +
                       std::to_string(L) + "x1";
    std::string x = tensorType(shape, name), k = tensorType(kept, name),
                i = tensorType(ls, "i64"), mk = tensorType(ls, "i1"),
                m = tensorType(shape, "i1"), s = tensorType("", name);
    std::string source =
        std::string(kHeader) + "func.func @f(%x: " + x + ") -> " + x +
        " {\n  %c = dtensor.full 0.25 : " + x +
        "\n  %sc = dtensor.mul %x, %c : (" + x + ", " + x + ") -> " + x +
        "\n  %r = dtensor.iota {dim = 0 : i64, start = 0.0 : f64, step = 1.0 : "
        "f64} : () -> " +
        i +
        "\n  %q = dtensor.iota {dim = 1 : i64, start = 0.0 : f64, step = 1.0 : "
        "f64} : () -> " +
        i + "\n  %mk = dtensor.ge %r, %q : (" + i + ", " + i + ") -> " + mk +
        "\n  %ninf0 = dtensor.full 0xFFF0000000000000 : " + s +
        "\n  %mb = dtensor.broadcast_to %mk : (" + mk + ") -> " + m +
        "\n  %ninf = dtensor.broadcast_to %ninf0 : (" + s + ") -> " + x +
        "\n  %w = dtensor.where %mb, %sc, %ninf : (" + m + ", " + x + ", " + x +
        ") -> " + x + "\n  %mx = dtensor.max %w dims = [3] keepdim : (" + x +
        ") -> " + k + "\n  %mxb = dtensor.broadcast_to %mx : (" + k + ") -> " +
        x + "\n  %sh = dtensor.sub %w, %mxb : (" + x + ", " + x + ") -> " + x +
        "\n  %e = dtensor.exp %sh : (" + x + ") -> " + x +
        "\n  %sm = dtensor.sum %e dims = [3] keepdim : (" + x + ") -> " + k +
        "\n  %smb = dtensor.broadcast_to %sm : (" + k + ") -> " + x +
        "\n  %p = dtensor.div %e, %smb : (" + x + ", " + x + ") -> " + x +
        "\n  return %p : " + x + "\n}\n";
    std::normal_distribution<double> normal(0.0, 4.0);
    std::vector<uint64_t> xs;
    for (int64_t j = 0; j < B * H * L * L; ++j)
      xs.push_back(floatBits(normal(rng), d));
    // The mask kernel and the scaled, masked softmax (the rank-0 -inf
    // spread over the scores is a constant of the group).
    expectBitwise(std::string("causal softmax ") + name, source,
                  {tensorOfBits(xs, d, {B, H, L, L})}, 2, 0);
  }
}

/// The GPT's attention softmax group as the step records it, every value
/// kept (the masked scores, the row maxima, the exps, the row sums and the
/// probabilities: 5 results of one kernel), for rows of 1 to 33 elements
/// in every float dtype. The mask is an input: its first row masks every
/// position (a row of -inf: maximum -inf, NaN after it), others are random;
/// the scores hold infinities and NaN. Later sweeps read the exps back from
/// the sum's scratch (DTORCH_ROW_SWEEP_REUSE), max runs as a tree over 8
/// lanes (DTORCH_ROW_TREE_MAX), and the element loops stay whole for the
/// vectorizer (DTORCH_ROW_VECTOR_LOOPS): bitwise the library's kernels.
TEST(FusedKernelsMixedTypes, MaskedSoftmaxKeepingEveryValueAnyRowLength) {
  std::mt19937_64 rng(53);
  for (const char *name : {"f32", "f64", "f16", "bf16"})
    for (int64_t L : {1, 3, 8, 32, 33}) {
      const Dtype &d = dtypeNamed(name);
      const int64_t B = 3, H = 3; // 9 x L rows: a block of 8 and a rest
      std::string ls = std::to_string(L) + "x" + std::to_string(L);
      std::string shape =
          std::to_string(B) + "x" + std::to_string(H) + "x" + ls;
      std::string kept = std::to_string(B) + "x" + std::to_string(H) + "x" +
                         std::to_string(L) + "x1";
      std::string x = tensorType(shape, name), k = tensorType(kept, name),
                  mk = tensorType(ls, "i1"), m = tensorType(shape, "i1"),
                  s = tensorType("", name);
      std::string source =
          std::string(kHeader) + "func.func @f(%x: " + x + ", %mk: " + mk +
          ") -> (" + x + ", " + k + ", " + x + ", " + k + ", " + x +
          ") {\n  %c = dtensor.full 0.25 : " + x +
          "\n  %sc = dtensor.mul %x, %c : (" + x + ", " + x + ") -> " + x +
          "\n  %ninf0 = dtensor.full 0xFFF0000000000000 : " + s +
          "\n  %mb = dtensor.broadcast_to %mk : (" + mk + ") -> " + m +
          "\n  %ninf = dtensor.broadcast_to %ninf0 : (" + s + ") -> " + x +
          "\n  %w = dtensor.where %mb, %sc, %ninf : (" + m + ", " + x + ", " +
          x + ") -> " + x + "\n  %mx = dtensor.max %w dims = [3] keepdim : (" +
          x + ") -> " + k + "\n  %mxb = dtensor.broadcast_to %mx : (" + k +
          ") -> " + x + "\n  %sh = dtensor.sub %w, %mxb : (" + x + ", " + x +
          ") -> " + x + "\n  %e = dtensor.exp %sh : (" + x + ") -> " + x +
          "\n  %sm = dtensor.sum %e dims = [3] keepdim : (" + x + ") -> " + k +
          "\n  %smb = dtensor.broadcast_to %sm : (" + k + ") -> " + x +
          "\n  %p = dtensor.div %e, %smb : (" + x + ", " + x + ") -> " + x +
          "\n  return %w, %mx, %e, %sm, %p : " + x + ", " + k + ", " + x +
          ", " + k + ", " + x + "\n}\n";
      std::normal_distribution<double> normal(0.0, 4.0);
      std::vector<uint64_t> xs, mask;
      for (int64_t j = 0; j < B * H * L * L; ++j)
        xs.push_back(floatBits(j % 29 == 5    ? INFINITY
                               : j % 31 == 7  ? -INFINITY
                               : j % 37 == 11 ? NAN
                                              : normal(rng),
                               d));
      for (int64_t j = 0; j < L * L; ++j)
        mask.push_back(j < L ? 0 : (rng() % 4 != 0));
      expectBitwise(std::string("masked softmax ") + name +
                        " L=" + std::to_string(L),
                    source,
                    {tensorOfBits(xs, d, {B, H, L, L}),
                     tensorOfBits(mask, dtypeNamed("i1"), {L, L})},
                    L == 1 ? -1 : 1, 0);
    }
}

/// Cross-entropy's target mask: `ne` on int64 targets, `where` on int64 and
/// float32, a cast of the mask to float32: one kernel.
TEST(FusedKernelsMixedTypes, CrossEntropyTargetMask) {
  std::mt19937_64 rng(47);
  const int64_t n = 515;
  std::string ti = tensorType(std::to_string(n), "i64"),
              tf = tensorType(std::to_string(n), "f32"),
              tm = tensorType(std::to_string(n), "i1"),
              si = tensorType("", "i64"), sf = tensorType("", "f32");
  std::string source =
      std::string(kHeader) + "func.func @f(%t: " + ti + ", %l: " + tf +
      ") -> (" + ti + ", " + tf + ", " + tf + ") {\n" +
      "  %ig0 = dtensor.full -100.0 : " + si +
      "\n  %ig = dtensor.broadcast_to %ig0 : (" + si + ") -> " + ti +
      "\n  %keep = dtensor.ne %t, %ig : (" + ti + ", " + ti + ") -> " + tm +
      "\n  %z0 = dtensor.full 0.0 : " + si +
      "\n  %z = dtensor.broadcast_to %z0 : (" + si + ") -> " + ti +
      "\n  %safe = dtensor.where %keep, %t, %z : (" + tm + ", " + ti + ", " +
      ti + ") -> " + ti + "\n  %nl = dtensor.neg %l : (" + tf + ") -> " + tf +
      "\n  %zf0 = dtensor.full 0.0 : " + sf +
      "\n  %zf = dtensor.broadcast_to %zf0 : (" + sf + ") -> " + tf +
      "\n  %loss = dtensor.where %keep, %nl, %zf : (" + tm + ", " + tf + ", " +
      tf + ") -> " + tf + "\n  %count = dtensor.cast %keep : (" + tm + ") -> " +
      tf + "\n  return %safe, %loss, %count : " + ti + ", " + tf + ", " + tf +
      "\n}\n";
  std::vector<uint64_t> targets, losses;
  std::uniform_int_distribution<int> cls(0, 94);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int64_t i = 0; i < n; ++i) {
    targets.push_back(static_cast<uint64_t>(
        i % 5 == 0 ? int64_t(-100) : static_cast<int64_t>(cls(rng))));
    losses.push_back(floatBits(normal(rng), dtypeNamed("f32")));
  }
  expectBitwise("cross-entropy mask", source,
                {tensorOfBits(targets, dtypeNamed("i64")),
                 tensorOfBits(losses, dtypeNamed("f32"))},
                1, 0);
}

/// A row group whose per-row values mix types: the first position of each
/// row's maximum (an argmax from `eq`, a cast, column positions and a
/// `where`), and the row's own index as a per-row iota.
TEST(FusedKernelsMixedTypes, RowGroupWithComparisonsAndPositions) {
  std::mt19937_64 rng(53);
  for (const char *name : {"f32", "f64", "f16", "bf16"}) {
    const Dtype &d = dtypeNamed(name);
    const int64_t R = 21, C = 37;
    std::string row = std::to_string(R) + "x" + std::to_string(C);
    std::string kept = std::to_string(R) + "x1";
    std::string x = tensorType(row, name), k = tensorType(kept, name),
                m = tensorType(row, "i1"), ki = tensorType(kept, "i64");
    std::string source =
        std::string(kHeader) + "func.func @f(%x: " + x + ") -> (" + k + ", " +
        k + ", " + x + ") {\n  %mx = dtensor.max %x dims = [1] keepdim : (" +
        x + ") -> " + k + "\n  %mxb = dtensor.broadcast_to %mx : (" + k +
        ") -> " + x + "\n  %hit = dtensor.eq %x, %mxb : (" + x + ", " + x +
        ") -> " + m +
        "\n  %col = dtensor.iota {dim = 1 : i64, start = 0.0 : f64, step = "
        "1.0 : f64} : () -> " +
        x + "\n  %big = dtensor.full 1000.0 : " + x +
        "\n  %pos = dtensor.where %hit, %col, %big : (" + m + ", " + x + ", " +
        x + ") -> " + x +
        "\n  %first = dtensor.min %pos dims = [1] keepdim : (" + x + ") -> " +
        k +
        "\n  %ri = dtensor.iota {dim = 0 : i64, start = 0.0 : f64, step = 2.0 "
        ": f64} : () -> " +
        ki + "\n  %rf = dtensor.cast %ri : (" + ki + ") -> " + k +
        "\n  %tag = dtensor.add %first, %rf : (" + k + ", " + k + ") -> " + k +
        "\n  %hf = dtensor.cast %hit : (" + m + ") -> " + x +
        "\n  return %first, %tag, %hf : " + k + ", " + k + ", " + x + "\n}\n";
    std::uniform_int_distribution<int> small(-3, 3);
    std::vector<uint64_t> xs;
    for (int64_t j = 0; j < R * C; ++j)
      xs.push_back(floatBits(small(rng), d)); // many ties
    expectBitwise(std::string("row argmax ") + name, source,
                  {tensorOfBits(xs, d, {R, C})}, 1, 0);
  }
}

/// A kernel of rows with positions along dim 0 computes each row range as
/// the whole kernel does (the executor splits large outputs by rows).
TEST(FusedKernelsMixedTypes, IotaRowRangesMatchTheWholeKernel) {
  std::string t = tensorType("9x5", "i64"), b = tensorType("9x5", "i1");
  std::string source =
      std::string(kHeader) + "func.func @f() -> " + b +
      " {\n  %r = dtensor.iota {dim = 0 : i64, start = 3.0 : f64, step = 7.0 "
      ": f64} : () -> " +
      t +
      "\n  %q = dtensor.iota {dim = 1 : i64, start = 0.0 : f64, step = 11.0 : "
      "f64} : () -> " +
      t + "\n  %g = dtensor.ge %r, %q : (" + t + ", " + t + ") -> " + b +
      "\n  return %g : " + b + "\n}\n";
  CompileOptions options;
  options.fuseElementwise = true;
  CompileResult result = compileModule(source, "rows.mlir", options);
  ASSERT_TRUE(result.ok) << result.error;
  wire::Program program = emitted::programsByPosition(result.functions[0])[0];
  ASSERT_EQ(program.executables_size(), 1);
  const wire::Executable &exe = program.executables(0);
  rt::GeneratedKernelFn whole = rt::loadExecutable(exe);
  rt::GeneratedRowsKernelFn rows = rt::loadExecutableRows(exe);
  ASSERT_NE(rows, nullptr);
  std::vector<uint8_t> all(45, 0xA5), cut(45, 0xA5);
  std::vector<double> scalars(std::max(1, exe.num_scalars()), 0.0);
  void *out = all.data();
  whole(nullptr, &out, scalars.data());
  out = cut.data();
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 2}, {2, 3}, {3, 9}})
    rows(nullptr, &out, scalars.data(), begin, end);
  EXPECT_EQ(all, cut);
  // And the library's values: row r holds 3 + 7r >= 11c.
  for (int64_t r = 0; r < 9; ++r)
    for (int64_t c = 0; c < 5; ++c)
      EXPECT_EQ(all[r * 5 + c], (3 + 7 * r >= 11 * c) ? 1 : 0)
          << "row " << r << " column " << c;
}

} // namespace
