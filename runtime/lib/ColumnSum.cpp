// The vectorized float32 column sum of `sum` (ColumnSum.h).
#include "ColumnSum.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) && defined(__clang__)
#include <immintrin.h>
#define DTORCH_COLUMN_SUM_AVX512 1
#endif

namespace dtorch::rt::detail {

#ifdef DTORCH_COLUMN_SUM_AVX512
namespace {

// Column tiles of 8 vectors of 8 doubles: the accumulators of a tile stay in
// registers over all the rows.
constexpr int kVectors = 8;
constexpr int64_t kTile = 8 * kVectors;

__attribute__((target("avx512f,avx512vl"))) void
columnSumAvx512(const float *x, int64_t outer, int64_t reduced, int64_t inner,
                double *acc) {
  for (int64_t o = 0; o < outer; ++o) {
    const float *block = x + o * reduced * inner;
    double *out = acc + o * inner;
    for (int64_t k0 = 0; k0 < inner; k0 += kTile) {
      int64_t width = std::min(kTile, inner - k0);
      __mmask8 mask[kVectors];
      __m512d sum[kVectors];
#pragma clang loop unroll(full)
      for (int v = 0; v < kVectors; ++v) {
        int64_t lanes = std::clamp<int64_t>(width - 8 * v, 0, 8);
        mask[v] = static_cast<__mmask8>((1u << lanes) - 1);
        sum[v] = _mm512_setzero_pd();
      }
      for (int64_t r = 0; r < reduced; ++r) {
        const float *row = block + r * inner + k0;
#pragma clang loop unroll(full)
        for (int v = 0; v < kVectors; ++v) {
          __m256 f = _mm256_maskz_loadu_ps(mask[v], row + 8 * v);
          sum[v] = _mm512_add_pd(sum[v], _mm512_cvtps_pd(f));
        }
      }
#pragma clang loop unroll(full)
      for (int v = 0; v < kVectors; ++v)
        _mm512_mask_storeu_pd(out + k0 + 8 * v, mask[v], sum[v]);
    }
  }
}

} // namespace
#endif

bool columnSumEnabled() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_COLUMN_SUM");
    if (value && std::string(value) == "0")
      return false;
#ifdef DTORCH_COLUMN_SUM_AVX512
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
  }();
  return enabled;
}

bool columnSumFloat32(const float *x, int64_t outer, int64_t reduced,
                      int64_t inner, double *acc) {
  if (!columnSumEnabled())
    return false;
#ifdef DTORCH_COLUMN_SUM_AVX512
  columnSumAvx512(x, outer, reduced, inner, acc);
  return true;
#else
  (void)x, (void)outer, (void)reduced, (void)inner, (void)acc;
  return false;
#endif
}

} // namespace dtorch::rt::detail
