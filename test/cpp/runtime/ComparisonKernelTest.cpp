// eq ne lt le gt ge, where, tril and triu in every dtype they have.
#include "KernelTestSupport.h"

#include "dtorch/runtime/Kernels.h"

namespace dtorch::rt::test {
namespace {

template <class C> class ComparisonKernels : public ::testing::Test {};
TYPED_TEST_SUITE(ComparisonKernels, AllCases);

struct ComparisonOp {
  const char *op;
  bool (*ref)(double, double);
};
const ComparisonOp kComparisons[] = {
    {"eq", [](double a, double b) { return a == b; }},
    {"ne", [](double a, double b) { return a != b; }},
    {"lt", [](double a, double b) { return a < b; }},
    {"le", [](double a, double b) { return a <= b; }},
    {"gt", [](double a, double b) { return a > b; }},
    {"ge", [](double a, double b) { return a >= b; }},
};

TYPED_TEST(ComparisonKernels, CompareElementwise) {
  using T = typename TypeParam::T;
  std::vector<T> as, bs;
  if constexpr (std::is_same_v<T, bool>) {
    as = {false, false, true, true};
    bs = {false, true, false, true};
  } else {
    as = valuesFrom<T>({1, 2, 3, -1});
    bs = valuesFrom<T>({1, 3, 2, -1});
  }
  Tensor a = makeTensor<T>(TypeParam::dtype, {2, 2}, as);
  Tensor b = makeTensor<T>(TypeParam::dtype, {2, 2}, bs);
  // Hand-computed: element 0 and 3 equal, 1 less, 2 greater.
  const std::vector<std::pair<const char *, std::vector<bool>>> expected = {
      {"eq", {true, false, false, true}},  {"ne", {false, true, true, false}},
      {"lt", {false, true, false, false}}, {"le", {true, true, false, true}},
      {"gt", {false, false, true, false}}, {"ge", {true, false, true, true}},
  };
  for (const auto &[op, want] : expected) {
    Tensor out = runKernel(op, {a, b}, BOOL, {2, 2});
    EXPECT_EQ(out.dtype(), BOOL);
    EXPECT_EQ(valuesOf<bool>(out), want) << op;
  }
}

template <class C> class FloatComparisonKernels : public ::testing::Test {};
TYPED_TEST_SUITE(FloatComparisonKernels, FloatCases);

TYPED_TEST(FloatComparisonKernels, NanComparesUnequalToEverything) {
  using T = typename TypeParam::T;
  T nan = nanOf<T>();
  Tensor a =
      makeTensor<T>(TypeParam::dtype, {4}, {nan, T(1.0f), nan, T(-0.0f)});
  Tensor b = makeTensor<T>(TypeParam::dtype, {4}, {T(1.0f), nan, nan, T(0.0f)});
  for (const auto &c : kComparisons) {
    std::vector<bool> got = valuesOf<bool>(runKernel(c.op, {a, b}, BOOL, {4}));
    bool isNe = std::string(c.op) == "ne";
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(got[i], isNe) << c.op << " at " << i;
    // -0 and +0 are equal.
    EXPECT_EQ(got[3], c.ref(-0.0, 0.0)) << c.op;
  }
}

TEST(ComparisonKernelsCheck, RejectsMismatchedInputs) {
  Tensor f = makeTensor<float>(F32, {2}, {1, 2});
  Tensor d = makeTensor<double>(F64, {2}, {1, 2});
  Tensor longer = makeTensor<float>(F32, {3}, {1, 2, 3});
  expectRuntimeError([&] { runKernel("lt", {f, d}, BOOL, {2}); },
                     {"'lt'", "input 1 vs input 0"});
  expectRuntimeError([&] { runKernel("eq", {f, longer}, BOOL, {2}); },
                     {"input 1 vs input 0", "[3]"});
  expectRuntimeError([&] { runKernel("ge", {f, f}, BOOL, {3}); },
                     {"differs in shape"});
  // The registry key is the output dtype: a float output has no kernel.
  expectRuntimeError([&] { runKernel("eq", {f, f}, F32, {2}); },
                     {"no cpu kernel for float32"});
  expectRuntimeError([&] { runKernel("eq", {f}, BOOL, {2}); },
                     {"takes 2 input(s)"});
}

template <class C> class WhereKernels : public ::testing::Test {};
TYPED_TEST_SUITE(WhereKernels, AllCases);

TYPED_TEST(WhereKernels, SelectsByCondition) {
  using T = typename TypeParam::T;
  std::vector<T> as = iota<T>(6), bs;
  if constexpr (std::is_same_v<T, bool>)
    for (T a : as)
      bs.push_back(!a);
  else
    bs = valuesFrom<T>({10, 11, 12, 13, 14, 15});
  Tensor cond =
      makeTensor<bool>(BOOL, {2, 3}, {true, false, true, false, false, true});
  Tensor out = runKernel("where",
                         {cond, makeTensor<T>(TypeParam::dtype, {2, 3}, as),
                          makeTensor<T>(TypeParam::dtype, {2, 3}, bs)},
                         TypeParam::dtype, {2, 3});
  EXPECT_EQ(valuesOf<T>(out),
            (std::vector<T>{as[0], bs[1], as[2], bs[3], bs[4], as[5]}));
}

TEST(WhereKernelsCheck, RejectsBadOperands) {
  Tensor cond = makeTensor<bool>(BOOL, {2}, {true, false});
  Tensor a = makeTensor<float>(F32, {2}, {1, 2});
  Tensor a3 = makeTensor<float>(F32, {3}, {1, 2, 3});
  Tensor d = makeTensor<double>(F64, {2}, {1, 2});
  expectRuntimeError([&] { runKernel("where", {a, a, a}, F32, {2}); },
                     {"where: condition must be bool"});
  expectRuntimeError([&] { runKernel("where", {cond, a, d}, F32, {2}); },
                     {"where: input 2 vs output"});
  expectRuntimeError([&] { runKernel("where", {cond, a3, a3}, F32, {3}); },
                     {"where: condition [2] differs in shape"});
}

// ---- tril / triu
// -------------------------------------------------------------
template <class C> class TriangularKernels : public ::testing::Test {};
TYPED_TEST_SUITE(TriangularKernels, AllCases);

struct TriangleCase {
  const char *op;
  int64_t diagonal, rowOffset, colOffset;
  std::vector<int> mask; // 3x4, 1 = kept
};

TYPED_TEST(TriangularKernels, KeepsTheTriangleOfTheGlobalMatrix) {
  using T = typename TypeParam::T;
  // Two 3x4 matrices; every element nonzero so zeroing is visible.
  std::vector<T> xs;
  if constexpr (std::is_same_v<T, bool>)
    xs.assign(24, true);
  else
    for (int i = 0; i < 24; ++i)
      xs.push_back(static_cast<T>(static_cast<float>(i + 1)));
  Tensor x = makeTensor<T>(TypeParam::dtype, {2, 3, 4}, xs);
  const TriangleCase cases[] = {
      {"tril", 0, 0, 0, {1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0}},
      {"triu", 1, 0, 0, {0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1}},
      // A piece whose first element is global (2, 1): keep j - i <= 0.
      {"tril", 0, 2, 1, {1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1}},
      // The same piece, triu with diagonal -1: keep j - i >= -1.
      {"triu", -1, 2, 1, {1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1}},
      {"tril", -5, 0, 0, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
  };
  for (const auto &c : cases) {
    Tensor out =
        runKernel(c.op, {x}, TypeParam::dtype, {2, 3, 4}, [&](Instruction &i) {
          setInt(i, "diagonal", c.diagonal);
          if (c.rowOffset != 0)
            setInt(i, "row_offset", c.rowOffset);
          if (c.colOffset != 0)
            setInt(i, "col_offset", c.colOffset);
        });
    std::vector<T> want(24);
    for (int i = 0; i < 24; ++i)
      want[i] = c.mask[i % 12] ? xs[i] : T(0);
    EXPECT_EQ(valuesOf<T>(out), want)
        << c.op << " diagonal " << c.diagonal << " at (" << c.rowOffset << ", "
        << c.colOffset << ")";
  }
  // diagonal defaults to 0.
  EXPECT_EQ(
      valuesOf<T>(runKernel("tril", {x}, TypeParam::dtype, {2, 3, 4})),
      valuesOf<T>(runKernel("tril", {x}, TypeParam::dtype, {2, 3, 4},
                            [](Instruction &i) { setInt(i, "diagonal", 0); })));
}

TEST(TriangularKernelsCheck, RejectsBadOperands) {
  Tensor v = makeTensor<float>(F32, {3}, {1, 2, 3});
  expectRuntimeError([&] { runKernel("tril", {v}, F32, {3}); },
                     {"tril: input [3] must have rank >= 2"});
  Tensor m = makeTensor<float>(F32, {1, 2}, {1, 2});
  expectRuntimeError([&] { runKernel("triu", {m}, F32, {2, 1}); },
                     {"input 0 vs output"});
  expectRuntimeError(
      [&] {
        runKernel("triu", {m}, F32, {1, 2},
                  [](Instruction &i) { setFloat(i, "diagonal", 0.5); });
      },
      {"attribute 'diagonal' must be i"});
}

} // namespace
} // namespace dtorch::rt::test
