//===- FusedKernelTest.cpp - generated kernels against hand-written ones -===//
//
// Every fusible kernel (rank/IR/FusibleKernels.h), for every element type
// it is fused for, is compiled twice from one dtensor program: with fusion
// (a rank.fused whose body the controller compiles to native code) and
// without (the runtime's hand-written kernels). Both programs run on the
// runtime's executor on the same random inputs and must agree: exactly for
// integers, bools and the correctly rounded float ops, within a few ulp for
// the transcendental functions. Shapes are not multiples of any vector
// width; broadcasting and chains are covered too. Then the worker's side:
// a corrupt executable, a missing symbol or a mismatched signature is an
// error, never a crash.
//
//===----------------------------------------------------------------------===//

#include "ProgramsByPosition.h"
#include "RowReductionSources.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "rank/IR/FusibleKernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace dtorch;

namespace {

struct DtypeCase {
  const char *mlir;
  wire::DType wire;
  unsigned typeBit; // rank::FusibleTypes
};

const DtypeCase kDtypes[] = {
    {"f32", wire::F32, rank::kFloatTypes},
    {"f64", wire::F64, rank::kFloatTypes},
    {"f16", wire::F16, rank::kFloatTypes},
    {"bf16", wire::BF16, rank::kFloatTypes},
    {"i32", wire::I32, rank::kIntegerTypes},
    {"i64", wire::I64, rank::kIntegerTypes},
    {"i1", wire::BOOL, rank::kBoolType},
};

std::string tensorType(const std::string &shape, const char *dtype) {
  return "!dtensor.tensor<" + shape + "x" + dtype + ", #m, [R]>";
}

/// Element i of `t` as a double.
double valueAt(const rt::Tensor &t, int64_t i) {
  switch (t.dtype()) {
  case wire::F32:
    return t.data_as<float>()[i];
  case wire::F64:
    return t.data_as<double>()[i];
  case wire::F16:
    return static_cast<float>(t.data_as<rt::Half>()[i]);
  case wire::BF16:
    return static_cast<float>(t.data_as<rt::BFloat16>()[i]);
  case wire::I32:
    return t.data_as<int32_t>()[i];
  case wire::I64:
    return static_cast<double>(t.data_as<int64_t>()[i]);
  case wire::BOOL:
    return t.data_as<bool>()[i] ? 1 : 0;
  default:
    return NAN;
  }
}

/// Random values in [lo, hi] (integers: whole numbers; bools: 0 or 1).
rt::Tensor randomTensor(const wire::TensorSpec &spec, double lo, double hi,
                        std::mt19937 &rng) {
  rt::Tensor t = rt::Tensor::emptyLike(spec);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = u(rng);
    switch (t.dtype()) {
    case wire::F32:
      t.data_as<float>()[i] = static_cast<float>(v);
      break;
    case wire::F64:
      t.data_as<double>()[i] = v;
      break;
    case wire::F16:
      t.data_as<rt::Half>()[i] = rt::Half(static_cast<float>(v));
      break;
    case wire::BF16:
      t.data_as<rt::BFloat16>()[i] = rt::BFloat16(static_cast<float>(v));
      break;
    case wire::I32:
      t.data_as<int32_t>()[i] = static_cast<int32_t>(std::lround(v * 20));
      break;
    case wire::I64:
      t.data_as<int64_t>()[i] = std::lround(v * 20);
      break;
    case wire::BOOL:
      t.data_as<bool>()[i] = v > (lo + hi) / 2;
      break;
    default:
      break;
    }
  }
  return t;
}

bool transcendental(const std::string &kernel) {
  for (const char *k : {"exp", "log", "tanh", "sigmoid", "gelu", "silu", "sin",
                        "cos", "pow", "rsqrt"})
    if (kernel == k)
      return true;
  return false;
}

/// Allowed |fused - reference| relative to max(1, |reference|).
double tolerance(wire::DType dtype, bool approximate) {
  switch (dtype) {
  case wire::F32:
    return approximate ? 4e-6 : 0;
  case wire::F64:
    return approximate ? 1e-13 : 0;
  case wire::F16:
    return approximate ? 1e-3 : 0; // one ulp of float16
  case wire::BF16:
    return approximate ? 8e-3 : 0; // one ulp of bfloat16
  default:
    return 0;
  }
}

struct RunResult {
  std::vector<rt::Tensor> outputs;
  wire::Program program;
};

RunResult compileAndRun(const std::string &source, bool fuse,
                        const std::vector<rt::Tensor> &inputs) {
  CompileOptions options;
  options.fuseElementwise = fuse;
  CompileResult result = compileModule(source, "fused.mlir", options);
  EXPECT_TRUE(result.ok) << result.error << "\n" << source;
  if (!result.ok)
    return {};
  std::vector<wire::Program> programs =
      emitted::programsByPosition(result.functions[0]);
  rt::Executor executor(nullptr);
  RunResult run;
  run.program = programs[0];
  run.outputs = executor.run(programs[0], inputs);
  return run;
}

int countOp(const wire::Program &program, const std::string &op) {
  int n = 0;
  for (const auto &inst : program.instructions())
    n += inst.op() == op;
  return n;
}

/// Compiles `source` (its function takes `inputs`) with and without fusion
/// and checks that both programs agree; the fused one must call one
/// generated kernel.
void expectFusedMatches(const std::string &source,
                        const std::vector<rt::Tensor> &inputs, double tol,
                        const std::string &what) {
  RunResult fused = compileAndRun(source, true, inputs);
  RunResult plain = compileAndRun(source, false, inputs);
  ASSERT_EQ(countOp(fused.program, "fused"), 1) << what;
  ASSERT_EQ(fused.program.executables_size(), 1) << what;
  ASSERT_EQ(countOp(plain.program, "fused"), 0) << what;
  ASSERT_LT(fused.program.instructions_size(),
            plain.program.instructions_size())
      << what;
  ASSERT_EQ(fused.outputs.size(), plain.outputs.size()) << what;
  for (size_t o = 0; o < fused.outputs.size(); ++o) {
    const rt::Tensor &f = fused.outputs[o], &p = plain.outputs[o];
    ASSERT_EQ(f.dtype(), p.dtype()) << what;
    ASSERT_EQ(f.numel(), p.numel()) << what;
    int bad = 0;
    for (int64_t i = 0; i < f.numel() && bad < 5; ++i) {
      double a = valueAt(f, i), b = valueAt(p, i);
      if (std::isnan(a) && std::isnan(b))
        continue;
      if (!(std::abs(a - b) <= tol * std::max(1.0, std::abs(b)))) {
        ++bad;
        ADD_FAILURE() << what << ": output " << o << " element " << i
                      << ": generated " << a << ", hand-written " << b;
      }
    }
  }
}

TEST(FusedKernels, EveryKernelEveryDtypeMatchesTheHandWrittenKernel) {
  std::mt19937 rng(7);
  int cases = 0;
  for (const rank::FusibleKernel &k : rank::fusibleKernels()) {
    if (k.kind != rank::FusibleKind::Elementwise)
      continue;
    for (const DtypeCase &d : kDtypes) {
      if (!(k.types & d.typeBit))
        continue;
      std::string t = tensorType("3x37", d.mlir);
      std::string args = k.numOperands == 2 ? "%a, %b" : "%a";
      std::string argTypes = k.numOperands == 2 ? t + ", " + t : t;
      // The kernel and a constant: a group of two ops with two results.
      std::string source = "#m = #dtensor.mesh<[1]>\n"
                           "func.func @f(%a: " +
                           t + ", %b: " + t + ") -> (" + t + ", " + t +
                           ") {\n"
                           "  %r = dtensor." +
                           std::string(k.name) + " " + args + " : (" +
                           argTypes + ") -> " + t +
                           "\n"
                           "  %c = dtensor.full 1.0 : " +
                           t + "\n  return %r, %c : " + t + ", " + t + "\n}\n";
      bool positive =
          std::string(k.name) == "log" || std::string(k.name) == "sqrt" ||
          std::string(k.name) == "rsqrt" || std::string(k.name) == "pow";
      wire::TensorSpec spec;
      spec.set_dtype(d.wire);
      spec.add_shape(3);
      spec.add_shape(37);
      std::vector<rt::Tensor> inputs = {
          randomTensor(spec, positive ? 0.05 : -4, 4, rng),
          randomTensor(spec, positive ? 0.05 : -4, 4, rng)};
      expectFusedMatches(source, inputs,
                         tolerance(d.wire, transcendental(std::string(k.name))),
                         std::string(k.name) + " " + d.mlir);
      ++cases;
    }
  }
  EXPECT_GE(cases, 60);
}

TEST(FusedKernels, BroadcastChainMatches) {
  // y = gelu(x * w + b) * 2 with w a row and b a column, on a shape of 1001
  // elements per row (not a multiple of any vector width).
  std::mt19937 rng(11);
  for (const char *dtype : {"f32", "f64", "f16", "bf16"}) {
    std::string x = tensorType("3x1001", dtype);
    std::string w = tensorType("1001", dtype);
    std::string b = tensorType("3x1", dtype);
    std::string source = "#m = #dtensor.mesh<[1]>\n"
                         "func.func @f(%x: " +
                         x + ", %w: " + w + ", %b: " + b + ") -> " + x +
                         " {\n"
                         "  %wb = dtensor.broadcast_to %w : (" +
                         w + ") -> " + x +
                         "\n"
                         "  %m = dtensor.mul %x, %wb : (" +
                         x + ", " + x + ") -> " + x +
                         "\n"
                         "  %bb = dtensor.broadcast_to %b : (" +
                         b + ") -> " + x +
                         "\n"
                         "  %s = dtensor.add %m, %bb : (" +
                         x + ", " + x + ") -> " + x +
                         "\n"
                         "  %g = dtensor.gelu %s : (" +
                         x + ") -> " + x +
                         "\n"
                         "  %c = dtensor.full 2.0 : " +
                         x +
                         "\n"
                         "  %y = dtensor.mul %g, %c : (" +
                         x + ", " + x + ") -> " + x + "\n  return %y : " + x +
                         "\n}\n";
    wire::DType wd = std::string(dtype) == "f32"   ? wire::F32
                     : std::string(dtype) == "f64" ? wire::F64
                     : std::string(dtype) == "f16" ? wire::F16
                                                   : wire::BF16;
    auto spec = [&](std::vector<int64_t> shape) {
      wire::TensorSpec s;
      s.set_dtype(wd);
      for (int64_t e : shape)
        s.add_shape(e);
      return s;
    };
    std::vector<rt::Tensor> inputs = {randomTensor(spec({3, 1001}), -3, 3, rng),
                                      randomTensor(spec({1001}), -2, 2, rng),
                                      randomTensor(spec({3, 1}), -1, 1, rng)};
    // Rounding after each op can move a 16-bit result by one ulp.
    expectFusedMatches(source, inputs, tolerance(wd, true),
                       std::string("gelu chain ") + dtype);
  }
}

/// A fused program compiled from a small chain (with the constant `c`), for
/// the cache and robustness tests.
wire::Program fusedProgram(double c = 2.0, const std::string &unary = "exp") {
  std::string t = tensorType("5", "f32");
  std::string source = "#m = #dtensor.mesh<[1]>\n"
                       "func.func @f(%a: " +
                       t + ") -> " + t +
                       " {\n"
                       "  %e = dtensor." +
                       unary + " %a : (" + t + ") -> " + t +
                       "\n  %c = dtensor.full " + std::to_string(c) + " : " +
                       t + "\n  %n = dtensor.mul %e, %c : (" + t + ", " + t +
                       ") -> " + t + "\n  return %n : " + t + "\n}\n";
  CompileOptions options;
  options.fuseElementwise = true;
  CompileResult result = compileModule(source, "small.mlir", options);
  EXPECT_TRUE(result.ok) << result.error;
  return emitted::programsByPosition(result.functions[0])[0];
}

TEST(FusedKernels, KernelsDifferingOnlyInConstantsAreCompiledOnce) {
  wire::Program first = fusedProgram(2.0);
  int64_t compiles = generatedKernelCompiles();
  wire::Program second = fusedProgram(2.0);
  wire::Program third = fusedProgram(-3.5);
  EXPECT_EQ(generatedKernelCompiles(), compiles);
  ASSERT_EQ(first.executables_size(), 1);
  EXPECT_EQ(first.executables(0).content_hash(),
            third.executables(0).content_hash());
  EXPECT_EQ(first.executables(0).num_scalars(), 1);
  // The constant travels with the call, and the kernel uses it.
  rt::Executor executor(nullptr);
  wire::TensorSpec spec;
  spec.set_dtype(wire::F32);
  spec.add_shape(5);
  rt::Tensor a = rt::Tensor::emptyLike(spec);
  for (int i = 0; i < 5; ++i)
    a.data_as<float>()[i] = 0.25f * i;
  rt::Tensor y2 = executor.run(second, {a})[0];
  rt::Tensor y3 = executor.run(third, {a})[0];
  for (int i = 0; i < 5; ++i) {
    EXPECT_NEAR(y2.data_as<float>()[i], 2.0 * std::exp(0.25 * i), 1e-5);
    EXPECT_NEAR(y3.data_as<float>()[i], -3.5 * std::exp(0.25 * i), 1e-5);
  }
}

TEST(FusedKernels, ACorruptExecutableIsAnError) {
  // A kernel this process has not loaded yet (a loaded one is known by its
  // hash: the worker keeps using its own copy).
  wire::Program program = fusedProgram(2.0, "sqrt");
  ASSERT_EQ(program.executables_size(), 1);
  rt::Executor executor(nullptr);
  // Bytes that do not match the declared hash.
  wire::Program tampered = program;
  std::string *object = tampered.mutable_executables(0)->mutable_object();
  (*object)[object->size() / 2] ^= 0x5a;
  EXPECT_THROW(executor.validate(tampered), rt::RuntimeError);
  // Bytes that match their hash but are not a shared object.
  wire::Program garbage = program;
  garbage.mutable_executables(0)->set_object("not an ELF file at all");
  garbage.mutable_executables(0)->set_content_hash(
      rt::executableHash("not an ELF file at all"));
  try {
    executor.validate(garbage);
    ADD_FAILURE() << "a non-ELF executable loaded";
  } catch (const rt::RuntimeError &error) {
    EXPECT_NE(std::string(error.what()).find("cannot be loaded"),
              std::string::npos)
        << error.what();
  }
}

TEST(FusedKernels, AMissingSymbolIsAnError) {
  wire::Program program = fusedProgram();
  program.mutable_executables(0)->set_symbol("no_such_kernel");
  rt::Executor executor(nullptr);
  try {
    executor.validate(program);
    ADD_FAILURE() << "a missing symbol was accepted";
  } catch (const rt::RuntimeError &error) {
    EXPECT_NE(std::string(error.what()).find("no_such_kernel"),
              std::string::npos)
        << error.what();
  }
}

TEST(FusedKernels, TheValidatorChecksTheSignature) {
  wire::Program program = fusedProgram();
  rt::Executor executor(nullptr);
  EXPECT_NO_THROW(executor.validate(program));
  wire::Program wrongShape = program;
  wrongShape.mutable_executables(0)->mutable_inputs(0)->set_shape(0, 6);
  EXPECT_THROW(executor.validate(wrongShape), rt::RuntimeError);
  wire::Program wrongDtype = program;
  wrongDtype.mutable_executables(0)->mutable_outputs(0)->set_dtype(wire::F64);
  EXPECT_THROW(executor.validate(wrongDtype), rt::RuntimeError);
  wire::Program wrongScalars = program;
  for (auto &inst : *wrongScalars.mutable_instructions())
    if (inst.op() == "fused")
      (*inst.mutable_attrs())["scalars"].set_data("1234");
  EXPECT_THROW(executor.validate(wrongScalars), rt::RuntimeError);
  wire::Program wrongIndex = program;
  for (auto &inst : *wrongIndex.mutable_instructions())
    if (inst.op() == "fused")
      inst.set_executable(3);
  EXPECT_THROW(executor.validate(wrongIndex), rt::RuntimeError);
}

} // namespace

// ---- groups that end in row reductions --------------------------------===//

namespace {

wire::DType wireDtypeOf(const std::string &dtype) {
  for (const DtypeCase &d : kDtypes)
    if (dtype == d.mlir)
      return d.wire;
  return wire::F32;
}

wire::TensorSpec specOf(wire::DType dtype, std::vector<int64_t> shape) {
  wire::TensorSpec s;
  s.set_dtype(dtype);
  for (int64_t e : shape)
    s.add_shape(e);
  return s;
}

/// Fused and unfused runs of `source` give the same bytes in every output;
/// a NaN equals any NaN (IEEE leaves the sign and payload of an arithmetic
/// op's NaN open, and the 16-bit conversions differ there).
void expectBitwiseEqual(const std::string &source,
                        const std::vector<rt::Tensor> &inputs,
                        const std::string &what,
                        std::vector<rt::Tensor> *fusedOutputs = nullptr) {
  RunResult fused = compileAndRun(source, true, inputs);
  RunResult plain = compileAndRun(source, false, inputs);
  if (fusedOutputs)
    *fusedOutputs = fused.outputs;
  ASSERT_GE(countOp(fused.program, "fused"), 1) << what;
  ASSERT_EQ(countOp(plain.program, "fused"), 0) << what;
  ASSERT_LT(fused.program.instructions_size(),
            plain.program.instructions_size())
      << what;
  ASSERT_EQ(fused.outputs.size(), plain.outputs.size()) << what;
  for (size_t o = 0; o < fused.outputs.size(); ++o) {
    const rt::Tensor &f = fused.outputs[o], &p = plain.outputs[o];
    ASSERT_EQ(f.dtype(), p.dtype()) << what;
    ASSERT_EQ(f.numel(), p.numel()) << what;
    int64_t width =
        f.numel() == 0 ? 1 : static_cast<int64_t>(f.nbytes()) / f.numel();
    int bad = 0;
    for (int64_t i = 0; i < f.numel() && bad < 5; ++i)
      if (!(std::isnan(valueAt(f, i)) && std::isnan(valueAt(p, i))) &&
          std::memcmp(static_cast<const char *>(f.data()) + i * width,
                      static_cast<const char *>(p.data()) + i * width,
                      static_cast<size_t>(width)) != 0) {
        ++bad;
        ADD_FAILURE() << what << ": output " << o << " element " << i
                      << ": generated " << valueAt(f, i) << ", hand-written "
                      << valueAt(p, i);
      }
  }
}

} // namespace

using namespace dtorch::row_sources;

TEST(FusedRowReductions, LayerNormIsBitwiseTheLibrarys) {
  std::mt19937 rng(21);
  for (const char *dtype : kFloatDtypes)
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{19, 37},
                           {3, 1001},
                           {8, 64},
                           {1, 5},
                           {9, 2500}}) {
      wire::DType wd = wireDtypeOf(dtype);
      std::vector<rt::Tensor> inputs = {
          randomTensor(specOf(wd, {rows, n}), -3, 5, rng),
          randomTensor(specOf(wd, {n}), -2, 2, rng),
          randomTensor(specOf(wd, {n}), -1, 1, rng)};
      expectBitwiseEqual(layerNormSource(dtype, rows, n), inputs,
                         std::string("layer_norm ") + dtype + " " +
                             std::to_string(rows) + "x" + std::to_string(n));
    }
}

TEST(FusedRowReductions, SoftmaxReductionsKeepTheLibrarysOrder) {
  // With `neg` for exp every op is correctly rounded in both forms, so the
  // results are equal bit for bit only if each row is reduced in the
  // library's order (rows longer than the generator's chunk included).
  std::mt19937 rng(22);
  for (const char *dtype : kFloatDtypes)
    for (auto [rows, n] :
         {std::pair<int64_t, int64_t>{19, 37}, {17, 1001}, {2, 3}, {3, 3001}}) {
      wire::DType wd = wireDtypeOf(dtype);
      std::vector<rt::Tensor> inputs = {
          randomTensor(specOf(wd, {rows, n}), -1e3, 1e3, rng)};
      expectBitwiseEqual(softmaxSource(dtype, rows, n, "neg"), inputs,
                         std::string("softmax(neg) ") + dtype);
    }
}

TEST(FusedRowReductions, SoftmaxMatchesTheLibrary) {
  // exp: float64 calls libm in both forms; the float32 family uses the
  // polynomial exp the runtime's kernel computes operation for operation
  // (PolynomialMath.h), so every dtype is bitwise.
  std::mt19937 rng(23);
  for (const char *dtype : kFloatDtypes) {
    wire::DType wd = wireDtypeOf(dtype);
    std::vector<rt::Tensor> inputs = {
        randomTensor(specOf(wd, {19, 129}), -8, 8, rng)};
    expectBitwiseEqual(softmaxSource(dtype, 19, 129, "exp"), inputs,
                       std::string("softmax ") + dtype);
  }
}

TEST(FusedRowReductions, LogSoftmaxOverTwoDimsWithDroppedResults) {
  std::mt19937 rng(24);
  for (const char *dtype : kFloatDtypes) {
    wire::DType wd = wireDtypeOf(dtype);
    std::vector<rt::Tensor> inputs = {
        randomTensor(specOf(wd, {2, 9, 3, 11}), -6, 6, rng)};
    expectBitwiseEqual(logSoftmaxSource(dtype, 9, 11), inputs,
                       std::string("log_softmax ") + dtype);
  }
}

TEST(FusedRowReductions, MaxAndMinKeepSignedZerosAndNaNLikeTheLibrary) {
  // Rows of -0/+0 in either order, NaN first, last and in the middle, and
  // infinities: the first of equal values and the first NaN win.
  for (const char *dtype : kFloatDtypes) {
    wire::DType wd = wireDtypeOf(dtype);
    Source s{dtype, {}};
    std::string row = s.type("6x4"), kept = s.type("6x1");
    std::string hi = s.reduce("max", "%x", "1", true, row, kept);
    std::string lo = s.reduce("min", "%x", "1", true, row, kept);
    std::string y =
        s.binary("add", s.binary("mul", "%x", s.broadcast(hi, kept, row), row),
                 s.broadcast(lo, kept, row), row);
    std::string source =
        s.function("%x: " + row, {{y, row}, {hi, kept}, {lo, kept}});
    const double inf = INFINITY, nan = NAN;
    const double rows[6][4] = {{-0.0, 0.0, -0.0, 0.0}, {0.0, -0.0, 0.0, -0.0},
                               {nan, 1, 2, 3},         {1, 2, 3, nan},
                               {-inf, nan, inf, -nan}, {-inf, -inf, inf, 5}};
    rt::Tensor x = rt::Tensor::emptyLike(specOf(wd, {6, 4}));
    for (int i = 0; i < 24; ++i) {
      double v = rows[i / 4][i % 4];
      switch (wd) {
      case wire::F32:
        x.data_as<float>()[i] = static_cast<float>(v);
        break;
      case wire::F64:
        x.data_as<double>()[i] = v;
        break;
      case wire::F16:
        x.data_as<rt::Half>()[i] = rt::Half(static_cast<float>(v));
        break;
      default:
        x.data_as<rt::BFloat16>()[i] = rt::BFloat16(static_cast<float>(v));
        break;
      }
    }
    expectBitwiseEqual(source, {x}, std::string("max/min ") + dtype);
  }
}

TEST(FusedRowReductions, TheFusionPassGroupsARowReductionWithItsChain) {
  // softmax: max, broadcast, sub, exp, sum, broadcast, div in one kernel.
  std::string source = softmaxSource("f32", 4, 8, "exp");
  CompileOptions options;
  options.fuseElementwise = true;
  CompileResult result = compileModule(source, "softmax.mlir", options);
  ASSERT_TRUE(result.ok) << result.error;
  wire::Program program = emitted::programsByPosition(result.functions[0])[0];
  EXPECT_EQ(countOp(program, "fused"), 1);
  EXPECT_EQ(countOp(program, "sum"), 0);
  EXPECT_EQ(countOp(program, "max"), 0);
  EXPECT_EQ(program.executables_size(), 1);
}

// Blocks of 8 float32 rows reduce on vectors of the 8 rows (8 elements of
// each row transposed in registers; DTORCH_ROW_LANE_VECTORS): rows of
// 8-multiples and of tails after them, chunks longer than the generator's,
// and rows whose maxima, minima and sums depend on the order of their
// elements (NaN first, in the middle and last, -0 and +0 in either order,
// infinities, 1e30 and -1e30): bitwise the library's, which reduces each
// row in increasing order.
TEST(FusedRowReductions, LaneVectorBlocksKeepEachRowsOrder) {
  std::mt19937 rng(25);
  for (auto [rows, n] : {std::pair<int64_t, int64_t>{16, 8},
                         {19, 21},
                         {24, 64},
                         {8, 1033},
                         {17, 3}}) {
    Source s{"f32", {}};
    std::string shape = std::to_string(rows) + "x" + std::to_string(n);
    std::string row = s.type(shape), kept = s.type(std::to_string(rows) + "x1");
    std::string hi = s.reduce("max", "%x", "1", true, row, kept);
    std::string lo = s.reduce("min", "%x", "1", true, row, kept);
    std::string total = s.reduce("sum", "%x", "1", true, row, kept);
    std::string y =
        s.binary("add", s.binary("mul", "%x", s.broadcast(hi, kept, row), row),
                 s.binary("mul", s.broadcast(lo, kept, row),
                          s.broadcast(total, kept, row), row),
                 row);
    std::string source = s.function(
        "%x: " + row, {{y, row}, {hi, kept}, {lo, kept}, {total, kept}});
    rt::Tensor x = randomTensor(specOf(wire::F32, {rows, n}), -1e3, 1e3, rng);
    float *v = x.data_as<float>();
    std::uniform_int_distribution<int64_t> at(0, rows * n - 1);
    const float specials[] = {NAN,       -0.0f, 0.0f,  INFINITY,
                              -INFINITY, 1e30f, -1e30f};
    for (int i = 0; i < rows * n / 3; ++i)
      v[at(rng)] = specials[i % 7];
    // Whole rows of signed zeros, in both orders, and a NaN at a row's
    // first and last element.
    for (int64_t j = 0; j < n; ++j) {
      v[j] = j % 2 ? 0.0f : -0.0f;
      v[n + j] = j % 2 ? -0.0f : 0.0f;
    }
    v[2 * n] = NAN;
    v[4 * n - 1] = NAN;
    expectBitwiseEqual(source, {x}, "max/min/sum lanes " + shape);
  }
}

namespace {

/// Exit status of this test binary run again in a child process with
/// `name`=`value` in its environment and only `test` selected (a switch
/// read once per process takes its other setting there).
int rerunWith(const char *name, const char *value, const std::string &test) {
  pid_t child = fork();
  if (child == 0) {
    setenv(name, value, 1);
    std::string filter = "--gtest_filter=" + test;
    char self[] = "/proc/self/exe";
    char *argv[] = {self, filter.data(), nullptr};
    execv(self, argv);
    _exit(127);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child)
    return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/// Every element of `got` (float32) within `tol` of `want` (float64),
/// relative to max(1, |want|).
void expectNear(const rt::Tensor &got, const std::vector<double> &want,
                double tol, const std::string &what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.numel() && bad < 5; ++i) {
    double a = valueAt(got, i), b = want[i];
    if (!(std::abs(a - b) <= tol * std::max(1.0, std::abs(b)))) {
      ++bad;
      ADD_FAILURE() << what << ": element " << i << ": generated " << a
                    << ", float64 reference " << b;
    }
  }
}

/// For each row of `x` [rows, n] (float32), `f(row pointer, n, out)`
/// appends the row's reference values to `out`.
std::vector<double>
perRow(const rt::Tensor &x, int64_t rows, int64_t n,
       const std::function<void(const float *, int64_t, int64_t,
                                std::vector<double> &)> &f) {
  std::vector<double> out;
  for (int64_t r = 0; r < rows; ++r)
    f(x.data_as<float>() + r * n, r, n, out);
  return out;
}

/// max and log(sum(exp(x - max))) of a row, in float64.
std::pair<double, double> maxAndLogSumExp(const float *x, int64_t n) {
  double m = -INFINITY, total = 0;
  for (int64_t j = 0; j < n; ++j)
    m = std::max(m, static_cast<double>(x[j]));
  for (int64_t j = 0; j < n; ++j)
    total += std::exp(x[j] - m);
  return {m, std::log(total)};
}

} // namespace

// Rows whose length is and is not a multiple of the 8-element vectors of
// the lane reductions (1, 7, 8, 9, 1000 and GPT-2's 50257 classes), with
// masked vector tails (DTORCH_ROW_MASKED_TAILS, the default) and, in a
// child process, without: softmax, layer_norm, cross-entropy and its
// gradient are bitwise the library's either way (the tail's padding
// changes no accumulator) and within float32 tolerance of a float64
// reference. 19 rows: two blocks of 8 and 3 rows one by one.
TEST(FusedRowReductions, MaskedTailsAnyRowLength) {
  const char *switchName = "DTORCH_ROW_MASKED_TAILS";
  bool masked =
      !(std::getenv(switchName) && std::string(std::getenv(switchName)) == "0");
  ASSERT_NE(compilerConfiguration().find(masked ? "row_masked_tails=1"
                                                : "row_masked_tails=0"),
            std::string::npos);
  const double tol = tolerance(wire::F32, true);
  std::mt19937 rng(26);
  for (int64_t n : {1, 7, 8, 9, 1000, 50257}) {
    int64_t rows = n > 1000 ? 9 : 19;
    std::string what = std::string(masked ? "masked" : "scalar") + " tails, " +
                       std::to_string(rows) + "x" + std::to_string(n) + ": ";
    rt::Tensor x = randomTensor(specOf(wire::F32, {rows, n}), -8, 8, rng);
    // One-hot targets, one class per row.
    rt::Tensor t = rt::Tensor::emptyLike(specOf(wire::F32, {rows, n}));
    std::vector<int64_t> target(rows);
    for (int64_t r = 0; r < rows; ++r) {
      target[r] = static_cast<int64_t>(rng() % n);
      for (int64_t j = 0; j < n; ++j)
        t.data_as<float>()[r * n + j] = j == target[r] ? 1.0f : 0.0f;
    }
    rt::Tensor g = randomTensor(specOf(wire::F32, {rows, 1}), -1, 1, rng);
    rt::Tensor w = randomTensor(specOf(wire::F32, {n}), -2, 2, rng);
    rt::Tensor bias = randomTensor(specOf(wire::F32, {n}), -1, 1, rng);
    std::vector<rt::Tensor> out;
    // The float64 log-probabilities of x's rows: softmax, cross-entropy
    // and its gradient follow from them.
    std::vector<double> logp = perRow(
        x, rows, n,
        [](const float *v, int64_t, int64_t len, std::vector<double> &o) {
          auto [m, lse] = maxAndLogSumExp(v, len);
          for (int64_t j = 0; j < len; ++j)
            o.push_back(v[j] - m - lse);
        });
    std::vector<double> probabilities, loss, gradient;
    for (int64_t i = 0; i < rows * n; ++i) {
      probabilities.push_back(std::exp(logp[i]));
      gradient.push_back((probabilities.back() - t.data_as<float>()[i]) *
                         g.data_as<float>()[i / n]);
    }
    for (int64_t r = 0; r < rows; ++r)
      loss.push_back(-logp[r * n + target[r]]);

    expectBitwiseEqual(softmaxSource("f32", rows, n, "exp"), {x},
                       what + "softmax", &out);
    ASSERT_EQ(out.size(), 1u);
    expectNear(out[0], probabilities, tol, what + "softmax");

    expectBitwiseEqual(layerNormSource("f32", rows, n), {x, w, bias},
                       what + "layer_norm", &out);
    ASSERT_EQ(out.size(), 2u);
    const float *wv = w.data_as<float>(), *bv = bias.data_as<float>();
    expectNear(out[0],
               perRow(x, rows, n,
                      [&](const float *v, int64_t, int64_t len,
                          std::vector<double> &o) {
                        double mean = 0, var = 0;
                        for (int64_t j = 0; j < len; ++j)
                          mean += v[j];
                        mean /= len;
                        for (int64_t j = 0; j < len; ++j)
                          var += (v[j] - mean) * (v[j] - mean);
                        var /= len;
                        for (int64_t j = 0; j < len; ++j)
                          o.push_back((v[j] - mean) / std::sqrt(var + 1e-5) *
                                          wv[j] +
                                      bv[j]);
                      }),
               // float32 rounding of centered values divided by a small
               // standard deviation (rows of 1: 0 / sqrt(1e-5)).
               16 * tol, what + "layer_norm");

    expectBitwiseEqual(crossEntropySource("f32", rows, n), {x, t},
                       what + "cross_entropy", &out);
    ASSERT_EQ(out.size(), 2u);
    expectNear(out[0], loss, tol, what + "cross_entropy loss");
    expectNear(out[1], logp, tol, what + "cross_entropy log-probabilities");

    expectBitwiseEqual(crossEntropyBackwardSource("f32", rows, n), {x, t, g},
                       what + "cross_entropy backward", &out);
    ASSERT_EQ(out.size(), 1u);
    expectNear(out[0], gradient, tol, what + "cross_entropy gradient");
  }
  if (masked && !std::getenv(switchName))
    EXPECT_EQ(rerunWith(switchName, "0",
                        "FusedRowReductions.MaskedTailsAnyRowLength"),
              0)
        << "the same checks with " << switchName << "=0 failed";
}
