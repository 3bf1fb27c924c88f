// Every CPU kernel against a straightforward reference, run through the
// executor as a one-instruction program.
#include "KernelTestSupport.h"

#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/Shape.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace dtorch::rt::test {
namespace {

template <class C> class FloatKernels : public ::testing::Test {};
TYPED_TEST_SUITE(FloatKernels, FloatCases);

template <class C> class NumericKernels : public ::testing::Test {};
TYPED_TEST_SUITE(NumericKernels, NumericCases);

template <class C> class AllKernels : public ::testing::Test {};
TYPED_TEST_SUITE(AllKernels, AllCases);

double sigmoidRef(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TYPED_TEST(FloatKernels, Unary) {
  using T = typename TypeParam::T;
  struct UnaryCase {
    const char *op;
    double low, high;
    double (*ref)(double);
  };
  const UnaryCase cases[] = {
      {"neg", -3, 3, [](double x) { return -x; }},
      {"abs", -3, 3, [](double x) { return std::abs(x); }},
      {"exp", -3, 3, [](double x) { return std::exp(x); }},
      {"log", 0.1, 5, [](double x) { return std::log(x); }},
      {"sqrt", 0, 5, [](double x) { return std::sqrt(x); }},
      {"rsqrt", 0.1, 5, [](double x) { return 1.0 / std::sqrt(x); }},
      {"relu", -3, 3, [](double x) { return x > 0 ? x : 0.0; }},
      {"tanh", -3, 3, [](double x) { return std::tanh(x); }},
      {"sigmoid", -8, 8, sigmoidRef},
      {"gelu", -4, 4,
       [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }},
      {"silu", -6, 6, [](double x) { return x * sigmoidRef(x); }},
      {"sin", -3, 3, [](double x) { return std::sin(x); }},
      {"cos", -3, 3, [](double x) { return std::cos(x); }},
  };
  for (const auto &c : cases) {
    std::vector<T> xs = randomValues<T>(24, c.low, c.high);
    std::vector<double> want;
    for (T x : xs)
      want.push_back(c.ref(static_cast<double>(x)));
    Tensor out = runKernel(c.op, {makeTensor<T>(TypeParam::dtype, {4, 6}, xs)},
                           TypeParam::dtype, {4, 6});
    expectClose(valuesOf<T>(out), want, TypeParam::tol, c.op);
  }
}

TYPED_TEST(FloatKernels, Binary) {
  using T = typename TypeParam::T;
  struct BinaryCase {
    const char *op;
    double low, high;
    double (*ref)(double, double);
  };
  const BinaryCase cases[] = {
      {"add", -3, 3, [](double a, double b) { return a + b; }},
      {"sub", -3, 3, [](double a, double b) { return a - b; }},
      {"mul", -3, 3, [](double a, double b) { return a * b; }},
      {"div", 0.5, 3, [](double a, double b) { return a / b; }},
      {"maximum", -3, 3, [](double a, double b) { return std::max(a, b); }},
      {"minimum", -3, 3, [](double a, double b) { return std::min(a, b); }},
      {"pow", 0.1, 3, [](double a, double b) { return std::pow(a, b); }},
  };
  for (const auto &c : cases) {
    std::vector<T> as = randomValues<T>(15, c.low, c.high, 1);
    std::vector<T> bs = randomValues<T>(15, c.low, c.high, 2);
    std::vector<double> want;
    for (size_t i = 0; i < as.size(); ++i)
      want.push_back(c.ref(as[i], bs[i]));
    Tensor out = runKernel(c.op,
                           {makeTensor<T>(TypeParam::dtype, {3, 5}, as),
                            makeTensor<T>(TypeParam::dtype, {3, 5}, bs)},
                           TypeParam::dtype, {3, 5});
    expectClose(valuesOf<T>(out), want, TypeParam::tol, c.op);
  }
  // maximum / minimum propagate NaN like torch.
  T nan = nanOf<T>();
  Tensor out = runKernel("maximum",
                         {makeTensor<T>(TypeParam::dtype, {2}, {nan, 1}),
                          makeTensor<T>(TypeParam::dtype, {2}, {0, nan})},
                         TypeParam::dtype, {2});
  EXPECT_TRUE(std::isnan(valuesOf<T>(out)[0]));
  EXPECT_TRUE(std::isnan(valuesOf<T>(out)[1]));
}

template <class C> class IntegerKernels : public ::testing::Test {};
TYPED_TEST_SUITE(IntegerKernels, IntegerCases);

TYPED_TEST(IntegerKernels, Unary) {
  using T = typename TypeParam::T;
  std::vector<T> xs = {-5, -1, 0, 3, 9, std::numeric_limits<T>::min()};
  auto run = [&](const char *op) {
    return valuesOf<T>(runKernel(op, {makeTensor<T>(TypeParam::dtype, {6}, xs)},
                                 TypeParam::dtype, {6}));
  };
  T lowest = std::numeric_limits<T>::min();
  EXPECT_EQ(run("neg"), (std::vector<T>{5, 1, 0, -3, -9, lowest})); // wraps
  EXPECT_EQ(run("abs"), (std::vector<T>{5, 1, 0, 3, 9, lowest}));
  EXPECT_EQ(run("relu"), (std::vector<T>{0, 0, 0, 3, 9, 0}));
}

TYPED_TEST(IntegerKernels, Binary) {
  using T = typename TypeParam::T;
  std::vector<T> as = {7, -7, 7, -7, 0, 3};
  std::vector<T> bs = {2, 2, -2, -2, 5, 4};
  auto run = [&](const char *op) {
    return valuesOf<T>(runKernel(op,
                                 {makeTensor<T>(TypeParam::dtype, {2, 3}, as),
                                  makeTensor<T>(TypeParam::dtype, {2, 3}, bs)},
                                 TypeParam::dtype, {2, 3}));
  };
  EXPECT_EQ(run("add"), (std::vector<T>{9, -5, 5, -9, 5, 7}));
  EXPECT_EQ(run("sub"), (std::vector<T>{5, -9, 9, -5, -5, -1}));
  EXPECT_EQ(run("mul"), (std::vector<T>{14, -14, -14, 14, 0, 12}));
  EXPECT_EQ(run("div"), (std::vector<T>{3, -4, -4, 3, 0, 0})); // floor division
  EXPECT_EQ(run("maximum"), (std::vector<T>{7, 2, 7, -2, 5, 4}));
  EXPECT_EQ(run("minimum"), (std::vector<T>{2, -7, -2, -7, 0, 3}));
  auto pow = valuesOf<T>(
      runKernel("pow",
                {makeTensor<T>(TypeParam::dtype, {4}, {2, -3, 1, -1}),
                 makeTensor<T>(TypeParam::dtype, {4}, {10, 3, -5, -3})},
                TypeParam::dtype, {4}));
  EXPECT_EQ(pow, (std::vector<T>{1024, -27, 1, -1}));
  expectRuntimeError(
      [&] {
        runKernel("pow",
                  {makeTensor<T>(TypeParam::dtype, {1}, {2}),
                   makeTensor<T>(TypeParam::dtype, {1}, {-1})},
                  TypeParam::dtype, {1});
      },
      {"negative exponent"});
}

TYPED_TEST(IntegerKernels, DivisionByZeroIsAnError) {
  using T = typename TypeParam::T;
  expectRuntimeError(
      [&] {
        runKernel("div",
                  {makeTensor<T>(TypeParam::dtype, {2}, {1, 2}),
                   makeTensor<T>(TypeParam::dtype, {2}, {1, 0})},
                  TypeParam::dtype, {2});
      },
      {"instruction 0", "'div'", "test.py:1", "division by zero"});
}

TYPED_TEST(IntegerKernels, FloatOnlyOpsAreNotRegistered) {
  using T = typename TypeParam::T;
  expectRuntimeError(
      [&] {
        runKernel("exp", {makeTensor<T>(TypeParam::dtype, {1}, {1})},
                  TypeParam::dtype, {1});
      },
      {"'exp'",
       std::string("no cpu kernel for ") + dtypeName(TypeParam::dtype)});
}

TEST(BoolKernels, MaximumMinimum) {
  Tensor a = makeTensor<bool>(BOOL, {4}, {false, false, true, true});
  Tensor b = makeTensor<bool>(BOOL, {4}, {false, true, false, true});
  EXPECT_EQ(valuesOf<bool>(runKernel("maximum", {a, b}, BOOL, {4})),
            (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(valuesOf<bool>(runKernel("minimum", {a, b}, BOOL, {4})),
            (std::vector<bool>{false, false, false, true}));
}

template <class T>
std::vector<double> referenceMatmul(const std::vector<T> &a,
                                    const std::vector<T> &b, int64_t m,
                                    int64_t k, int64_t n) {
  std::vector<double> out(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        out[i * n + j] += static_cast<double>(a[i * k + p]) *
                          static_cast<double>(b[p * n + j]);
  return out;
}

TYPED_TEST(NumericKernels, Matmul) {
  using T = typename TypeParam::T;
  const int64_t shapes[][3] = {
      {3, 5, 4}, {1, 1, 1}, {7, 2, 9}, {2, 0, 3}, {0, 4, 3}};
  for (const auto &s : shapes) {
    int64_t m = s[0], k = s[1], n = s[2];
    std::vector<T> a = randomValues<T>(m * k, -5, 5, 3);
    std::vector<T> b = randomValues<T>(k * n, -5, 5, 4);
    Tensor out = runKernel("matmul",
                           {makeTensor<T>(TypeParam::dtype, {m, k}, a),
                            makeTensor<T>(TypeParam::dtype, {k, n}, b)},
                           TypeParam::dtype, {m, n});
    expectClose(valuesOf<T>(out), referenceMatmul(a, b, m, k, n),
                TypeParam::tol * 10, "matmul");
  }
  expectRuntimeError(
      [] {
        runKernel("matmul",
                  {Tensor::empty(TypeParam::dtype, {2, 3}),
                   Tensor::empty(TypeParam::dtype, {4, 2})},
                  TypeParam::dtype, {2, 2});
      },
      {"matmul shapes [2, 3] x [4, 2]"});
}

TYPED_TEST(NumericKernels, Bmm) {
  using T = typename TypeParam::T;
  int64_t batch = 3, m = 2, k = 4, n = 5;
  std::vector<T> a = randomValues<T>(batch * m * k, -5, 5, 5);
  std::vector<T> b = randomValues<T>(batch * k * n, -5, 5, 6);
  Tensor out = runKernel("bmm",
                         {makeTensor<T>(TypeParam::dtype, {batch, m, k}, a),
                          makeTensor<T>(TypeParam::dtype, {batch, k, n}, b)},
                         TypeParam::dtype, {batch, m, n});
  std::vector<double> want;
  for (int64_t i = 0; i < batch; ++i) {
    std::vector<T> ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
    std::vector<T> bi(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
    auto part = referenceMatmul(ai, bi, m, k, n);
    want.insert(want.end(), part.begin(), part.end());
  }
  expectClose(valuesOf<T>(out), want, TypeParam::tol * 10, "bmm");
}

// Two batch dims [2, 3] run as 6 products; mismatched batch dims are refused.
TYPED_TEST(NumericKernels, BmmWithTwoBatchDims) {
  using T = typename TypeParam::T;
  int64_t b0 = 2, b1 = 3, m = 2, k = 4, n = 3;
  std::vector<T> a = randomValues<T>(b0 * b1 * m * k, -5, 5, 7);
  std::vector<T> b = randomValues<T>(b0 * b1 * k * n, -5, 5, 8);
  Tensor out = runKernel("bmm",
                         {makeTensor<T>(TypeParam::dtype, {b0, b1, m, k}, a),
                          makeTensor<T>(TypeParam::dtype, {b0, b1, k, n}, b)},
                         TypeParam::dtype, {b0, b1, m, n});
  std::vector<double> want;
  for (int64_t i = 0; i < b0 * b1; ++i) {
    std::vector<T> ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
    std::vector<T> bi(b.begin() + i * k * n, b.begin() + (i + 1) * k * n);
    auto part = referenceMatmul(ai, bi, m, k, n);
    want.insert(want.end(), part.begin(), part.end());
  }
  expectClose(valuesOf<T>(out), want, TypeParam::tol * 10, "bmm 4-D");
  expectRuntimeError(
      [] {
        runKernel("bmm",
                  {Tensor::empty(TypeParam::dtype, {2, 3, 2, 4}),
                   Tensor::empty(TypeParam::dtype, {2, 2, 4, 3})},
                  TypeParam::dtype, {2, 3, 2, 3});
      },
      {"bmm shapes [2, 3, 2, 4] x [2, 2, 4, 3]"});
}

// Reference reduction of a [2, 3, 4] tensor over `mask` (sum or max).
template <class T>
std::vector<double> referenceReduce(const std::vector<T> &x,
                                    const std::vector<bool> &mask, bool isMax) {
  const int64_t shape[3] = {2, 3, 4};
  int64_t outShape[3];
  for (int d = 0; d < 3; ++d)
    outShape[d] = mask[d] ? 1 : shape[d];
  std::vector<double> out(outShape[0] * outShape[1] * outShape[2],
                          isMax ? -std::numeric_limits<double>::infinity()
                                : 0.0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t l = 0; l < 4; ++l) {
        int64_t oi = mask[0] ? 0 : i, oj = mask[1] ? 0 : j,
                ol = mask[2] ? 0 : l;
        double &slot = out[(oi * outShape[1] + oj) * outShape[2] + ol];
        double v = static_cast<double>(x[(i * 3 + j) * 4 + l]);
        slot = isMax ? std::max(slot, v) : slot + v;
      }
  return out;
}

struct ReductionCase {
  std::vector<int64_t> dims; // empty: attribute absent (all dims)
  bool keepdim;
  std::vector<bool> mask;
  Shape outShape;
};

const ReductionCase kReductionCases[] = {
    {{1}, false, {false, true, false}, {2, 4}},
    {{0, 2}, true, {true, false, true}, {1, 3, 1}},
    {{-1}, false, {false, false, true}, {2, 3}},
    {{}, false, {true, true, true}, {}},
    {{}, true, {true, true, true}, {1, 1, 1}},
};

TYPED_TEST(NumericKernels, Sum) {
  using T = typename TypeParam::T;
  std::vector<T> xs = randomValues<T>(24, -9, 9, 8);
  Tensor x = makeTensor<T>(TypeParam::dtype, {2, 3, 4}, xs);
  for (const auto &c : kReductionCases) {
    for (double scale : {1.0, 0.25}) {
      if (std::is_integral_v<T> && scale != 1.0)
        continue;
      Tensor out = runKernel("sum", {x}, TypeParam::dtype, c.outShape,
                             [&](Instruction &inst) {
                               if (!c.dims.empty())
                                 setInts(inst, "dims", c.dims);
                               setInt(inst, "keepdim", c.keepdim);
                               if (scale != 1.0)
                                 setFloat(inst, "scale", scale);
                             });
      std::vector<double> want = referenceReduce(xs, c.mask, false);
      for (double &w : want)
        w *= scale;
      expectClose(valuesOf<T>(out), want, TypeParam::tol * 10, "sum");
    }
  }
}

// Every subset of dims of a 5-D float32 tensor (with a size-1 dim), summed
// by the kernel, equals bit for bit a double sum over each output's inputs
// in increasing input order (what the contiguous fast path must keep).
TEST(ReductionKernels, SumOverEveryDimSubsetIsBitwiseTheOrderedSum) {
  const std::vector<int64_t> shape = {2, 1, 3, 4, 5};
  const int64_t numel = 2 * 3 * 4 * 5;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> xs(numel);
  for (float &v : xs)
    v = dist(gen) * 1000.0f;
  Tensor x = makeTensor<float>(wire::F32, shape, xs);
  for (int m = 1; m < 32; ++m) {
    std::vector<int64_t> dims, outShape;
    for (int d = 0; d < 5; ++d) {
      if (m & (1 << d))
        dims.push_back(d);
      else
        outShape.push_back(shape[d]);
    }
    // Reference: for each input in row-major order, add it to its output.
    int64_t outNumel = 1;
    for (int64_t e : outShape)
      outNumel *= e;
    std::vector<double> acc(outNumel, 0.0);
    std::vector<int64_t> index(5, 0);
    for (int64_t i = 0; i < numel; ++i) {
      int64_t o = 0;
      for (int d = 0; d < 5; ++d)
        if (!(m & (1 << d)))
          o = o * shape[d] + index[d];
      acc[o] += static_cast<double>(xs[i]);
      for (int d = 4; d >= 0; --d) {
        if (++index[d] < shape[d])
          break;
        index[d] = 0;
      }
    }
    Tensor out =
        runKernel("sum", {x}, wire::F32, outShape,
                  [&](Instruction &inst) { setInts(inst, "dims", dims); });
    std::vector<float> got = valuesOf<float>(out);
    ASSERT_EQ(got.size(), acc.size());
    for (size_t i = 0; i < acc.size(); ++i)
      EXPECT_EQ(got[i], static_cast<float>(acc[i]))
          << "mask " << m << " at " << i;
  }
}

TYPED_TEST(IntegerKernels, SumWithScaleTruncates) {
  using T = typename TypeParam::T;
  Tensor out =
      runKernel("sum", {makeTensor<T>(TypeParam::dtype, {3}, {3, 2, 2})},
                TypeParam::dtype, {},
                [](Instruction &inst) { setFloat(inst, "scale", 0.5); });
  EXPECT_EQ(valuesOf<T>(out), (std::vector<T>{3})); // trunc(7 * 0.5)
}

TYPED_TEST(NumericKernels, Max) {
  using T = typename TypeParam::T;
  std::vector<T> xs = randomValues<T>(24, -9, 9, 9);
  Tensor x = makeTensor<T>(TypeParam::dtype, {2, 3, 4}, xs);
  for (const auto &c : kReductionCases) {
    Tensor out = runKernel("max", {x}, TypeParam::dtype, c.outShape,
                           [&](Instruction &inst) {
                             if (!c.dims.empty())
                               setInts(inst, "dims", c.dims);
                             setInt(inst, "keepdim", c.keepdim);
                           });
    expectClose(valuesOf<T>(out), referenceReduce(xs, c.mask, true), 0, "max");
  }
  // An empty reduction gives the dtype's lowest value.
  Tensor empty = runKernel(
      "max", {Tensor::empty(TypeParam::dtype, {2, 0})}, TypeParam::dtype, {2},
      [](Instruction &inst) { setInts(inst, "dims", {1}); });
  T lowest;
  if constexpr (std::is_integral_v<T>)
    lowest = std::numeric_limits<T>::lowest();
  else
    lowest = -infinityOf<T>();
  EXPECT_EQ(valuesOf<T>(empty), (std::vector<T>{lowest, lowest}));
}

TEST(BoolKernels, Max) {
  Tensor x =
      makeTensor<bool>(BOOL, {2, 3}, {false, true, false, false, false, false});
  Tensor out = runKernel("max", {x}, BOOL, {2},
                         [](Instruction &inst) { setInts(inst, "dims", {1}); });
  EXPECT_EQ(valuesOf<bool>(out), (std::vector<bool>{true, false}));
}

TEST(ReductionKernels, RejectsWrongOutputShape) {
  expectRuntimeError(
      [] {
        runKernel("sum", {Tensor::empty(F32, {2, 3})}, F32, {3},
                  [](Instruction &inst) { setInts(inst, "dims", {1}); });
      },
      {"reduction of [2, 3] gives [2]"});
}

TYPED_TEST(AllKernels, CopyAndReshape) {
  using T = typename TypeParam::T;
  std::vector<T> xs = iota<T>(6);
  Tensor x = makeTensor<T>(TypeParam::dtype, {2, 3}, xs);
  EXPECT_EQ(valuesOf<T>(runKernel("copy", {x}, TypeParam::dtype, {2, 3})), xs);
  Tensor reshaped = runKernel("reshape", {x}, TypeParam::dtype, {3, 1, 2});
  EXPECT_EQ(reshaped.shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(valuesOf<T>(reshaped), xs);
  expectRuntimeError([&] { runKernel("reshape", {x}, TypeParam::dtype, {4}); },
                     {"changes the element count"});
}

TYPED_TEST(AllKernels, Transpose) {
  using T = typename TypeParam::T;
  std::vector<T> xs = iota<T>(24);
  Tensor x = makeTensor<T>(TypeParam::dtype, {2, 3, 4}, xs);
  Tensor out =
      runKernel("transpose", {x}, TypeParam::dtype, {4, 2, 3},
                [](Instruction &inst) { setInts(inst, "perm", {2, 0, 1}); });
  std::vector<T> got = valuesOf<T>(out);
  for (int64_t a = 0; a < 4; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 3; ++c)
        EXPECT_EQ(got[(a * 2 + b) * 3 + c], xs[(b * 3 + c) * 4 + a]);
  expectRuntimeError(
      [&] {
        runKernel("transpose", {x}, TypeParam::dtype, {4, 2, 3},
                  [](Instruction &inst) { setInts(inst, "perm", {2, 0, 0}); });
      },
      {"repeats a dim"});
}

// Every permutation of a 5-D tensor with a dim of extent 1 (the kernel
// merges dims that stay contiguous and copies runs at once) against the
// index arithmetic of the definition: out dim i is x dim perm[i].
TYPED_TEST(AllKernels, TransposeEveryPermutation) {
  using T = typename TypeParam::T;
  const Shape shape = {2, 3, 1, 4, 5};
  const Shape strides = {60, 20, 20, 5, 1};
  std::vector<T> xs = iota<T>(120);
  Tensor x = makeTensor<T>(TypeParam::dtype, shape, xs);
  std::vector<int64_t> perm = {0, 1, 2, 3, 4};
  do {
    Shape outShape(5);
    for (int d = 0; d < 5; ++d)
      outShape[d] = shape[perm[d]];
    Tensor out =
        runKernel("transpose", {x}, TypeParam::dtype, outShape,
                  [&](Instruction &inst) { setInts(inst, "perm", perm); });
    std::vector<T> got = valuesOf<T>(out);
    std::vector<int64_t> index(5, 0);
    for (int64_t i = 0; i < 120; ++i) {
      int64_t source = 0;
      for (int d = 0; d < 5; ++d)
        source += index[d] * strides[perm[d]];
      ASSERT_EQ(got[i], xs[source])
          << "perm " << shapeToString(perm) << " at " << i;
      for (int d = 4; d >= 0 && ++index[d] == outShape[d]; --d)
        index[d] = 0;
    }
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TYPED_TEST(AllKernels, BroadcastTo) {
  using T = typename TypeParam::T;
  std::vector<T> xs = iota<T>(3);
  Tensor x = makeTensor<T>(TypeParam::dtype, {3, 1}, xs);
  // [3, 1] -> [2, 3, 4]: a new leading dim and a repeated trailing one.
  std::vector<T> got =
      valuesOf<T>(runKernel("broadcast_to", {x}, TypeParam::dtype, {2, 3, 4}));
  ASSERT_EQ(got.size(), 24u);
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 4; ++c)
        EXPECT_EQ(got[(a * 3 + b) * 4 + c], xs[b]);
  Tensor row = makeTensor<T>(TypeParam::dtype, {4}, iota<T>(4));
  std::vector<T> rows =
      valuesOf<T>(runKernel("broadcast_to", {row}, TypeParam::dtype, {2, 4}));
  EXPECT_EQ(rows, (std::vector<T>{rows[0], rows[1], rows[2], rows[3], rows[0],
                                  rows[1], rows[2], rows[3]}));
  EXPECT_EQ(std::vector<T>(rows.begin(), rows.begin() + 4), iota<T>(4));
  EXPECT_EQ(runKernel("broadcast_to", {x}, TypeParam::dtype, {0, 3, 2}).numel(),
            0);
  expectRuntimeError(
      [&] { runKernel("broadcast_to", {x}, TypeParam::dtype, {2, 4}); },
      {"cannot broadcast"});
}

TYPED_TEST(AllKernels, BroadcastToEveryKindOfRun) {
  // The kernel copies or fills blocks of trailing dims; each output element
  // must still be the input element numpy's broadcasting names.
  using T = typename TypeParam::T;
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{}, {2, 3}},
      {{1}, {5}},
      {{3, 1}, {2, 3, 4}},
      {{4}, {2, 3, 4}},
      {{1, 4}, {3, 4}},
      {{2, 1, 4}, {2, 3, 4}},
      {{2, 3, 1}, {2, 3, 5}},
      {{1, 3, 1}, {2, 3, 4}},
      {{2, 1, 1, 3}, {2, 4, 5, 3}},
      {{3, 4}, {3, 4}},
      {{1, 1}, {1, 7}},
      {{5, 1, 1}, {5, 1, 6}},
      {{1, 2, 1, 3}, {4, 2, 5, 3}}};
  for (const auto &[in, out] : cases) {
    int64_t n = 1, m = 1;
    for (int64_t e : in)
      n *= e;
    for (int64_t e : out)
      m *= e;
    std::vector<T> xs = iota<T>(n);
    std::vector<T> got = valuesOf<T>(
        runKernel("broadcast_to", {makeTensor<T>(TypeParam::dtype, in, xs)},
                  TypeParam::dtype, out));
    ASSERT_EQ(static_cast<int64_t>(got.size()), m);
    size_t lead = out.size() - in.size();
    for (int64_t i = 0; i < m; ++i) {
      // The input element of output element i, dim by dim.
      int64_t rest = i, source = 0, stride = 1;
      for (size_t d = out.size(); d-- > 0;) {
        int64_t coord = rest % out[d];
        rest /= out[d];
        if (d >= lead) {
          int64_t extent = in[d - lead];
          source += (extent == 1 ? 0 : coord) * stride;
          stride *= extent;
        }
      }
      ASSERT_EQ(got[i], xs[source])
          << shapeToString(in) << " -> " << shapeToString(out) << " at " << i;
    }
  }
}

TYPED_TEST(AllKernels, BucketPackAndUnpack) {
  using T = typename TypeParam::T;
  std::vector<T> xs = iota<T>(6), ys = iota<T>(4);
  Tensor x = makeTensor<T>(TypeParam::dtype, {2, 3}, xs);
  Tensor y = makeTensor<T>(TypeParam::dtype, {4}, ys);
  Tensor empty = makeTensor<T>(TypeParam::dtype, {0, 3}, {});
  Tensor flat = runKernel("bucket_pack", {x, empty, y}, TypeParam::dtype, {10});
  std::vector<T> want = xs;
  want.insert(want.end(), ys.begin(), ys.end());
  EXPECT_EQ(valuesOf<T>(flat), want);
  auto unpack = [&](const Shape &shape, int64_t offset) {
    return runKernel(
        "bucket_unpack", {flat}, TypeParam::dtype, shape,
        [&](Instruction &inst) { setInt(inst, "offset", offset); });
  };
  EXPECT_EQ(valuesOf<T>(unpack({2, 3}, 0)), xs);
  EXPECT_EQ(valuesOf<T>(unpack({2, 2}, 6)), ys);
  EXPECT_EQ(unpack({0, 3}, 10).numel(), 0);
  expectRuntimeError(
      [&] { runKernel("bucket_pack", {x, y}, TypeParam::dtype, {9}); },
      {"the inputs hold 10 elements, output has 9"});
  expectRuntimeError([&] { unpack({4}, 7); }, {"out of range"});
  expectRuntimeError([&] { unpack({4}, -1); }, {"out of range"});
}

TYPED_TEST(AllKernels, Slice) {
  using T = typename TypeParam::T;
  std::vector<T> xs = iota<T>(12);
  Tensor x = makeTensor<T>(TypeParam::dtype, {4, 3}, xs);
  Tensor rows =
      runKernel("slice", {x}, TypeParam::dtype, {2, 3}, [](Instruction &inst) {
        setInt(inst, "dim", 0);
        setInt(inst, "start", 1);
      });
  EXPECT_EQ(valuesOf<T>(rows), std::vector<T>(xs.begin() + 3, xs.begin() + 9));
  Tensor cols =
      runKernel("slice", {x}, TypeParam::dtype, {4, 1}, [](Instruction &inst) {
        setInt(inst, "dim", -1);
        setInt(inst, "start", 2);
      });
  EXPECT_EQ(valuesOf<T>(cols), (std::vector<T>{xs[2], xs[5], xs[8], xs[11]}));
  Tensor none =
      runKernel("slice", {x}, TypeParam::dtype, {0, 3}, [](Instruction &inst) {
        setInt(inst, "dim", 0);
        setInt(inst, "start", 4);
      });
  EXPECT_EQ(none.numel(), 0);
  expectRuntimeError(
      [&] {
        runKernel("slice", {x}, TypeParam::dtype, {2, 3},
                  [](Instruction &inst) {
                    setInt(inst, "dim", 0);
                    setInt(inst, "start", 3);
                  });
      },
      {"out of range"});
}

TYPED_TEST(AllKernels, Full) {
  using T = typename TypeParam::T;
  Tensor out =
      runKernel("full", {}, TypeParam::dtype, {2, 2},
                [](Instruction &inst) { setFloat(inst, "value", 3.0); });
  EXPECT_EQ(valuesOf<T>(out), std::vector<T>(4, static_cast<T>(3)));
}

TEST(CreationKernels, FullInt64RejectsFractions) {
  expectRuntimeError(
      [] {
        runKernel("full", {}, I64, {2},
                  [](Instruction &inst) { setFloat(inst, "value", 0.5); });
      },
      {"not an int64"});
}

TYPED_TEST(AllKernels, ConstantBox) {
  using T = typename TypeParam::T;
  std::vector<T> global = iota<T>(12); // [3, 4]
  std::vector<uint8_t> bytes(12 * sizeof(T));
  for (size_t i = 0; i < 12; ++i) {
    T value = global[i];
    std::memcpy(&bytes[i * sizeof(T)], &value, sizeof(T));
  }
  Tensor out = runKernel("constant", {}, TypeParam::dtype, {2, 2},
                         [&](Instruction &inst) {
                           setInts(inst, "global_shape", {3, 4});
                           setInts(inst, "offset", {1, 2});
                           setData(inst, "data", bytes.data(), bytes.size());
                         });
  EXPECT_EQ(valuesOf<T>(out),
            (std::vector<T>{global[6], global[7], global[10], global[11]}));
  expectRuntimeError(
      [&] {
        runKernel("constant", {}, TypeParam::dtype, {2, 2},
                  [&](Instruction &inst) {
                    setInts(inst, "global_shape", {3, 4});
                    setInts(inst, "offset", {1, 2});
                    setData(inst, "data", bytes.data(), bytes.size() - 1);
                  });
      },
      {"constant: data has"});
}

Tensor randomBox(DType dtype, const std::string &dist, int64_t seed,
                 const Shape &global, const Shape &offset, const Shape &local) {
  return runKernel("random", {}, dtype, local, [&](Instruction &inst) {
    setInt(inst, "seed", seed);
    setString(inst, "dist", dist);
    setInts(inst, "global_shape", global);
    setInts(inst, "offset", offset);
  });
}

TYPED_TEST(FloatKernels, RandomUniformAndNormal) {
  using T = typename TypeParam::T;
  const int64_t n = 20000;
  std::vector<T> uniform =
      valuesOf<T>(randomBox(TypeParam::dtype, "uniform", 42, {n}, {0}, {n}));
  double mean = 0;
  for (T v : uniform) {
    ASSERT_GE(v, T(0));
    ASSERT_LT(v, T(1));
    mean += v;
  }
  EXPECT_NEAR(mean / n, 0.5, 0.02);
  std::vector<T> normal =
      valuesOf<T>(randomBox(TypeParam::dtype, "normal", 42, {n}, {0}, {n}));
  double sum = 0, squares = 0;
  for (T v : normal) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    squares += double(v) * v;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.05);
  EXPECT_NEAR(squares / n, 1.0, 0.05);
  // Elements follow randomUniform / randomNormal of the global linear index.
  EXPECT_EQ(uniform[123], static_cast<T>(randomUniform(42, 123)));
  EXPECT_EQ(normal[77], static_cast<T>(randomNormal(42, 77)));
  // Another seed gives another tensor.
  std::vector<T> other =
      valuesOf<T>(randomBox(TypeParam::dtype, "uniform", 43, {n}, {0}, {n}));
  EXPECT_NE(other, uniform);
}

TYPED_TEST(FloatKernels, RandomIsPlacementIndependent) {
  using T = typename TypeParam::T;
  for (const char *dist : {"uniform", "normal"}) {
    std::vector<T> whole = valuesOf<T>(
        randomBox(TypeParam::dtype, dist, 5, {6, 8}, {0, 0}, {6, 8}));
    // Row shards.
    for (int64_t start : {0, 3}) {
      std::vector<T> shard = valuesOf<T>(
          randomBox(TypeParam::dtype, dist, 5, {6, 8}, {start, 0}, {3, 8}));
      EXPECT_EQ(shard, std::vector<T>(whole.begin() + start * 8,
                                      whole.begin() + (start + 3) * 8));
    }
    // A column shard.
    std::vector<T> cols = valuesOf<T>(
        randomBox(TypeParam::dtype, dist, 5, {6, 8}, {0, 5}, {6, 3}));
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t c = 0; c < 3; ++c)
        EXPECT_EQ(cols[r * 3 + c], whole[r * 8 + 5 + c]);
  }
  expectRuntimeError(
      [] { randomBox(TypeParam::dtype, "normal", 1, {4}, {2}, {3}); },
      {"does not fit in global shape"});
  expectRuntimeError(
      [] { randomBox(TypeParam::dtype, "cauchy", 1, {4}, {0}, {4}); },
      {"dist must be"});
}

TEST(CastKernel, FollowsTorchConversions) {
  Tensor f = makeTensor<double>(F64, {5}, {-2.7, -0.5, 0.0, 1.9, 3.0});
  EXPECT_EQ(valuesOf<int64_t>(runKernel("cast", {f}, I64, {5})),
            (std::vector<int64_t>{-2, 0, 0, 1, 3}));
  std::vector<float> single = valuesOf<float>(runKernel("cast", {f}, F32, {5}));
  EXPECT_FLOAT_EQ(single[0], -2.7f);
  std::vector<bool> truth = valuesOf<bool>(runKernel("cast", {f}, BOOL, {5}));
  EXPECT_EQ(truth, (std::vector<bool>{true, true, false, true, true}));
  Tensor b = makeTensor<bool>(BOOL, {2}, {true, false});
  EXPECT_EQ(valuesOf<double>(runKernel("cast", {b}, F64, {2})),
            (std::vector<double>{1.0, 0.0}));
  Tensor i = makeTensor<int64_t>(I64, {2}, {7, -3});
  EXPECT_EQ(valuesOf<double>(runKernel("cast", {i}, F64, {2})),
            (std::vector<double>{7.0, -3.0}));
  expectRuntimeError([&] { runKernel("cast", {i}, F64, {3}); },
                     {"differ in shape"});
}

TEST(KernelRegistry, EveryDocumentedKernelIsRegistered) {
  const std::vector<DType> all = {F32, F64, F16, BF16, I32, I64, BOOL};
  const std::vector<DType> numeric = {F32, F64, F16, BF16, I32, I64};
  const std::vector<DType> floats = {F32, F64, F16, BF16};
  const std::vector<std::pair<std::vector<std::string>, std::vector<DType>>>
      table = {
          {{"full",         "constant",      "copy",         "reshape",
            "transpose",    "slice",         "broadcast_to", "cast",
            "maximum",      "minimum",       "max",          "min",
            "where",        "extract_slice", "concat",       "gather",
            "index_select", "tril",          "triu",         "bucket_pack",
            "bucket_unpack"},
           all},
          {{"add", "sub", "mul", "div", "pow", "matmul", "bmm", "sum", "neg",
            "abs", "relu", "scatter_add", "iota"},
           numeric},
          {{"random", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "gelu",
            "silu", "sin", "cos"},
           floats},
          {{"eq", "ne", "lt", "le", "gt", "ge"}, {BOOL}},
          {{"argmax", "argmin"}, {I64}},
      };
  for (const auto &[ops, dtypes] : table)
    for (const auto &op : ops) {
      for (DType dtype : dtypes)
        EXPECT_NE(lookupKernel(op, dtype), nullptr)
            << op << " " << dtypeName(dtype);
      // And nothing beyond the documented dtypes.
      EXPECT_EQ(KernelRegistry::global().dtypesFor(op, kCpuDevice).size(),
                dtypes.size())
          << op;
    }
  EXPECT_EQ(lookupKernel("sum", BOOL), nullptr);
  EXPECT_EQ(lookupKernel("exp", I32), nullptr);
  EXPECT_EQ(lookupKernel("add", F32, "cuda"), nullptr);
  EXPECT_EQ(lookupKernel("no_such_op", F32), nullptr);
}

TEST(KernelRegistry, CustomKernelsCanBeRegistered) {
  Kernel twice;
  twice.numInputs = 1;
  twice.run = [](const AttrReader &, const std::vector<const Tensor *> &in,
                 const std::vector<Tensor *> &out) {
    for (int64_t i = 0; i < in[0]->numel(); ++i)
      out[0]->data_as<int64_t>()[i] = 2 * in[0]->data_as<int64_t>()[i];
  };
  registerKernel("test_twice", I64, kCpuDevice, twice);
  Tensor out = runKernel("test_twice", {makeTensor<int64_t>(I64, {2}, {3, 4})},
                         I64, {2});
  EXPECT_EQ(valuesOf<int64_t>(out), (std::vector<int64_t>{6, 8}));
}

} // namespace
} // namespace dtorch::rt::test
