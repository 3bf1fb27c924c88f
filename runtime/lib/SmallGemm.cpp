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

// The lanes of the columns j..j+width-1 of a 16-column vector (width may
// exceed 16 or be below 1).
__mmask16 columnMask(int64_t width) {
  if (width >= 16)
    return 0xFFFF;
  if (width <= 0)
    return 0;
  return static_cast<__mmask16>((1u << width) - 1);
}

// Rows i..i+R-1 of C, columns j..j+16V-1 (masked to the columns left):
// R x V accumulators, one broadcast of op(A) per row and V loads of op(B)
// per k. Each element is one chain of FMAs over k in increasing order.
template <int R, int V>
__attribute__((target("avx512f"))) void
rowBlock(bool transA, int64_t i, int64_t j, int64_t n, int64_t k,
         const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
         int64_t ldc) {
  __mmask16 mask[V];
  for (int v = 0; v < V; ++v)
    mask[v] = columnMask(n - j - 16 * v);
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v)
      acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const float *row = b + p * ldb + j;
    __m512 bv[V];
    for (int v = 0; v < V; ++v)
      bv[v] = _mm512_maskz_loadu_ps(mask[v], row + 16 * v);
    for (int r = 0; r < R; ++r) {
      __m512 x =
          _mm512_set1_ps(transA ? a[p * lda + i + r] : a[(i + r) * lda + p]);
      for (int v = 0; v < V; ++v)
        acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float *out = c + (i + r) * ldc + j;
    for (int v = 0; v < V; ++v)
      _mm512_mask_storeu_ps(out + 16 * v, mask[v], acc[r][v]);
  }
}

// Rows [i, m) of C in blocks of R rows (the last block of fewer), columns
// j..j+16V-1.
template <int R, int V>
__attribute__((target("avx512f"))) void
rowBlocks(bool transA, int64_t m, int64_t j, int64_t n, int64_t k,
          const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
          int64_t ldc) {
  int64_t i = 0;
  for (; i + R <= m; i += R)
    rowBlock<R, V>(transA, i, j, n, k, a, lda, b, ldb, c, ldc);
  switch (m - i) {
#define DTORCH_SMALL_GEMM_TAIL(rows)                                           \
  case rows:                                                                   \
    if constexpr (rows < R)                                                    \
      rowBlock<rows, V>(transA, i, j, n, k, a, lda, b, ldb, c, ldc);           \
    break;
    DTORCH_SMALL_GEMM_TAIL(7)
    DTORCH_SMALL_GEMM_TAIL(6)
    DTORCH_SMALL_GEMM_TAIL(5)
    DTORCH_SMALL_GEMM_TAIL(4)
    DTORCH_SMALL_GEMM_TAIL(3)
    DTORCH_SMALL_GEMM_TAIL(2)
    DTORCH_SMALL_GEMM_TAIL(1)
#undef DTORCH_SMALL_GEMM_TAIL
  default:
    break;
  }
}

// dst[p * n + jj] = src[(j0 + jj) * lds + p0 + p] for p < 16, jj < 16, masked
// to `rows` source rows (jj) and `cols` source columns (p): a 16x16 block
// of a transposed B, transposed in registers.
__attribute__((target("avx512f"))) void
transposeBlock(const float *src, int64_t lds, int64_t rows, int64_t cols,
               float *dst, int64_t ldd) {
  __mmask16 colMask = columnMask(cols), rowMask = columnMask(rows);
  __m512 r[16], t[16];
#pragma clang loop unroll(full)
  for (int q = 0; q < 16; ++q)
    r[q] = q < rows ? _mm512_maskz_loadu_ps(colMask, src + q * lds)
                    : _mm512_setzero_ps();
  // Unpacks of 32-bit, then 64-bit elements of pairs of rows.
#pragma clang loop unroll(full)
  for (int q = 0; q < 16; q += 2) {
    t[q] = _mm512_unpacklo_ps(r[q], r[q + 1]);
    t[q + 1] = _mm512_unpackhi_ps(r[q], r[q + 1]);
  }
#pragma clang loop unroll(full)
  for (int q = 0; q < 16; q += 4) {
    r[q] = _mm512_castpd_ps(
        _mm512_unpacklo_pd(_mm512_castps_pd(t[q]), _mm512_castps_pd(t[q + 2])));
    r[q + 1] = _mm512_castpd_ps(
        _mm512_unpackhi_pd(_mm512_castps_pd(t[q]), _mm512_castps_pd(t[q + 2])));
    r[q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[q + 1]),
                                                   _mm512_castps_pd(t[q + 3])));
    r[q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[q + 1]),
                                                   _mm512_castps_pd(t[q + 3])));
  }
  // Each 128-bit lane of r[q] now holds a 4x4 block transposed; two
  // rounds of 128-bit lane shuffles put the blocks in place.
#pragma clang loop unroll(full)
  for (int q = 0; q < 4; ++q) {
    t[q] = _mm512_shuffle_f32x4(r[q], r[q + 4], 0x88);
    t[q + 4] = _mm512_shuffle_f32x4(r[q], r[q + 4], 0xdd);
    t[q + 8] = _mm512_shuffle_f32x4(r[q + 8], r[q + 12], 0x88);
    t[q + 12] = _mm512_shuffle_f32x4(r[q + 8], r[q + 12], 0xdd);
  }
#pragma clang loop unroll(full)
  for (int q = 0; q < 8; ++q) {
    r[q] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0x88);
    r[q + 8] = _mm512_shuffle_f32x4(t[q], t[q + 8], 0xdd);
  }
  for (int p = 0; p < cols; ++p)
    _mm512_mask_storeu_ps(dst + p * ldd, rowMask, r[p]);
}

__attribute__((target("avx512f"))) void
smallSgemmAvx512(bool blocked, bool transA, bool transB, int64_t m, int64_t n,
                 int64_t k, const float *a, int64_t lda, const float *b,
                 int64_t ldb, float *c, int64_t ldc) {
  // op(B) row by row: a transposed B is packed into [k, n] first.
  alignas(64) float packed[kSmallGemmMaxDim * kSmallGemmMaxDim];
  if (transB) {
    if (blocked) {
      for (int64_t j = 0; j < n; j += 16)
        for (int64_t p = 0; p < k; p += 16)
          transposeBlock(b + j * ldb + p, ldb, std::min<int64_t>(16, n - j),
                         std::min<int64_t>(16, k - p), packed + p * n + j, n);
    } else {
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j)
          packed[p * n + j] = b[j * ldb + p];
    }
    b = packed;
    ldb = n;
  }
  for (int64_t j = 0; j < n; j += 32) {
    if (blocked && n - j <= 16)
      // One vector of columns: 8 rows give the 8 independent chains that
      // 4 rows of two vectors give, without the FMAs of an empty vector.
      rowBlocks<8, 1>(transA, m, j, n, k, a, lda, b, ldb, c, ldc);
    else
      rowBlocks<4, 2>(transA, m, j, n, k, a, lda, b, ldb, c, ldc);
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

bool smallSgemmBlockingEnabled() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_SMALL_GEMM_BLOCKING");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

bool smallSgemmWith(bool blocked, bool transA, bool transB, int64_t m,
                    int64_t n, int64_t k, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float *c, int64_t ldc) {
  auto fits = [](int64_t d) { return d >= 1 && d <= kSmallGemmMaxDim; };
  if (!fits(m) || !fits(n) || !fits(k) || !smallSgemmEnabled())
    return false;
#ifdef DTORCH_SMALL_GEMM_AVX512
  smallSgemmAvx512(blocked, transA, transB, m, n, k, a, lda, b, ldb, c, ldc);
  return true;
#else
  (void)blocked;
  return false;
#endif
}

bool smallSgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                const float *a, int64_t lda, const float *b, int64_t ldb,
                float *c, int64_t ldc) {
  return smallSgemmWith(smallSgemmBlockingEnabled(), transA, transB, m, n, k, a,
                        lda, b, ldb, c, ldc);
}

} // namespace dtorch::rt::detail
