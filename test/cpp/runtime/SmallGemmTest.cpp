// The runtime's small float32 GEMM (runtime/lib/SmallGemm.h) against its
// contract, bit for bit: every element of C is one chain of fused
// multiply-adds over k in increasing order, starting from zero. Both
// blockings (DTORCH_SMALL_GEMM_BLOCKING) are checked, on every flag,
// attention's shapes, odd sizes and row strides wider than the rows.
#include "../../../runtime/lib/SmallGemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace dtorch::rt::test {
namespace {

using detail::smallSgemmEnabled;
using detail::smallSgemmWith;

struct Case {
  int64_t m, n, k;
};

// C = op(A) op(B) as chains of std::fma in float, k increasing.
std::vector<float> fmaReference(bool ta, bool tb, const Case &s,
                                const std::vector<float> &a, int64_t lda,
                                const std::vector<float> &b, int64_t ldb) {
  std::vector<float> c(static_cast<size_t>(s.m * s.n));
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < s.k; ++p)
        acc = std::fma(ta ? a[p * lda + i] : a[i * lda + p],
                       tb ? b[j * ldb + p] : b[p * ldb + j], acc);
      c[i * s.n + j] = acc;
    }
  return c;
}

TEST(SmallGemm, BothBlockingsAreTheFmaChainsBitForBit) {
  if (!smallSgemmEnabled())
    GTEST_SKIP() << "the small GEMM needs an AVX-512F host (and "
                    "DTORCH_SMALL_GEMM not 0)";
  const Case cases[] = {{32, 16, 32}, {32, 32, 16}, {32, 16, 16}, {17, 33, 40},
                        {64, 64, 64}, {1, 1, 1},    {5, 64, 3},   {7, 1, 49},
                        {9, 15, 17},  {13, 16, 1},  {8, 17, 64},  {64, 5, 31},
                        {3, 48, 33},  {63, 31, 47}};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  int checked = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Case &s : cases)
        for (int64_t pad : {0, 5}) {
          // Row strides wider than the rows (attention's permuted layouts).
          int64_t lda = (ta ? s.m : s.k) + pad, ldb = (tb ? s.k : s.n) + pad;
          int64_t ldc = s.n + pad;
          std::vector<float> a(static_cast<size_t>((ta ? s.k : s.m) * lda));
          std::vector<float> b(static_cast<size_t>((tb ? s.n : s.k) * ldb));
          for (float &x : a)
            x = dist(rng);
          for (float &x : b)
            x = dist(rng);
          std::vector<float> want = fmaReference(ta, tb, s, a, lda, b, ldb);
          for (bool blocked : {false, true}) {
            const float sentinel = 12345.0f;
            std::vector<float> c(static_cast<size_t>(s.m * ldc), sentinel);
            ASSERT_TRUE(smallSgemmWith(blocked, ta, tb, s.m, s.n, s.k, a.data(),
                                       lda, b.data(), ldb, c.data(), ldc));
            std::string what =
                "m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                " k=" + std::to_string(s.k) + " ta=" + std::to_string(ta) +
                " tb=" + std::to_string(tb) + " pad=" + std::to_string(pad) +
                " blocked=" + std::to_string(blocked);
            int bad = 0;
            for (int64_t i = 0; i < s.m && bad < 5; ++i)
              for (int64_t j = 0; j < ldc && bad < 5; ++j) {
                float got = c[i * ldc + j];
                float expect = j < s.n ? want[i * s.n + j] : sentinel;
                if (std::memcmp(&got, &expect, sizeof got) != 0) {
                  ++bad;
                  ADD_FAILURE() << what << ": C[" << i << "][" << j
                                << "] = " << got << ", expected " << expect
                                << (j < s.n ? "" : " (padding, untouched)");
                }
              }
            ++checked;
          }
        }
  EXPECT_EQ(checked, 4 * 14 * 2 * 2);
}

TEST(SmallGemm, OutsideItsSizesItTouchesNothing) {
  std::vector<float> a(65 * 65, 1.0f), b(65 * 65, 1.0f), c(65 * 65, 7.0f);
  for (bool blocked : {false, true}) {
    EXPECT_FALSE(smallSgemmWith(blocked, false, false, 65, 4, 4, a.data(), 65,
                                b.data(), 65, c.data(), 65));
    EXPECT_FALSE(smallSgemmWith(blocked, false, true, 4, 4, 0, a.data(), 65,
                                b.data(), 65, c.data(), 65));
  }
  for (float x : c)
    ASSERT_EQ(x, 7.0f);
}

} // namespace
} // namespace dtorch::rt::test
