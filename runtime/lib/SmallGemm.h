// A float32 GEMM for the small products of a bmm (attention's per-head
// products, a few dozen rows and columns): register-blocked AVX-512 code
// without the per-call setup of a BLAS call, which costs as much as such a
// product itself.
#pragma once

#include <cstdint>

namespace dtorch::rt::detail {

/// The largest m, n and k smallSgemm takes.
inline constexpr int64_t kSmallGemmMaxDim = 64;

/// Whether smallSgemm runs here: the host has AVX-512F and
/// DTORCH_SMALL_GEMM is not "0" (read once per process; for comparison).
bool smallSgemmEnabled();

/// Row-major C[m,n] = op(A)[m,k] * op(B)[k,n] (beta 0) with row strides
/// lda, ldb, ldc; op(A) is A (stored [m,k]) or A^T (stored [k,m]) with
/// `transA`, likewise B. Each element is one chain of fused multiply-adds
/// over k in increasing order, starting from zero. Returns false, touching
/// nothing, when it is not enabled or a dim is outside 1..kSmallGemmMaxDim.
bool smallSgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                const float *a, int64_t lda, const float *b, int64_t ldb,
                float *c, int64_t ldc);

/// Whether smallSgemm uses its tuned blocking: products of at most 16
/// columns in blocks of 8 rows by one vector (rather than 4 rows by two
/// vectors, half of them empty), and a transposed B packed by 16x16
/// in-register transposes (rather than element by element). The products
/// are the same chains of FMAs, so the results are bitwise the same either
/// way; DTORCH_SMALL_GEMM_BLOCKING=0 turns it off (read once per process;
/// for comparison).
bool smallSgemmBlockingEnabled();

/// smallSgemm with the tuned blocking on (`blocked`) or off, whatever the
/// environment says (tests and benchmarks compare the two).
bool smallSgemmWith(bool blocked, bool transA, bool transB, int64_t m,
                    int64_t n, int64_t k, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float *c, int64_t ldc);

} // namespace dtorch::rt::detail
