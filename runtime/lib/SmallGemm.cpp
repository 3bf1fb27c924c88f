// The small float32 GEMM of bmm (SmallGemm.h).
#include "SmallGemm.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) && defined(__clang__)
#include <immintrin.h>
#define DTORCH_SMALL_GEMM_AVX512 1
#endif

namespace dtorch::rt::detail {

#ifdef DTORCH_SMALL_GEMM_AVX512
namespace {

// Rows i..i+R-1 of C, columns j..j+31 (masked to the columns left): R x 2
// accumulators, one broadcast of op(A) per row and two loads of op(B) per k.
template <int R>
__attribute__((target("avx512f"))) void
rowBlock(bool transA, int64_t i, int64_t j, int64_t n, int64_t k,
         const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
         int64_t ldc) {
  int64_t width = std::min<int64_t>(32, n - j);
  __mmask16 low =
      width >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << width) - 1);
  __mmask16 high = width <= 16 ? 0
                   : width >= 32
                       ? 0xFFFF
                       : static_cast<__mmask16>((1u << (width - 16)) - 1);
  __m512 acc[R][2];
  for (int r = 0; r < R; ++r)
    acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const float *row = b + p * ldb + j;
    __m512 b0 = _mm512_maskz_loadu_ps(low, row);
    __m512 b1 = _mm512_maskz_loadu_ps(high, row + 16);
    for (int r = 0; r < R; ++r) {
      __m512 x =
          _mm512_set1_ps(transA ? a[p * lda + i + r] : a[(i + r) * lda + p]);
      acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float *out = c + (i + r) * ldc + j;
    _mm512_mask_storeu_ps(out, low, acc[r][0]);
    _mm512_mask_storeu_ps(out + 16, high, acc[r][1]);
  }
}

__attribute__((target("avx512f"))) void
smallSgemmAvx512(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                 const float *a, int64_t lda, const float *b, int64_t ldb,
                 float *c, int64_t ldc) {
  // op(B) row by row: a transposed B is packed into [k, n] first.
  alignas(64) float packed[kSmallGemmMaxDim * kSmallGemmMaxDim];
  if (transB) {
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        packed[p * n + j] = b[j * ldb + p];
    b = packed;
    ldb = n;
  }
  for (int64_t j = 0; j < n; j += 32) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4)
      rowBlock<4>(transA, i, j, n, k, a, lda, b, ldb, c, ldc);
    switch (m - i) {
    case 3:
      rowBlock<3>(transA, i, j, n, k, a, lda, b, ldb, c, ldc);
      break;
    case 2:
      rowBlock<2>(transA, i, j, n, k, a, lda, b, ldb, c, ldc);
      break;
    case 1:
      rowBlock<1>(transA, i, j, n, k, a, lda, b, ldb, c, ldc);
      break;
    default:
      break;
    }
  }
}

} // namespace
#endif

bool smallSgemmEnabled() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_SMALL_GEMM");
    if (value && std::string(value) == "0")
      return false;
#ifdef DTORCH_SMALL_GEMM_AVX512
    __builtin_cpu_init();
    return static_cast<bool>(__builtin_cpu_supports("avx512f"));
#else
    return false;
#endif
  }();
  return enabled;
}

bool smallSgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                const float *a, int64_t lda, const float *b, int64_t ldb,
                float *c, int64_t ldc) {
  auto fits = [](int64_t d) { return d >= 1 && d <= kSmallGemmMaxDim; };
  if (!fits(m) || !fits(n) || !fits(k) || !smallSgemmEnabled())
    return false;
#ifdef DTORCH_SMALL_GEMM_AVX512
  smallSgemmAvx512(transA, transB, m, n, k, a, lda, b, ldb, c, ldc);
  return true;
#else
  return false;
#endif
}

} // namespace dtorch::rt::detail
