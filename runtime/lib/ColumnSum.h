// The float32 `sum` over the leading dims of a collapsed reduction
// [outer, reduced, inner] with inner > 1 (a bias gradient: the sum of
// [tokens, features] over the tokens): vectorized across the columns, each
// column still summed in increasing order in float64, so the results are
// bitwise the generic loop's.
#pragma once

#include <cstdint>

namespace dtorch::rt::detail {

/// Whether columnSumFloat32 runs here: the host has AVX-512F/VL and
/// DTORCH_COLUMN_SUM is not "0" (read once per process; for comparison).
bool columnSumEnabled();

/// acc[o * inner + k] = sum over r = 0, 1, ..., reduced - 1 (in that order,
/// from +0.0) of double(x[(o * reduced + r) * inner + k]). Returns false,
/// touching nothing, when it is not enabled.
bool columnSumFloat32(const float *x, int64_t outer, int64_t reduced,
                      int64_t inner, double *acc);

} // namespace dtorch::rt::detail
