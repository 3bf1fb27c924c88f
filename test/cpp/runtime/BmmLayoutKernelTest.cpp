// The bmm kernel reading and writing permuted layouts (`a_perm`, `b_perm`,
// `out_perm`: the head transposes that --rank-fold-transpose-into-bmm
// folds), in every numeric dtype: bit for bit the result of the transpose
// kernels around a dense bmm, and close to a reference computed from the
// stored operands element by element.
#include "KernelTestSupport.h"

#include "dtorch/runtime/Blas.h"
#include "dtorch/runtime/Shape.h"

#include <cstring>
#include <string>

namespace dtorch::rt::test {
namespace {

template <class C> class BmmLayout : public ::testing::Test {};
TYPED_TEST_SUITE(BmmLayout, NumericCases);

// transpose(shape, perm): dim d of the result is dim perm[d].
Shape permuted(const Shape &shape, const std::vector<int64_t> &perm) {
  Shape out(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    out[d] = shape[perm[d]];
  return out;
}

std::vector<int64_t> inverse(const std::vector<int64_t> &perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t d = 0; d < perm.size(); ++d)
    inv[perm[d]] = static_cast<int64_t>(d);
  return inv;
}

Tensor transposeKernel(const Tensor &x, const std::vector<int64_t> &perm) {
  return runKernel("transpose", {x}, x.dtype(), permuted(x.shape(), perm),
                   [&](Instruction &inst) { setInts(inst, "perm", perm); });
}

// Element `index` (row-major over `shape`) of a tensor stored as
// transpose(logical, ...) is read through `strides` of the logical dims.
int64_t offsetOf(const std::vector<int64_t> &index,
                 const std::vector<int64_t> &strides) {
  int64_t offset = 0;
  for (size_t d = 0; d < index.size(); ++d)
    offset += index[d] * strides[d];
  return offset;
}

struct LayoutCase {
  std::vector<int64_t> aPerm, bPerm, outPerm; // empty: dense
};

std::string describe(const LayoutCase &c, bool ta, bool tb) {
  auto text = [](const std::vector<int64_t> &p) {
    return p.empty() ? std::string("dense") : ::dtorch::rt::shapeToString(p);
  };
  return "a " + text(c.aPerm) + " b " + text(c.bPerm) + " out " +
         text(c.outPerm) + " ta=" + std::to_string(ta) +
         " tb=" + std::to_string(tb);
}

TYPED_TEST(BmmLayout, PermutedLayoutsEqualTheTransposesAroundADenseBmm) {
  using T = typename TypeParam::T;
  DType dtype = TypeParam::dtype;
  // Logical [B, H, M, K] x [B, H, K, N] (attention: B=3, H=2 heads), and a
  // rank-5 case with three batch dims moved around.
  const int64_t B = 3, H = 2, M = 5, K = 4, N = 6;
  const std::vector<int64_t> heads = {0, 2, 1, 3};
  const LayoutCase cases4[] = {
      {heads, {}, {}},       {{}, heads, {}},
      {{}, {}, heads},       {heads, heads, {}},
      {heads, heads, heads}, {{2, 0, 1, 3}, heads, {1, 2, 0, 3}},
  };
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const LayoutCase &c : cases4) {
        // Logical operands as the dense bmm reads them.
        Shape la = {B, H, ta ? K : M, ta ? M : K};
        Shape lb = {B, H, tb ? N : K, tb ? K : N};
        Shape lout = {B, H, M, N};
        auto av = randomValues<T>(B * H * M * K, -5, 5, 21);
        auto bv = randomValues<T>(B * H * K * N, -5, 5, 22);
        Tensor aLogical = makeTensor<T>(dtype, la, av);
        Tensor bLogical = makeTensor<T>(dtype, lb, bv);
        // Stored so that transpose(stored, perm) is the logical operand.
        Tensor aStored = c.aPerm.empty()
                             ? aLogical
                             : transposeKernel(aLogical, inverse(c.aPerm));
        Tensor bStored = c.bPerm.empty()
                             ? bLogical
                             : transposeKernel(bLogical, inverse(c.bPerm));
        auto flagsAndPerms = [&](Instruction &inst) {
          if (ta)
            (*inst.mutable_attrs())["trans_a"].set_i(1);
          if (tb)
            (*inst.mutable_attrs())["trans_b"].set_i(1);
          if (!c.aPerm.empty())
            setInts(inst, "a_perm", c.aPerm);
          if (!c.bPerm.empty())
            setInts(inst, "b_perm", c.bPerm);
          if (!c.outPerm.empty())
            setInts(inst, "out_perm", c.outPerm);
        };
        auto denseFlags = [&](Instruction &inst) {
          if (ta)
            (*inst.mutable_attrs())["trans_a"].set_i(1);
          if (tb)
            (*inst.mutable_attrs())["trans_b"].set_i(1);
        };
        Shape storedOut = c.outPerm.empty() ? lout : permuted(lout, c.outPerm);
        Tensor folded = runKernel("bmm", {aStored, bStored}, dtype, storedOut,
                                  flagsAndPerms);
        Tensor dense =
            runKernel("bmm", {aLogical, bLogical}, dtype, lout, denseFlags);
        Tensor expected =
            c.outPerm.empty() ? dense : transposeKernel(dense, c.outPerm);
        ASSERT_EQ(folded.shape(), expected.shape()) << describe(c, ta, tb);
        std::vector<T> got = valuesOf<T>(folded), want = valuesOf<T>(expected);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(T)), 0)
              << describe(c, ta, tb) << " element " << i;
        // And against the definition, read from the stored operands.
        std::vector<T> as = valuesOf<T>(aStored), bs = valuesOf<T>(bStored);
        auto logicalStrides = [](const Shape &stored,
                                 const std::vector<int64_t> &perm) {
          std::vector<int64_t> s = ::dtorch::rt::rowMajorStrides(stored),
                               out(s.size());
          for (size_t d = 0; d < s.size(); ++d)
            out[d] = perm.empty() ? s[d] : s[perm[d]];
          return out;
        };
        std::vector<int64_t> sa = logicalStrides(aStored.shape(), c.aPerm);
        std::vector<int64_t> sb = logicalStrides(bStored.shape(), c.bPerm);
        std::vector<double> reference(B * H * M * N);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < H; ++h)
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) {
                double sum = 0;
                for (int64_t p = 0; p < K; ++p) {
                  int64_t ai = offsetOf(ta ? std::vector<int64_t>{b, h, p, i}
                                           : std::vector<int64_t>{b, h, i, p},
                                        sa);
                  int64_t bi = offsetOf(tb ? std::vector<int64_t>{b, h, j, p}
                                           : std::vector<int64_t>{b, h, p, j},
                                        sb);
                  sum +=
                      static_cast<double>(as[ai]) * static_cast<double>(bs[bi]);
                }
                reference[((b * H + h) * M + i) * N + j] = sum;
              }
        std::vector<T> denseValues = valuesOf<T>(dense);
        expectClose(denseValues, reference, TypeParam::tol * 10,
                    describe(c, ta, tb));
      }
}

TYPED_TEST(BmmLayout, FiveDimsWithThreeBatchDims) {
  using T = typename TypeParam::T;
  DType dtype = TypeParam::dtype;
  const std::vector<int64_t> aPerm = {1, 0, 2, 3, 4}, outPerm = {2, 0, 1, 3, 4};
  Shape la = {2, 3, 2, 4, 3}, lb = {2, 3, 2, 3, 5}, lout = {2, 3, 2, 4, 5};
  Tensor aLogical =
      makeTensor<T>(dtype, la, randomValues<T>(2 * 3 * 2 * 4 * 3, -4, 4, 5));
  Tensor b =
      makeTensor<T>(dtype, lb, randomValues<T>(2 * 3 * 2 * 3 * 5, -4, 4, 6));
  Tensor aStored = transposeKernel(aLogical, inverse(aPerm));
  Tensor folded = runKernel("bmm", {aStored, b}, dtype, permuted(lout, outPerm),
                            [&](Instruction &inst) {
                              setInts(inst, "a_perm", aPerm);
                              setInts(inst, "out_perm", outPerm);
                            });
  Tensor expected =
      transposeKernel(runKernel("bmm", {aLogical, b}, dtype, lout), outPerm);
  std::vector<T> got = valuesOf<T>(folded), want = valuesOf<T>(expected);
  ASSERT_EQ(folded.shape(), expected.shape());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(T)), 0) << "element " << i;
}

// A perm must be a permutation of the dims that keeps the last dim last,
// and the shapes must match once it is applied.
TYPED_TEST(BmmLayout, PermsAreChecked) {
  using T = typename TypeParam::T;
  DType dtype = TypeParam::dtype;
  auto x = makeTensor<T>(dtype, {2, 4, 3, 5}, randomValues<T>(120, -2, 2, 1));
  auto y = makeTensor<T>(dtype, {2, 3, 5, 6}, randomValues<T>(180, -2, 2, 2));
  auto with = [](const char *name, std::vector<int64_t> perm) {
    return [=](Instruction &inst) { setInts(inst, name, perm); };
  };
  EXPECT_EQ(runKernel("bmm", {x, y}, dtype, {2, 3, 4, 6},
                      with("a_perm", {0, 2, 1, 3}))
                .shape(),
            (Shape{2, 3, 4, 6}));
  expectRuntimeError(
      [&] {
        runKernel("bmm", {x, y}, dtype, {2, 3, 4, 6},
                  with("a_perm", {0, 2, 3, 1}));
      },
      {"'a_perm' must be a permutation of the 4 dims that keeps the last dim "
       "last"});
  expectRuntimeError(
      [&] {
        runKernel("bmm", {x, y}, dtype, {2, 3, 4, 6},
                  with("a_perm", {0, 2, 2, 3}));
      },
      {"'a_perm' must be a permutation"});
  expectRuntimeError(
      [&] { runKernel("bmm", {x, y}, dtype, {2, 3, 4, 6}); },
      {"bmm shapes [2, 4, 3, 5] x [2, 3, 5, 6] -> [2, 3, 4, 6]"});
  expectRuntimeError(
      [&] {
        runKernel("bmm", {x, y}, dtype, {2, 3, 4, 6},
                  with("out_perm", {0, 2, 1, 3}));
      },
      {"(out_perm [0, 2, 1, 3])", "do not match"});
}

// float32 bmm products up to 64 in every dim run the runtime's small GEMM
// (SmallGemm.h) on AVX-512 hosts and the BLAS elsewhere: attention's
// shapes, column tails that are not a multiple of 16 or 32, rows that are
// not a multiple of 4, every flag, against the BLAS and a float64
// reference within float32 GEMM tolerance (the summation order differs
// from the BLAS's).
TEST(BmmSmallProducts, Float32MatchesTheBlasAndAReference) {
  const int64_t shapes[][3] = {{32, 16, 32}, {32, 32, 16}, {17, 33, 40},
                               {64, 64, 64}, {1, 1, 1},    {5, 64, 3},
                               {7, 1, 49},   {3, 5, 65}};
  const int64_t batch = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto &s : shapes) {
        int64_t m = s[0], k = s[1], n = s[2];
        auto av = randomValues<float>(batch * m * k, -3, 3, 31);
        auto bv = randomValues<float>(batch * k * n, -3, 3, 32);
        Shape as = {batch, ta ? k : m, ta ? m : k};
        Shape bs = {batch, tb ? n : k, tb ? k : n};
        Tensor out = runKernel(
            "bmm",
            {makeTensor<float>(F32, as, av), makeTensor<float>(F32, bs, bv)},
            F32, {batch, m, n}, [&](Instruction &inst) {
              if (ta)
                (*inst.mutable_attrs())["trans_a"].set_i(1);
              if (tb)
                (*inst.mutable_attrs())["trans_b"].set_i(1);
            });
        std::vector<float> got = valuesOf<float>(out);
        std::vector<float> blasOut(batch * m * n);
        std::vector<double> reference(batch * m * n);
        for (int64_t q = 0; q < batch; ++q) {
          const float *a = av.data() + q * m * k, *b = bv.data() + q * k * n;
          ::dtorch::rt::blas::sgemm(ta, tb, m, n, k, 1.0f, a, ta ? m : k, b,
                                    tb ? k : n, 0.0f,
                                    blasOut.data() + q * m * n, n);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double sum = 0;
              for (int64_t p = 0; p < k; ++p)
                sum += static_cast<double>(ta ? a[p * m + i] : a[i * k + p]) *
                       (tb ? b[j * k + p] : b[p * n + j]);
              reference[(q * m + i) * n + j] = sum;
            }
        }
        std::string what =
            "m=" + std::to_string(m) + " k=" + std::to_string(k) +
            " n=" + std::to_string(n) + " ta=" + std::to_string(ta) +
            " tb=" + std::to_string(tb);
        // A sum of k products of values up to 3 in magnitude.
        double tol = 2e-5 * static_cast<double>(k) * 9;
        expectClose(got, reference, tol, what);
        std::vector<double> blasValues(blasOut.begin(), blasOut.end());
        expectClose(got, blasValues, tol, what + " vs BLAS");
      }
}

} // namespace
} // namespace dtorch::rt::test
