// extract_slice, concat, gather, index_select and scatter_add in every dtype
// they have, against hand-computed results, plus the failures each checks.
#include "KernelTestSupport.h"

#include "dtorch/runtime/Kernels.h"

#include <cstring>
#include <limits>
#include <random>

namespace dtorch::rt::test {
namespace {

template <class C> class IndexingKernels : public ::testing::Test {};
TYPED_TEST_SUITE(IndexingKernels, AllCases);

Tensor indices(const Shape &shape, const std::vector<int64_t> &values) {
  return makeTensor<int64_t>(I64, shape, values);
}

// ---- extract_slice ----------------------------------------------------------
void setBox(Instruction &inst, const Shape &offsets, const Shape &sizes,
            const Shape &strides) {
  setInts(inst, "offsets", offsets);
  setInts(inst, "sizes", sizes);
  setInts(inst, "strides", strides);
}

TYPED_TEST(IndexingKernels, ExtractSlice) {
  using T = typename TypeParam::T;
  std::vector<T> xs = iota<T>(20);
  Tensor x = makeTensor<T>(TypeParam::dtype, {4, 5}, xs);
  // Rows 1 and 3, columns 0, 2 and 4.
  Tensor out =
      runKernel("extract_slice", {x}, TypeParam::dtype, {2, 3},
                [](Instruction &i) { setBox(i, {1, 0}, {2, 3}, {2, 2}); });
  EXPECT_EQ(valuesOf<T>(out),
            (std::vector<T>{xs[5], xs[7], xs[9], xs[15], xs[17], xs[19]}));
  // Unit strides: a plain box; the last element read is x[3][4].
  out = runKernel("extract_slice", {x}, TypeParam::dtype, {1, 2},
                  [](Instruction &i) { setBox(i, {3, 3}, {1, 2}, {1, 1}); });
  EXPECT_EQ(valuesOf<T>(out), (std::vector<T>{xs[18], xs[19]}));
  // An empty box may start at the extent.
  out = runKernel("extract_slice", {x}, TypeParam::dtype, {0, 5},
                  [](Instruction &i) { setBox(i, {4, 0}, {0, 5}, {1, 1}); });
  EXPECT_EQ(out.numel(), 0);
}

TEST(IndexingKernelsCheck, ExtractSliceRejectsBadBoxes) {
  Tensor x = Tensor::empty(F32, {4, 5});
  auto run = [&](const Shape &offsets, const Shape &sizes, const Shape &strides,
                 const Shape &outShape) {
    runKernel("extract_slice", {x}, F32, outShape,
              [&](Instruction &i) { setBox(i, offsets, sizes, strides); });
  };
  // Row 1 + 1 * 3 = 4 is outside the 4 rows.
  expectRuntimeError([&] { run({1, 0}, {2, 3}, {3, 2}, {2, 3}); },
                     {"extract_slice: dim 0", "beyond extent 4"});
  expectRuntimeError([&] { run({0, 0}, {2, 3}, {1, 0}, {2, 3}); },
                     {"stride 0 of dim 1 must be >= 1"});
  expectRuntimeError([&] { run({0, -1}, {2, 3}, {1, 1}, {2, 3}); },
                     {"must be >= 0"});
  expectRuntimeError([&] { run({0, 0}, {2, 3}, {1, 1}, {3, 2}); },
                     {"output [3, 2] differs from sizes [2, 3]"});
  expectRuntimeError([&] { run({0}, {2}, {1}, {2}); }, {"need 2 entries each"});
  expectRuntimeError([&] { run({5, 0}, {0, 3}, {1, 1}, {0, 3}); },
                     {"beyond extent 4"});
}

// ---- concat -----------------------------------------------------------------
Tensor runConcat(const std::vector<Tensor> &inputs, int64_t dim, DType dtype,
                 const Shape &outShape) {
  return runKernel("concat", inputs, dtype, outShape,
                   [&](Instruction &i) { setInt(i, "dim", dim); });
}

TYPED_TEST(IndexingKernels, Concat) {
  using T = typename TypeParam::T;
  std::vector<T> xs = iota<T>(12);
  std::vector<T> as(xs.begin(), xs.begin() + 2);     // [2, 1]
  std::vector<T> bs(xs.begin() + 2, xs.begin() + 8); // [2, 3]
  Tensor a = makeTensor<T>(TypeParam::dtype, {2, 1}, as);
  Tensor b = makeTensor<T>(TypeParam::dtype, {2, 3}, bs);
  Tensor out = runConcat({a, b}, 1, TypeParam::dtype, {2, 4});
  EXPECT_EQ(valuesOf<T>(out), (std::vector<T>{as[0], bs[0], bs[1], bs[2], as[1],
                                              bs[3], bs[4], bs[5]}));
  // Three inputs along dim -2 (rows), one of them empty.
  Tensor c = makeTensor<T>(TypeParam::dtype, {1, 3},
                           std::vector<T>(xs.begin() + 8, xs.begin() + 11));
  Tensor none = Tensor::empty(TypeParam::dtype, {0, 3});
  out = runConcat({b, none, c}, -2, TypeParam::dtype, {3, 3});
  std::vector<T> want = bs;
  want.insert(want.end(), xs.begin() + 8, xs.begin() + 11);
  EXPECT_EQ(valuesOf<T>(out), want);
  // A single input is a copy.
  EXPECT_EQ(valuesOf<T>(runConcat({b}, 0, TypeParam::dtype, {2, 3})), bs);
}

TEST(IndexingKernelsCheck, ConcatRejectsBadInputs) {
  Tensor a = Tensor::empty(F32, {2, 3});
  Tensor b = Tensor::empty(F32, {3, 3});
  expectRuntimeError([&] { runConcat({a, b}, 1, F32, {2, 6}); },
                     {"concat: input 1 [3, 3] and output [2, 6] differ "
                      "outside dim 1"});
  expectRuntimeError([&] { runConcat({a, b}, 0, F32, {4, 3}); },
                     {"the inputs add up to 5 along dim 0, output has 4"});
  expectRuntimeError(
      [&] { runConcat({a, Tensor::empty(F64, {2, 3})}, 0, F32, {4, 3}); },
      {"concat: input 1 is float64, output is float32"});
  expectRuntimeError(
      [&] { runConcat({a, Tensor::empty(F32, {6})}, 0, F32, {4, 3}); },
      {"input 1 [6] must have rank 2"});
  expectRuntimeError([&] { runConcat({a}, 2, F32, {2, 3}); },
                     {"concat dim 2 is out of range for rank 2"});
  // Variadic: one or more inputs; none is rejected by the validator.
  expectRuntimeError([&] { runConcat({}, 0, F32, {2, 3}); },
                     {"'concat'", "takes 1 or more input(s)", "got 0"});
}

// ---- gather -----------------------------------------------------------------
TYPED_TEST(IndexingKernels, Gather) {
  using T = typename TypeParam::T;
  std::vector<T> xs = iota<T>(12);
  Tensor x = makeTensor<T>(TypeParam::dtype, {3, 4}, xs);
  // dim 1: out[r][c] = x[r][index[r][c]], index smaller than x in dim 0.
  Tensor out = runKernel("gather", {x, indices({2, 3}, {0, 3, 3, 2, 1, 0})},
                         TypeParam::dtype, {2, 3},
                         [](Instruction &i) { setInt(i, "dim", 1); });
  EXPECT_EQ(valuesOf<T>(out),
            (std::vector<T>{xs[0], xs[3], xs[3], xs[6], xs[5], xs[4]}));
  // dim 0 (given as -2): out[r][c] = x[index[r][c]][c]; more rows than x.
  out = runKernel("gather", {x, indices({4, 2}, {2, 0, 1, 1, 0, 2, 2, 2})},
                  TypeParam::dtype, {4, 2},
                  [](Instruction &i) { setInt(i, "dim", -2); });
  EXPECT_EQ(valuesOf<T>(out), (std::vector<T>{xs[8], xs[1], xs[4], xs[5], xs[0],
                                              xs[9], xs[8], xs[9]}));
}

TEST(IndexingKernelsCheck, GatherRejectsBadIndices) {
  Tensor x = makeTensor<float>(F32, {2, 3}, {0, 1, 2, 3, 4, 5});
  auto run = [&](const Tensor &index, int64_t dim) {
    return runKernel("gather", {x, index}, F32, index.shape(),
                     [&](Instruction &i) { setInt(i, "dim", dim); });
  };
  expectRuntimeError([&] { run(indices({2, 2}, {0, 1, 3, 0}), 1); },
                     {"gather: index 3 is out of range [0, 3) of dim 1"});
  expectRuntimeError([&] { run(indices({1, 1}, {-1}), 0); },
                     {"gather: index -1 is out of range [0, 2) of dim 0"});
  expectRuntimeError([&] { run(indices({3, 1}, {0, 0, 0}), 1); },
                     {"index [3, 1] is larger than input [2, 3] in dim 0"});
  expectRuntimeError([&] { run(indices({2}, {0, 0}), 0); },
                     {"index [2] must have rank 2"});
  expectRuntimeError(
      [&] {
        runKernel("gather", {x, makeTensor<int32_t>(I32, {1, 1}, {0})}, F32,
                  {1, 1}, [](Instruction &i) { setInt(i, "dim", 0); });
      },
      {"gather: index must be int64, got int32"});
  expectRuntimeError(
      [&] {
        runKernel("gather", {x, indices({1, 1}, {0})}, F32, {1, 2},
                  [](Instruction &i) { setInt(i, "dim", 0); });
      },
      {"must have the index's shape"});
}

// ---- index_select -----------------------------------------------------------
Tensor runIndexSelect(const Tensor &x, const Tensor &index, int64_t dim,
                      const Shape &outShape, int64_t offset = 0,
                      int64_t masked = -1) {
  return runKernel("index_select", {x, index}, x.dtype(), outShape,
                   [&](Instruction &i) {
                     setInt(i, "dim", dim);
                     if (offset != 0)
                       setInt(i, "offset", offset);
                     if (masked >= 0)
                       setInt(i, "masked", masked);
                   });
}

TYPED_TEST(IndexingKernels, IndexSelect) {
  using T = typename TypeParam::T;
  std::vector<T> xs = iota<T>(6);
  Tensor x = makeTensor<T>(TypeParam::dtype, {3, 2}, xs);
  Tensor rows = runIndexSelect(x, indices({3}, {2, 0, 2}), 0, {3, 2});
  EXPECT_EQ(valuesOf<T>(rows),
            (std::vector<T>{xs[4], xs[5], xs[0], xs[1], xs[4], xs[5]}));
  Tensor cols = runIndexSelect(x, indices({3}, {1, 1, 0}), -1, {3, 3});
  EXPECT_EQ(valuesOf<T>(cols),
            (std::vector<T>{xs[1], xs[1], xs[0], xs[3], xs[3], xs[2], xs[5],
                            xs[5], xs[4]}));
  // This rank holds global rows [3, 6) of an embedding table; masked lookups
  // of rows it does not hold give zeros.
  Tensor masked =
      runIndexSelect(x, indices({4}, {4, 0, 5, 7}), 0, {4, 2}, 3, 1);
  T zero = T(0);
  EXPECT_EQ(valuesOf<T>(masked), (std::vector<T>{xs[2], xs[3], zero, zero,
                                                 xs[4], xs[5], zero, zero}));
}

TEST(IndexingKernelsCheck, IndexSelectRejectsBadIndices) {
  Tensor x = makeTensor<float>(F32, {3, 2}, {0, 1, 2, 3, 4, 5});
  expectRuntimeError(
      [&] { runIndexSelect(x, indices({2}, {4, 7}), 0, {2, 2}, 3, 0); },
      {"index_select: index 7 is out of range [3, 6)"});
  expectRuntimeError([&] { runIndexSelect(x, indices({1}, {-1}), 1, {3, 1}); },
                     {"index -1 is out of range [0, 2)"});
  expectRuntimeError(
      [&] { runIndexSelect(x, indices({1}, {0}), 0, {1, 2}, 0, 2); },
      {"masked must be 0 or 1, got 2"});
  expectRuntimeError(
      [&] { runIndexSelect(x, indices({1, 1}, {0}), 0, {1, 2}); },
      {"index [1, 1] must have rank 1"});
  expectRuntimeError(
      [&] { runIndexSelect(x, indices({2}, {0, 1}), 0, {2, 3}); },
      {"output [2, 3] must be [2, 2]"});
}

// ---- scatter_add ------------------------------------------------------------
template <class C> class ScatterAddKernels : public ::testing::Test {};
TYPED_TEST_SUITE(ScatterAddKernels, NumericCases);

Tensor runScatterAdd(const Tensor &self, const Tensor &index, const Tensor &src,
                     int64_t dim) {
  return runKernel("scatter_add", {self, index, src}, self.dtype(),
                   self.shape(),
                   [&](Instruction &i) { setInt(i, "dim", dim); });
}

TYPED_TEST(ScatterAddKernels, AddsSourceAtIndexedPositions) {
  using T = typename TypeParam::T;
  DType dtype = TypeParam::dtype;
  Tensor self = makeTensor<T>(dtype, {2, 3}, iota<T>(6));
  Tensor src =
      makeTensor<T>(dtype, {2, 3}, valuesFrom<T>({10, 20, 30, 40, 50, 60}));
  // dim 1, index [2, 2] (smaller than src): row 1 adds twice to column 1.
  Tensor out = runScatterAdd(self, indices({2, 2}, {0, 2, 1, 1}), src, 1);
  EXPECT_EQ(valuesOf<T>(out), valuesFrom<T>({10, 1, 22, 3, 94, 5}));
  // dim 0, index [1, 3].
  out = runScatterAdd(self, indices({1, 3}, {1, 0, 1}), src, 0);
  EXPECT_EQ(valuesOf<T>(out), valuesFrom<T>({0, 21, 2, 13, 4, 35}));
  // An empty index leaves self as it is.
  out = runScatterAdd(self, indices({0, 3}, {}), src, 0);
  EXPECT_EQ(valuesOf<T>(out), iota<T>(6));
}

TEST(ScatterAddKernelsCheck, ThreeDimsEveryDimMatchesElementwiseReference) {
  // self [4, 3, 5], src [3, 3, 6], index [3, 2, 4] (smaller than both in
  // every dim but `dim`), repeated targets: each element of the result must
  // be self plus the src values the index sends there, added in the
  // index's row-major order (float64: exact for these small integers).
  std::mt19937 rng(5);
  const Shape selfShape{4, 3, 5}, srcShape{3, 3, 6}, indexShape{3, 2, 4};
  std::vector<double> selfValues(60), srcValues(54);
  for (double &v : selfValues)
    v = static_cast<double>(rng() % 17);
  for (double &v : srcValues)
    v = static_cast<double>(rng() % 13);
  for (int64_t dim = 0; dim < 3; ++dim) {
    std::vector<int64_t> idx(24);
    for (int64_t &v : idx)
      v = static_cast<int64_t>(rng() % static_cast<unsigned>(selfShape[dim]));
    Tensor out =
        runScatterAdd(makeTensor<double>(F64, selfShape, selfValues),
                      indices(indexShape, idx),
                      makeTensor<double>(F64, srcShape, srcValues), dim);
    std::vector<double> want = selfValues;
    for (int64_t a = 0; a < 3; ++a)
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t c = 0; c < 4; ++c) {
          int64_t p[3] = {a, b, c};
          p[dim] = idx[(a * 2 + b) * 4 + c];
          want[(p[0] * 3 + p[1]) * 5 + p[2]] += srcValues[(a * 3 + b) * 6 + c];
        }
    EXPECT_EQ(valuesOf<double>(out), want) << "dim " << dim;
  }
}

TEST(ScatterAddKernelsCheck, Int32WrapsAround) {
  int32_t big = std::numeric_limits<int32_t>::max();
  Tensor out =
      runScatterAdd(makeTensor<int32_t>(I32, {1}, {big}), indices({1}, {0}),
                    makeTensor<int32_t>(I32, {1}, {1}), 0);
  EXPECT_EQ(valuesOf<int32_t>(out),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min()}));
}

TEST(ScatterAddKernelsCheck, RejectsBadOperands) {
  Tensor self = Tensor::empty(F32, {2, 3});
  Tensor src = Tensor::empty(F32, {2, 2});
  expectRuntimeError([&] { runScatterAdd(self, indices({1, 1}, {3}), src, 1); },
                     {"scatter_add: index 3 is out of range [0, 3) of dim 1"});
  expectRuntimeError(
      [&] { runScatterAdd(self, indices({1, 3}, {0, 0, 0}), src, 0); },
      {"index [1, 3] is larger than src [2, 2] in dim 1"});
  expectRuntimeError(
      [&] {
        runScatterAdd(self, indices({3, 1}, {0, 0, 0}),
                      Tensor::empty(F32, {3, 3}), 1);
      },
      {"index [3, 1] is larger than self [2, 3] in dim 0"});
  expectRuntimeError(
      [&] {
        runScatterAdd(self, indices({1, 1}, {0}), Tensor::empty(F64, {2, 2}),
                      0);
      },
      {"scatter_add: src is float64, output is float32"});
  expectRuntimeError(
      [&] {
        runScatterAdd(Tensor::empty(BOOL, {2}), indices({1}, {0}),
                      Tensor::empty(BOOL, {2}), 0);
      },
      {"no cpu kernel for bool"});
}

// Index rows whose targets are all one output row (an embedding's
// gradient) are added as one contiguous row (DTORCH_SCATTER_ROWS); mixed
// rows element by element. Repeated targets, rows of the index shorter
// than src's, and values whose sum depends on the order: bitwise the
// additions in the index's row-major order.
TEST(ScatterAddRows, RepeatedTargetsInOrderBitForBit) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> target(0, 6);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t rows = 50, width = 37, indexWidth = 33;
  std::vector<float> self(7 * width), src(rows * width);
  for (float &x : self)
    x = dist(rng);
  for (int64_t i = 0; i < rows * width; ++i)
    src[i] = i % 5 == 0 ? 1e30f : i % 5 == 1 ? -1e30f : dist(rng);
  std::vector<int64_t> index(rows * indexWidth);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = target(rng);
    for (int64_t j = 0; j < indexWidth; ++j)
      index[r * indexWidth + j] = r % 4 == 3 ? target(rng) : t;
  }
  std::vector<float> want = self;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < indexWidth; ++j)
      want[index[r * indexWidth + j] * width + j] += src[r * width + j];
  Tensor out =
      runScatterAdd(makeTensor<float>(F32, {7, width}, self),
                    makeTensor<int64_t>(I64, {rows, indexWidth}, index),
                    makeTensor<float>(F32, {rows, width}, src), 0);
  std::vector<float> got = valuesOf<float>(out);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << "element " << i << ": " << got[i] << ", in order " << want[i];
  // An out-of-range target in a row of one target is still an error.
  std::vector<int64_t> bad(2 * indexWidth, 7);
  expectRuntimeError(
      [&] {
        runScatterAdd(makeTensor<float>(F32, {7, width}, self),
                      makeTensor<int64_t>(I64, {2, indexWidth}, bad),
                      makeTensor<float>(F32, {rows, width}, src), 0);
      },
      {"scatter_add: index 7 is out of range [0, 7) of dim 0"});
}

} // namespace
} // namespace dtorch::rt::test
