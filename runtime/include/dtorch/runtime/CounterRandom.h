// The counter-based random numbers of the `random` kernel, usable from host
// C++ and from CUDA device code, so the CPU and CUDA kernels give bitwise
// the same tensor for the same seed (docs/program-format.md, `random`).
//
// Element g of a tensor gets bits(k) = splitmix64(splitmix64(seed) ^ (2g+k)).
// The normal variate is Box-Muller, sqrt(-2 ln u1) cos(2 pi u2), with ln and
// cos computed here from +, -, *, / and sqrt only (each correctly rounded in
// IEEE double on both sides) in a fixed order, instead of the math
// libraries, whose last bits differ between glibc and CUDA. Every product
// and sum goes through mul()/add(), which on the device are the
// round-to-nearest intrinsics, so nvcc cannot fuse them into FMAs.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DTORCH_HOST_DEVICE __host__ __device__
#else
#define DTORCH_HOST_DEVICE
#endif

namespace dtorch::rt::counter_random {

DTORCH_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

DTORCH_HOST_DEVICE inline uint64_t bits(uint64_t seed, uint64_t linearIndex,
                                        uint64_t stream) {
  return splitmix64(splitmix64(seed) ^ (2 * linearIndex + stream));
}

// Rounded products and sums, never contracted into a fused multiply-add.
DTORCH_HOST_DEVICE inline double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  volatile double r = a * b; // volatile: no contraction with a later add
  return r;
#endif
}
DTORCH_HOST_DEVICE inline double add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
DTORCH_HOST_DEVICE inline double squareRoot(double x) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(x);
#else
  return __builtin_sqrt(x);
#endif
}

DTORCH_HOST_DEVICE inline uint64_t doubleBits(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}
DTORCH_HOST_DEVICE inline double bitsDouble(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// ln(x) for a normal positive x: x = m 2^e with m in [sqrt(1/2), sqrt(2)),
// ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by its series to
// s^27 (the next term is below 2^-70 of the result).
DTORCH_HOST_DEVICE inline double naturalLog(double x) {
  uint64_t u = doubleBits(x);
  int64_t e = static_cast<int64_t>((u >> 52) & 0x7ff) - 1023;
  double m = bitsDouble((u & 0x000FFFFFFFFFFFFFULL) | 0x3FF0000000000000ULL);
  if (m > 1.4142135623730951) {
    m = mul(m, 0.5); // exact
    e += 1;
  }
  double s = (m - 1.0) / (m + 1.0);
  double s2 = mul(s, s);
  double series = 1.0 / 27.0;
  for (int k = 12; k >= 0; --k)
    series = add(mul(series, s2), 1.0 / static_cast<double>(2 * k + 1));
  double lnM = mul(mul(2.0, s), series);
  // ln 2 split in two so that e * ln2Hi is exact (|e| < 2^11).
  const double ln2Hi = 6.93147180369123816490e-01;
  const double ln2Lo = 1.90821492927058770002e-10;
  double ed = static_cast<double>(e);
  return add(mul(ed, ln2Hi), add(mul(ed, ln2Lo), lnM));
}

// sin and cos of x in [0, pi/4] by their Taylor series (to x^23 and x^22).
DTORCH_HOST_DEVICE inline double sinSmall(double x) {
  double x2 = mul(x, x);
  double term = 0.0;
  for (int k = 11; k >= 1; --k) {
    // 1/((2k)(2k+1)) scaled by what follows: Horner in -x^2/((2k)(2k+1)).
    double denom = static_cast<double>((2 * k) * (2 * k + 1));
    term = mul(add(1.0, -term), x2) / denom;
  }
  return mul(x, add(1.0, -term));
}
DTORCH_HOST_DEVICE inline double cosSmall(double x) {
  double x2 = mul(x, x);
  double term = 0.0;
  for (int k = 11; k >= 1; --k) {
    double denom = static_cast<double>((2 * k - 1) * (2 * k));
    term = mul(add(1.0, -term), x2) / denom;
  }
  return add(1.0, -term);
}

// cos(2 pi t) for t in [0, 1): quarter turns are exact, the rest is reduced
// to an angle in [0, pi/4].
DTORCH_HOST_DEVICE inline double cosTurns(double t) {
  double four = mul(t, 4.0); // exact
  int quarter = static_cast<int>(four);
  double r = add(four, -static_cast<double>(quarter)); // exact, in [0, 1)
  const double halfPi = 1.57079632679489661923;
  // cos(q pi/2 + r pi/2) as +-cos or +-sin of r pi/2.
  bool useSin = (quarter & 1) != 0;
  bool negative = quarter == 1 || quarter == 2;
  double value;
  if (r <= 0.5) {
    double angle = mul(r, halfPi);
    value = useSin ? sinSmall(angle) : cosSmall(angle);
  } else {
    double angle = mul(add(1.0, -r), halfPi); // 1 - r exact
    value = useSin ? cosSmall(angle) : sinSmall(angle);
  }
  return negative ? -value : value;
}

// Uniform in [0, 1): the top 53 bits of bits(0).
DTORCH_HOST_DEVICE inline double uniform(uint64_t seed, uint64_t linearIndex) {
  return static_cast<double>(bits(seed, linearIndex, 0) >> 11) *
         1.1102230246251565404e-16; // 2^-53, exact
}

// Standard normal by Box-Muller.
DTORCH_HOST_DEVICE inline double normal(uint64_t seed, uint64_t linearIndex) {
  double u1 = static_cast<double>((bits(seed, linearIndex, 0) >> 11) + 1) *
              1.1102230246251565404e-16;
  double u2 = static_cast<double>(bits(seed, linearIndex, 1) >> 11) *
              1.1102230246251565404e-16;
  return mul(squareRoot(mul(-2.0, naturalLog(u1))), cosTurns(u2));
}

} // namespace dtorch::rt::counter_random
