// min (and NaN in max/min), argmax and argmin, in every dtype they have.
#include "KernelTestSupport.h"

#include "dtorch/runtime/Kernels.h"

#include <cmath>
#include <limits>
#include <random>

namespace dtorch::rt::test {
namespace {

template <class C> class MinMaxKernels : public ::testing::Test {};
TYPED_TEST_SUITE(MinMaxKernels, NumericCases);

Tensor reduce(const char *op, const Tensor &x, const Shape &outShape,
              const Shape &dims, bool keepdim = false) {
  return runKernel(op, {x}, x.dtype(), outShape, [&](Instruction &i) {
    if (!dims.empty())
      setInts(i, "dims", dims);
    if (keepdim)
      setInt(i, "keepdim", 1);
  });
}

TYPED_TEST(MinMaxKernels, Min) {
  using T = typename TypeParam::T;
  DType dtype = TypeParam::dtype;
  Tensor x = makeTensor<T>(dtype, {2, 3}, valuesFrom<T>({3, -1, 2, 0, 5, -4}));
  EXPECT_EQ(valuesOf<T>(reduce("min", x, {2}, {1})), valuesFrom<T>({-1, -4}));
  EXPECT_EQ(valuesOf<T>(reduce("min", x, {1, 3}, {0}, true)),
            valuesFrom<T>({0, -1, -4}));
  EXPECT_EQ(valuesOf<T>(reduce("min", x, {}, {})), valuesFrom<T>({-4}));
  EXPECT_EQ(valuesOf<T>(reduce("max", x, {2}, {-1})), valuesFrom<T>({3, 5}));
  // An empty min gives the highest value of the dtype.
  T highest;
  if constexpr (std::is_integral_v<T>)
    highest = std::numeric_limits<T>::max();
  else
    highest = infinityOf<T>();
  EXPECT_EQ(valuesOf<T>(reduce("min", Tensor::empty(dtype, {2, 0}), {2}, {1})),
            (std::vector<T>{highest, highest}));
  expectRuntimeError([&] { reduce("min", x, {3}, {1}); },
                     {"reduction of [2, 3] gives [2]"});
  expectRuntimeError([&] { reduce("min", x, {3}, {0, 0}); }, {"is repeated"});
}

template <class C> class FloatMinMaxKernels : public ::testing::Test {};
TYPED_TEST_SUITE(FloatMinMaxKernels, FloatCases);

TYPED_TEST(FloatMinMaxKernels, NanPropagates) {
  using T = typename TypeParam::T;
  T nan = nanOf<T>();
  // NaN first, NaN last, no NaN.
  Tensor x = makeTensor<T>(TypeParam::dtype, {3, 3},
                           {nan, T(1.0f), T(-2.0f), T(1.0f), T(-2.0f), nan,
                            T(1.0f), T(-2.0f), T(0.0f)});
  for (const char *op : {"max", "min"}) {
    std::vector<T> got = valuesOf<T>(reduce(op, x, {3}, {1}));
    EXPECT_TRUE(isNan(got[0])) << op;
    EXPECT_TRUE(isNan(got[1])) << op;
    EXPECT_EQ(static_cast<float>(got[2]),
              std::string(op) == "max" ? 1.0f : -2.0f);
  }
}

// Reducing contiguous rows walks several rows side by side; each row must
// still be summed in increasing order (values whose double sum depends on
// the order: 1e30 + 1 - 1e30 is 0 in that order, 1 in another), and max/min
// must keep NaN and the extreme of each row. 21 rows: two blocks of rows
// side by side and a remainder.
TEST(ReductionKernels, RowReductionsKeepEachRowsOrder) {
  const int64_t rows = 21, width = 37;
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> xs(rows * width);
  for (int64_t i = 0; i < rows * width; ++i) {
    int64_t kind = (i * 7) % 5;
    xs[i] = kind == 0 ? 1e30f : kind == 1 ? -1e30f : dist(gen);
  }
  xs[3 * width + 11] = std::numeric_limits<float>::quiet_NaN();
  xs[16 * width] = std::numeric_limits<float>::quiet_NaN();
  Tensor x = makeTensor<float>(F32, {3, 7, width}, xs);
  std::vector<float> sums = valuesOf<float>(reduce("sum", x, {3, 7}, {2}));
  std::vector<float> maxes = valuesOf<float>(reduce("max", x, {3, 7}, {2}));
  std::vector<float> mins = valuesOf<float>(reduce("min", x, {3, 7}, {2}));
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    float hi = -std::numeric_limits<float>::infinity(), lo = -hi;
    bool nan = false;
    for (int64_t j = 0; j < width; ++j) {
      float v = xs[r * width + j];
      sum += static_cast<double>(v);
      nan |= std::isnan(v);
      hi = std::max(hi, v);
      lo = std::min(lo, v);
    }
    if (nan) {
      EXPECT_TRUE(std::isnan(sums[r]) && std::isnan(maxes[r]) &&
                  std::isnan(mins[r]))
          << "row " << r;
      continue;
    }
    EXPECT_EQ(sums[r], static_cast<float>(sum)) << "row " << r;
    EXPECT_EQ(maxes[r], hi) << "row " << r;
    EXPECT_EQ(mins[r], lo) << "row " << r;
  }
}

TEST(MinMaxKernelsBool, MinIsLogicalAnd) {
  Tensor x =
      makeTensor<bool>(BOOL, {2, 3}, {true, true, true, true, false, true});
  EXPECT_EQ(valuesOf<bool>(reduce("min", x, {2}, {1})),
            (std::vector<bool>{true, false}));
  EXPECT_EQ(valuesOf<bool>(reduce("max", x, {2}, {1})),
            (std::vector<bool>{true, true}));
}

// ---- argmax / argmin --------------------------------------------------------
template <class C> class ArgReductionKernels : public ::testing::Test {};
TYPED_TEST_SUITE(ArgReductionKernels, NumericCases);

Tensor argReduce(const char *op, const Tensor &x, int64_t dim, int64_t keepdim,
                 const Shape &outShape, DType outDtype = I64) {
  return runKernel(op, {x}, outDtype, outShape, [&](Instruction &i) {
    setInt(i, "dim", dim);
    setInt(i, "keepdim", keepdim);
  });
}

TYPED_TEST(ArgReductionKernels, FirstIndexOfTheExtreme) {
  using T = typename TypeParam::T;
  Tensor x = makeTensor<T>(TypeParam::dtype, {2, 4},
                           valuesFrom<T>({1, 3, 3, 0, -2, -2, 5, 5}));
  using V = std::vector<int64_t>;
  Tensor out = argReduce("argmax", x, 1, 0, {2});
  EXPECT_EQ(out.dtype(), I64);
  EXPECT_EQ(valuesOf<int64_t>(out), (V{1, 2})); // ties: the first index
  EXPECT_EQ(valuesOf<int64_t>(argReduce("argmin", x, -1, 0, {2})), (V{3, 0}));
  EXPECT_EQ(valuesOf<int64_t>(argReduce("argmax", x, 0, 1, {1, 4})),
            (V{0, 0, 1, 1}));
  EXPECT_EQ(valuesOf<int64_t>(argReduce("argmin", x, 0, 0, {4})),
            (V{1, 1, 0, 0}));
  // A 3-d input reduced over the middle dim.
  Tensor y =
      makeTensor<T>(TypeParam::dtype, {2, 3, 2},
                    valuesFrom<T>({0, 9, 7, 1, 7, 2, /**/ 4, 4, 4, 6, 3, 6}));
  EXPECT_EQ(valuesOf<int64_t>(argReduce("argmax", y, 1, 1, {2, 1, 2})),
            (V{1, 0, 0, 1}));
  EXPECT_EQ(valuesOf<int64_t>(argReduce("argmin", y, 1, 0, {2, 2})),
            (V{0, 1, 2, 0}));
}

TYPED_TEST(FloatMinMaxKernels, ArgReductionsPickTheFirstNan) {
  using T = typename TypeParam::T;
  T nan = nanOf<T>();
  Tensor x = makeTensor<T>(TypeParam::dtype, {5},
                           {T(1.0f), nan, T(5.0f), nan, T(-3.0f)});
  for (const char *op : {"argmax", "argmin"})
    EXPECT_EQ(valuesOf<int64_t>(argReduce(op, x, 0, 0, {})),
              (std::vector<int64_t>{1}))
        << op;
}

TEST(ArgReductionKernelsCheck, RejectsBadOperands) {
  Tensor x = Tensor::empty(F32, {2, 3});
  expectRuntimeError([&] { argReduce("argmax", x, 1, 0, {2}, F32); },
                     {"'argmax' has no cpu kernel for float32"});
  expectRuntimeError([&] { argReduce("argmin", x, 1, 0, {3}); },
                     {"argmin of [2, 3] over dim 1 gives [2], output is [3]"});
  expectRuntimeError([&] { argReduce("argmax", x, 2, 0, {2}); },
                     {"argmax dim 2 is out of range for rank 2"});
  expectRuntimeError([&] { argReduce("argmax", x, 1, 2, {2}); },
                     {"keepdim must be 0 or 1, got 2"});
  expectRuntimeError(
      [&] { argReduce("argmax", Tensor::empty(BOOL, {2}), 0, 0, {}); },
      {"argmax: input must be a number, got bool"});
  expectRuntimeError(
      [&] { argReduce("argmin", Tensor::empty(F32, {2, 0}), 1, 0, {2}); },
      {"argmin: dim 1 of [2, 0] is empty"});
  // A scalar reduces to index 0.
  EXPECT_EQ(valuesOf<int64_t>(argReduce(
                "argmax", makeTensor<float>(F32, {}, {2.5f}), 0, 0, {})),
            (std::vector<int64_t>{0}));
}

Tensor topkIndices(const Tensor &x, int64_t dim, int64_t k, int64_t largest,
                   const Shape &outShape) {
  return runKernel("topk_indices", {x}, I64, outShape, [&](Instruction &i) {
    setInt(i, "dim", dim);
    setInt(i, "k", k);
    setInt(i, "largest", largest);
  });
}

TYPED_TEST(ArgReductionKernels, TopkIndicesInOrderWithTiesByIndex) {
  using T = typename TypeParam::T;
  Tensor x = makeTensor<T>(TypeParam::dtype, {2, 4},
                           valuesFrom<T>({1, 3, 3, 0, -2, 5, 4, 5}));
  EXPECT_EQ(valuesOf<int64_t>(topkIndices(x, 1, 2, 1, {2, 2})),
            (std::vector<int64_t>{1, 2, 1, 3}));
  EXPECT_EQ(valuesOf<int64_t>(topkIndices(x, 1, 3, 0, {2, 3})),
            (std::vector<int64_t>{3, 0, 1, 0, 2, 1}));
  // Along dim 0 of a [2, 4] tensor: per column, the larger row first.
  EXPECT_EQ(valuesOf<int64_t>(topkIndices(x, 0, 1, 1, {1, 4})),
            (std::vector<int64_t>{0, 1, 1, 1}));
}

TYPED_TEST(FloatMinMaxKernels, TopkCountsNanAsTheLargest) {
  using T = typename TypeParam::T;
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x =
      makeTensor<T>(TypeParam::dtype, {4}, {T(1.0f), T(nan), T(3.0f), T(nan)});
  EXPECT_EQ(valuesOf<int64_t>(topkIndices(x, 0, 3, 1, {3})),
            (std::vector<int64_t>{1, 3, 2}));
  EXPECT_EQ(valuesOf<int64_t>(topkIndices(x, 0, 3, 0, {3})),
            (std::vector<int64_t>{0, 2, 1}));
}

TEST(TopkKernelCheck, RejectsBadOperands) {
  Tensor x = Tensor::empty(F32, {2, 3});
  expectRuntimeError([&] { topkIndices(x, 1, 4, 1, {2, 4}); },
                     {"k = 4 is out of range for a dim of extent 3"});
  expectRuntimeError([&] { topkIndices(x, 1, 2, 1, {2, 3}); },
                     {"topk_indices of [2, 3] gives [2, 2], output is [2, 3]"});
  expectRuntimeError([&] { topkIndices(x, 1, 2, 3, {2, 2}); },
                     {"largest must be 0 or 1"});
  expectRuntimeError(
      [&] { topkIndices(Tensor::empty(BOOL, {2}), 0, 1, 1, {1}); },
      {"topk_indices: input must be a number, got bool"});
}

} // namespace
} // namespace dtorch::rt::test
