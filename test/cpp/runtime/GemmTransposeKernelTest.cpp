// The matmul and bmm kernels with transposed operands (`trans_a`, `trans_b`)
// in every numeric dtype, against a reference that reads the stored
// (transposed) operands element by element.
#include "KernelTestSupport.h"

#include <string>

namespace dtorch::rt::test {
namespace {

template <class C> class GemmTranspose : public ::testing::Test {};
TYPED_TEST_SUITE(GemmTranspose, NumericCases);

// op(a)[M,K] * op(b)[K,N] for `batch` products; a is stored [batch, M, K]
// or [batch, K, M] (ta), b [batch, K, N] or [batch, N, K] (tb).
template <class T>
std::vector<double> reference(const std::vector<T> &a, const std::vector<T> &b,
                              bool ta, bool tb, int64_t batch, int64_t m,
                              int64_t k, int64_t n) {
  std::vector<double> out(batch * m * n, 0.0);
  for (int64_t s = 0; s < batch; ++s) {
    const T *as = a.data() + s * m * k;
    const T *bs = b.data() + s * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p)
          sum += static_cast<double>(ta ? as[p * m + i] : as[i * k + p]) *
                 static_cast<double>(tb ? bs[j * k + p] : bs[p * n + j]);
        out[(s * m + i) * n + j] = sum;
      }
  }
  return out;
}

std::function<void(Instruction &)> flags(bool ta, bool tb) {
  return [=](Instruction &inst) {
    if (ta)
      (*inst.mutable_attrs())["trans_a"].set_i(1);
    if (tb)
      (*inst.mutable_attrs())["trans_b"].set_i(1);
  };
}

// The stored shape of an operand of logical [.., rows, cols].
Shape stored(Shape lead, int64_t rows, int64_t cols, bool transposed) {
  lead.push_back(transposed ? cols : rows);
  lead.push_back(transposed ? rows : cols);
  return lead;
}

std::string name(const char *op, bool ta, bool tb, int64_t m, int64_t k,
                 int64_t n) {
  return std::string(op) + " ta=" + std::to_string(ta) +
         " tb=" + std::to_string(tb) + " m=" + std::to_string(m) +
         " k=" + std::to_string(k) + " n=" + std::to_string(n);
}

TYPED_TEST(GemmTranspose, MatmulEveryFlagCombination) {
  using T = typename TypeParam::T;
  const int64_t shapes[][3] = {{3, 5, 4},   {1, 1, 1}, {7, 2, 9},
                               {17, 33, 5}, {2, 0, 3}, {0, 4, 3}};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto &s : shapes) {
        int64_t m = s[0], k = s[1], n = s[2];
        auto a = randomValues<T>(m * k, -5, 5, 11);
        auto b = randomValues<T>(k * n, -5, 5, 12);
        Tensor out = runKernel(
            "matmul",
            {makeTensor<T>(TypeParam::dtype, stored({}, m, k, ta), a),
             makeTensor<T>(TypeParam::dtype, stored({}, k, n, tb), b)},
            TypeParam::dtype, {m, n}, flags(ta, tb));
        expectClose(valuesOf<T>(out), reference(a, b, ta, tb, 1, m, k, n),
                    TypeParam::tol * 10, name("matmul", ta, tb, m, k, n));
      }
}

TYPED_TEST(GemmTranspose, BmmEveryFlagCombination) {
  using T = typename TypeParam::T;
  // One batch dim and two; the products differ per batch.
  const Shape leads[] = {{3}, {2, 3}};
  const int64_t shapes[][3] = {{2, 4, 5}, {6, 3, 1}, {9, 16, 7}};
  for (const Shape &lead : leads)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const auto &s : shapes) {
          int64_t m = s[0], k = s[1], n = s[2];
          int64_t batch = 1;
          for (int64_t d : lead)
            batch *= d;
          auto a = randomValues<T>(batch * m * k, -5, 5, 13);
          auto b = randomValues<T>(batch * k * n, -5, 5, 14);
          Shape outShape = lead;
          outShape.insert(outShape.end(), {m, n});
          Tensor out = runKernel(
              "bmm",
              {makeTensor<T>(TypeParam::dtype, stored(lead, m, k, ta), a),
               makeTensor<T>(TypeParam::dtype, stored(lead, k, n, tb), b)},
              TypeParam::dtype, outShape, flags(ta, tb));
          expectClose(valuesOf<T>(out), reference(a, b, ta, tb, batch, m, k, n),
                      TypeParam::tol * 10,
                      name("bmm", ta, tb, m, k, n) +
                          " batch dims=" + std::to_string(lead.size()));
        }
}

// The shapes are checked against the flags: a [2,3] x [2,4] product is valid
// only with a transposed; a flag other than 0 or 1 is refused.
TYPED_TEST(GemmTranspose, ShapesAndFlagsAreChecked) {
  using T = typename TypeParam::T;
  DType dtype = TypeParam::dtype;
  auto a = makeTensor<T>(dtype, {2, 3}, randomValues<T>(6, -2, 2, 1));
  auto b = makeTensor<T>(dtype, {2, 4}, randomValues<T>(8, -2, 2, 2));
  EXPECT_EQ(
      runKernel("matmul", {a, b}, dtype, {3, 4}, flags(true, false)).shape(),
      (Shape{3, 4}));
  expectRuntimeError([&] { runKernel("matmul", {a, b}, dtype, {3, 4}); },
                     {"matmul shapes [2, 3] x [2, 4]"});
  expectRuntimeError(
      [&] { runKernel("matmul", {a, b}, dtype, {3, 4}, flags(true, true)); },
      {"matmul shapes [2, 3] x [2, 4] -> [3, 4] (a transposed) (b transposed)",
       "do not match"});
  expectRuntimeError(
      [&] {
        runKernel("matmul", {a, b}, dtype, {3, 4}, [](Instruction &inst) {
          (*inst.mutable_attrs())["trans_a"].set_i(2);
        });
      },
      {"attribute 'trans_a' must be 0 or 1, got 2"});
  auto x = makeTensor<T>(dtype, {2, 3, 4}, randomValues<T>(24, -2, 2, 3));
  auto y = makeTensor<T>(dtype, {2, 5, 4}, randomValues<T>(40, -2, 2, 4));
  EXPECT_EQ(
      runKernel("bmm", {x, y}, dtype, {2, 3, 5}, flags(false, true)).shape(),
      (Shape{2, 3, 5}));
  expectRuntimeError(
      [&] { runKernel("bmm", {x, y}, dtype, {2, 3, 5}, flags(true, true)); },
      {"bmm shapes [2, 3, 4] x [2, 5, 4] -> [2, 3, 5] (a transposed) (b "
       "transposed)"});
}

} // namespace
} // namespace dtorch::rt::test
