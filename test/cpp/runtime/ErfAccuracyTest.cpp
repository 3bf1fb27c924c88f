//===- ErfAccuracyTest.cpp - the float32 erf's error against float64 erf --===//
//
// polynomial::erfPiecewise (dtorch/runtime/PolynomialMath.h; what gelu's
// erf form computes, generated and hand-written, unless
// DTORCH_ERF_PIECEWISE=0) against float64 erf, in ulp of the float32
// result: a dense sweep of float32 inputs up to 6, past the saturation
// point (denseSweep; odd symmetry checked on the way), its
// special values, and MLIR's rational approximation (polynomial::erf) on
// the same sweep for comparison. DTORCH_EXHAUSTIVE_FLOAT32=1 sweeps every
// float32 instead (a few minutes).
//
//===----------------------------------------------------------------------===//
#include "dtorch/runtime/PolynomialMath.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace poly = dtorch::rt::polynomial;

namespace {

/// The bound the tests hold erfPiecewise to.
const double kBound = 1.25;

/// The spacing of float32 values at `v` (a float64 value): 2^(e - 23) for
/// |v| in [2^e, 2^(e+1)), 2^-149 among the denormals.
double ulpOf(double v) {
  int e = 0;
  std::frexp(std::fabs(v), &e); // |v| = f 2^e, f in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1, -126) - 23);
}

struct Worst {
  double ulp = 0;
  float at = 0;
};

/// The largest error of `f` in ulp over the non-negative float32 bit
/// patterns [first, last] taken `stride` apart; each also at -x, where the
/// result must be exactly minus the one at x when `odd` (MLIR's erf gives
/// +0 for -0).
template <class F>
Worst sweep(F f, uint32_t first, uint32_t last, uint32_t stride, bool odd) {
  Worst worst;
  for (uint64_t bits = first; bits <= last; bits += stride) {
    float x = poly::floatOf(static_cast<uint32_t>(bits));
    float y = f(x);
    double exact = std::erf(static_cast<double>(x));
    double err = std::fabs(static_cast<double>(y) - exact) / ulpOf(exact);
    if (err > worst.ulp || std::isnan(y))
      worst = {std::isnan(y) ? INFINITY : err, x};
    float negative = f(-x);
    if (odd && poly::bitsOf(negative) != (poly::bitsOf(y) ^ 0x80000000u))
      ADD_FAILURE() << "erf(-x) is not -erf(x) at x = " << x << ": " << y
                    << ", " << negative;
  }
  return worst;
}

bool exhaustive() {
  const char *v = std::getenv("DTORCH_EXHAUSTIVE_FLOAT32");
  return v && std::string(v) == "1";
}

/// The dense sweep: every 13th float32 in [0.25, 6] (where the
/// polynomials are hardest: the split at 1 and the approach to the
/// saturation point), every 127th below 0.25 (erf(x) / x a slowly varying
/// polynomial there); every float32 with DTORCH_EXHAUSTIVE_FLOAT32=1.
template <class F> Worst denseSweep(F f, bool odd) {
  if (exhaustive())
    return sweep(f, 0, 0x7f7fffffu, 1, odd);
  const uint32_t quarter = 0x3e800000u, six = 0x40c00000u;
  Worst low = sweep(f, 0, quarter - 1, 127, odd),
        high = sweep(f, quarter, six, 13, odd);
  return low.ulp > high.ulp ? low : high;
}

} // namespace

TEST(ErfAccuracy, PiecewiseIsWithinItsBoundOverADenseSweep) {
  Worst w = denseSweep(poly::erfPiecewise, true);
  std::printf("erfPiecewise: max %.3f ulp at x = %.9g\n", w.ulp, w.at);
  EXPECT_LE(w.ulp, kBound) << "at x = " << w.at;
}

TEST(ErfAccuracy, PiecewiseIsMoreAccurateThanMlirsRationalErf) {
  // The same sweep as above on MLIR's approximation (4.79 ulp at most):
  // the piecewise polynomial must not be the worse of the two.
  Worst mlir = denseSweep(poly::erf, false);
  Worst piecewise = denseSweep(poly::erfPiecewise, true);
  std::printf("MLIR erf: max %.3f ulp at x = %.9g\n", mlir.ulp, mlir.at);
  EXPECT_GT(mlir.ulp, 4.0);
  EXPECT_LT(piecewise.ulp, mlir.ulp / 2);
}

TEST(ErfAccuracy, PiecewiseSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(poly::bitsOf(poly::erfPiecewise(0.0f)), 0u);
  EXPECT_EQ(poly::bitsOf(poly::erfPiecewise(-0.0f)), 0x80000000u);
  EXPECT_EQ(poly::erfPiecewise(inf), 1.0f);
  EXPECT_EQ(poly::erfPiecewise(-inf), -1.0f);
  EXPECT_TRUE(std::isnan(poly::erfPiecewise(std::nanf(""))));
  EXPECT_TRUE(std::isnan(poly::erfPiecewise(-std::nanf(""))));
  EXPECT_EQ(poly::erfPiecewise(std::numeric_limits<float>::max()), 1.0f);
  // From the saturation point on, erf rounds to 1; just below it, not.
  EXPECT_EQ(poly::erfPiecewise(poly::kErfSaturation), 1.0f);
  float below = std::nextafter(poly::kErfSaturation, 0.0f);
  EXPECT_LT(std::erf(static_cast<double>(below)), 1.0 - 0x1p-25);
  EXPECT_GE(std::erf(static_cast<double>(poly::kErfSaturation)), 1.0 - 0x1p-25);
  // Both sides of the split at 1 and the smallest inputs (denormals:
  // erf(x) = 2x/sqrt(pi), rounded).
  for (float x : {std::nextafter(poly::kErfSplit, 0.0f), poly::kErfSplit,
                  std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), 1e-30f}) {
    double exact = std::erf(static_cast<double>(x));
    EXPECT_LE(std::fabs(poly::erfPiecewise(x) - exact) / ulpOf(exact), kBound)
        << "at x = " << x;
  }
}
