// float32 exp, log, tanh and erf computed exactly as the controller's
// generated (fused) kernels compute them, so that a kernel gives the same
// bits whether it runs hand-written (a segment's first run) or generated
// (later runs). erfPiecewise, the erf gelu uses by default, is our own
// (lib/Compiler/ErfApproximation.cpp emits it); the others follow MLIR.
//
// The generated kernels (lib/Compiler/KernelCodegen.cpp) lower math.exp,
// math.log, math.tanh and math.erf on float32 with MLIR's polynomial
// approximations (populateMathPolynomialApproximationPatterns of LLVM/MLIR
// 22, scalar form; `mlir-opt --test-math-polynomial-approximation` prints
// it). Each function below is that expansion written out operation for
// operation: the same float32 constants, an fma wherever it has math.fma and
// a separate multiply and add wherever it has arith.mulf and arith.addf, and
// the same clamps with the same NaN behaviour (an unordered comparison is
// written as the negation of the ordered one). Neither side contracts a
// multiply and an add into an fma: the generated code has no `contract`
// flags, and these functions turn contraction off. A NaN result is a NaN on
// both sides; its sign and payload are not specified.
//
// test/cpp/compiler/FusedKernelBitwiseTest.cpp compares the runtime's
// kernels built on these with the generated kernels bit for bit (all 2^32
// float32 inputs with DTORCH_EXHAUSTIVE_FLOAT32=1), so a change of the MLIR
// lowering shows up there. MLIR-free and header-only; fast when the caller
// is compiled for a target with FMA (runtime/lib/FloatMathKernels.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__FAST_MATH__)
#error "PolynomialMath.h needs IEEE float semantics (no -ffast-math)"
#endif

#if defined(__clang__)
#define DTORCH_NO_FP_CONTRACT _Pragma("clang fp contract(off)")
#define DTORCH_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define DTORCH_NO_FP_CONTRACT
#define DTORCH_ALWAYS_INLINE inline
#endif

namespace dtorch::rt::polynomial {

DTORCH_ALWAYS_INLINE uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

DTORCH_ALWAYS_INLINE float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// e^x: x clamped to [-87.8, 88.8], x = k ln2 + r (Cody-Waite, two
/// constants), a degree-7 polynomial in r, times 2^k built in the exponent
/// bits (k clamped to [-127, 127]).
DTORCH_ALWAYS_INLINE float exp(float x) {
  DTORCH_NO_FP_CONTRACT
  // cmpf uge + select, cmpf ule + select: NaN passes through.
  float c = !(x < -87.8f) ? x : -87.8f;
  c = !(c > 88.8f) ? c : 88.8f;
  float k = std::floor(std::fma(c, 1.44269502f, 0.5f));
  k = !(k < -127.0f) ? k : -127.0f;
  k = !(k > 127.0f) ? k : 127.0f;
  float r = std::fma(-0.693359375f, k, c);
  r = std::fma(2.12194442E-4f, k, r);
  float p = std::fma(r, 1.98756912E-4f, 0.00139819994f);
  p = std::fma(p, r, 0.00833345205f);
  p = std::fma(p, r, 0.0416657962f);
  p = std::fma(p, r, 0.166666657f);
  p = std::fma(p, r, 0.5f);
  float r2 = r * r;
  float y = std::fma(p, r2, r);
  y = y + 1.0f;
  // fptosi: k is a whole number in [-127, 127], or NaN (then y is NaN and
  // so is the result; 0 keeps the conversion defined).
  int32_t ki = k == k ? static_cast<int32_t>(k) : 0;
  float scale = floatOf(static_cast<uint32_t>(ki + 127) << 23);
  return y * scale;
}

/// ln x: x = m 2^e with m in [0.5, 1) (x clamped below to the smallest
/// normal), m moved to [sqrt(1/2), sqrt(2)), a degree-8 polynomial, then
/// the special cases: +inf for +inf, NaN below 0 (and for NaN), -inf at 0.
DTORCH_ALWAYS_INLINE float log(float x) {
  DTORCH_NO_FP_CONTRACT
  const float minNormal = 1.17549435E-38f;
  float c = !(x <= minNormal) ? x : minNormal; // cmpf ugt + select
  uint32_t bits = bitsOf(c);
  float m = floatOf((bits & 0x807fffffu) | 0x3f000000u);
  float e = static_cast<float>(static_cast<int32_t>(bits >> 23)) - 126.0f;
  bool below = m < 0.707106769f;
  float add = below ? m : 0.0f;
  float x1 = m - 1.0f;
  e = e - (below ? 1.0f : 0.0f);
  x1 = x1 + add;
  float x2 = x1 * x1;
  float x3 = x2 * x1;
  float y0 = std::fma(0.0703768358f, x1, -0.115146101f);
  float y1 = std::fma(-0.12420141f, x1, 0.142493233f);
  float y2 = std::fma(0.200007141f, x1, -0.24999994f);
  y0 = std::fma(y0, x1, 0.116769984f);
  y1 = std::fma(y1, x1, -0.166680574f);
  y2 = std::fma(y2, x1, 0.333333313f);
  y0 = std::fma(y0, x3, y1);
  y0 = std::fma(y0, x3, y2);
  y0 = y0 * x3;
  y0 = std::fma(-0.5f, x2, y0);
  x1 = x1 + y0;
  float r = std::fma(e, 0.693147182f, x1);
  const float inf = floatOf(0x7f800000u);
  r = x == inf ? inf : r;
  r = !(x >= 0.0f) ? floatOf(0x7fc00000u) : r; // cmpf ult: below 0 or NaN
  r = x == 0.0f ? -inf : r;
  return r;
}

/// tanh x: x clamped to [-7.99881172, 7.99881172], a rational function
/// (odd degree 13 over even degree 6), x itself below 0.0004 in magnitude.
DTORCH_ALWAYS_INLINE float tanh(float x) {
  DTORCH_NO_FP_CONTRACT
  float c = !(x >= 7.99881172f) ? x : 7.99881172f; // cmpf ult + select
  c = !(c <= -7.99881172f) ? c : -7.99881172f;     // cmpf ugt + select
  bool tiny = std::fabs(x) < 0.0004f;
  float x2 = c * c;
  float p = std::fma(x2, -2.76076837E-16f, 2.00018794E-13f);
  p = std::fma(x2, p, -8.60467184E-11f);
  p = std::fma(x2, p, 5.12229725E-8f);
  p = std::fma(x2, p, 1.48572235E-5f);
  p = std::fma(x2, p, 6.37261954E-4f);
  p = std::fma(x2, p, 0.00489352457f);
  p = c * p;
  float q = std::fma(x2, 1.19825836E-6f, 1.18534706E-4f);
  q = std::fma(x2, q, 0.00226843474f);
  q = std::fma(x2, q, 0.00489352504f);
  float r = p / q;
  return tiny ? c : r;
}

/// erf x: on |x|, a rational function (degree 3 over degree 4) with one
/// coefficient set below 0.8, one in [0.8, 2), and 1 + another at and
/// above 2; 1 from 3.75 on; the sign of x restored.
DTORCH_ALWAYS_INLINE float erf(float x) {
  DTORCH_NO_FP_CONTRACT
  bool negative = x < 0.0f;
  float a = negative ? -x : x;
  bool first = a < 0.8f;
  float p0 = first ? 1.12837911f : 1.12750685f;
  float q0 = first ? -0.463513821f : -3.276070e-01f;
  float p1 = first ? -0.523018539f : -0.364721417f;
  float q1 = first ? 0.519230127f : 0.448369086f;
  float p2 = first ? 0.209741712f : 0.118407398f;
  float q2 = first ? -0.131808966f : -0.0883462652f;
  float p3 = first ? 0.0258146804f : 0.0370645523f;
  float q3 = first ? 0.0739796459f : 0.0572442785f;
  bool belowTwo = a < 2.0f;
  float offset = belowTwo ? 0.0f : -0.00330093061f;
  p0 = belowTwo ? p0 : 0.00351961935f;
  q0 = belowTwo ? q0 : -2.0606916f;
  p1 = belowTwo ? p1 : -0.00141373626f;
  q1 = belowTwo ? q1 : 1.62705934f;
  p2 = belowTwo ? p2 : 2.53447099E-4f;
  q2 = belowTwo ? q2 : -0.583389878f;
  p3 = belowTwo ? p3 : -1.71048032E-5f;
  q3 = belowTwo ? q3 : 0.0821908935f;
  float base = belowTwo ? 0.0f : 1.0f;
  bool inRange = !(a >= 3.75f); // cmpf ult: NaN stays NaN below
  float n = std::fma(a, p3, p2);
  n = std::fma(a, n, p1);
  n = std::fma(a, n, p0);
  n = std::fma(a, n, offset);
  float d = std::fma(a, q3, q2);
  d = std::fma(a, d, q1);
  d = std::fma(a, d, q0);
  d = std::fma(a, d, 1.0f);
  float r = base + n / d;
  r = inRange ? r : 1.0f;
  return negative ? -r : r;
}

/// Whether float32 erf (gelu's erf form) is erfPiecewise, in the generated
/// kernels (lib/Compiler/ErfApproximation.cpp) and the runtime's alike,
/// rather than MLIR's rational approximation (erf above);
/// DTORCH_ERF_PIECEWISE=0 turns it off (for comparison; read once per
/// process, part of the compiler's configuration, so of the disk cache's
/// key).
inline bool erfPiecewiseFromEnvironment() {
  static const bool enabled = [] {
    const char *value = std::getenv("DTORCH_ERF_PIECEWISE");
    return !(value && std::strcmp(value, "0") == 0);
  }();
  return enabled;
}

/// The coefficients of erfPiecewise, lowest degree first (fitted by
/// tools/erf-fit/fit_erf_piecewise.py: minimax in float64, rounded to
/// float32 from the highest degree down, the lower ones fitted again).
/// kErfSmall: erf(a) / a - 1 as a polynomial in a^2 on [0, kErfSplit).
/// kErfLarge: erf(a) - 1 as a polynomial in a - kErfCenter on
/// [kErfSplit, kErfSaturation).
inline constexpr float kErfSmall[] = {
    0x1.06eba8p-3f,   // 0.12837916612625122
    -0x1.81273ep-2f,  // -0.3761262595653534
    0x1.ce2cf8p-4f,   // 0.1128358542919159
    -0x1.b7f90cp-6f,  // -0.026853810995817184
    0x1.5405acp-8f,   // 0.005188326351344585
    -0x1.a3f6d8p-11f, // -0.0008010182064026594
    0x1.4969c2p-14f,  // 7.853820716263726e-05
};
inline constexpr float kErfLarge[] = {
    -0x1.328f82p-8f,  // -0.004677743185311556
    0x1.529b94p-6f,   // 0.020666975528001785
    -0x1.529accp-5f,  // -0.041333578526973724
    0x1.8b0b3ap-5f,   // 0.04822312667965889
    -0x1.1a3494p-5f,  // -0.03444889932870865
    0x1.ace9e4p-7f,   // 0.013089405372738838
    0x1.f0ff38p-12f,  // 0.0004739732248708606
    -0x1.bbaf1cp-9f,  // -0.003385040443390608
    0x1.9a8bd4p-10f,  // 0.0015661094803363085
    -0x1.0ea4f2p-15f, // -3.2263316825265065e-05
    -0x1.00911ep-12f, // -0.00024468122865073383
    0x1.5d56bcp-14f,  // 8.328886178787798e-05
    0x1.9cfbb8p-19f,  // 3.076965185755398e-06
    -0x1.d10e16p-18f, // -6.9298598646128085e-06
    0x1.255a16p-20f,  // 1.0928209803751088e-06
};
inline constexpr float kErfSplit = 1.0f;
/// a - kErfCenter is exact for a in [1, 4] (Sterbenz).
inline constexpr float kErfCenter = 2.0f;
/// The smallest float32 whose erf rounds to 1 (erfc below 2^-25).
inline constexpr float kErfSaturation = 0x1.f5a88ap+1f; // 3.91920590

/// erf x without a division (max error 1.18 ulp against float64 erf
/// over every float32; MLIR's erf above: 4.79): on a = |x|, a + a P(a^2)
/// (one fma) below 1, 1 + Q(a - 2) from 1 on, both by Horner's rule with an fma
/// per step and both evaluated (a select picks one, so the loop vectorizes
/// without blends of coefficients); 1 from kErfSaturation on (infinities
/// too); NaN stays NaN; the sign of x restored (copysign: -0 stays -0).
/// lib/Compiler/ErfApproximation.cpp emits these operations in this order.
DTORCH_ALWAYS_INLINE float erfPiecewise(float x) {
  DTORCH_NO_FP_CONTRACT
  constexpr int smallDegree = sizeof(kErfSmall) / sizeof(float) - 1;
  constexpr int largeDegree = sizeof(kErfLarge) / sizeof(float) - 1;
  float a = std::fabs(x);
  float s = a * a;
  float p = kErfSmall[smallDegree];
  for (int k = smallDegree - 1; k >= 0; --k)
    p = std::fma(p, s, kErfSmall[k]);
  float small = std::fma(a, p, a);
  float u = a - kErfCenter;
  float q = kErfLarge[largeDegree];
  for (int k = largeDegree - 1; k >= 0; --k)
    q = std::fma(q, u, kErfLarge[k]);
  float large = 1.0f + q;
  float r = a < kErfSplit ? small : large; // NaN: large, a NaN
  r = a >= kErfSaturation ? 1.0f : r;
  return std::copysign(r, x);
}

} // namespace dtorch::rt::polynomial
