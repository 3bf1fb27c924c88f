// 16-bit floating-point storage types. Kernels store float16 and bfloat16 in
// 16 bits and compute in float32, as torch does on CPU: Half and BFloat16
// convert to and from float, rounding to nearest even.
#pragma once

#include <cstdint>
#include <cstring>

namespace dtorch::rt {

namespace detail {
inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
} // namespace detail

/// IEEE 754 binary16.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(fromFloat(f)) {} // NOLINT: implicit, like a float
  operator float() const { return toFloat(bits); }

  static uint16_t fromFloat(float f) {
    uint32_t x = detail::floatBits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) // inf or NaN (NaN keeps a quiet payload bit)
      return static_cast<uint16_t>(sign | 0x7c00u |
                                   (absx > 0x7f800000u ? 0x200u : 0u));
    if (absx >= 0x477ff000u) // rounds to beyond 65504: inf
      return static_cast<uint16_t>(sign | 0x7c00u);
    if (absx < 0x38800000u) { // subnormal half (or zero)
      // Add 0.5 as a float so the hardware rounds the mantissa for us.
      float v = detail::bitsFloat(absx) + 0.5f;
      return static_cast<uint16_t>(sign | (detail::floatBits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (absx >> 13) & 1u;
    absx += 0xc8000fffu + mant_odd; // rebias exponent (-112 << 23) and round
    return static_cast<uint16_t>(sign | (absx >> 13));
  }

  static float toFloat(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) // inf, or NaN made quiet (as the hardware converts)
      return detail::bitsFloat(sign | 0x7f800000u | (mant << 13) |
                               (mant ? 0x400000u : 0u));
    if (exp == 0) { // zero or subnormal: mant * 2^-24
      float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    return detail::bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
  }
};

/// bfloat16: the upper half of a float32.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(fromFloat(f)) {} // NOLINT: implicit, like a float
  operator float() const { return toFloat(bits); }

  static uint16_t fromFloat(float f) {
    uint32_t x = detail::floatBits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) // NaN stays a quiet NaN
      return static_cast<uint16_t>((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u); // round to nearest even
    return static_cast<uint16_t>(x >> 16);
  }
  static float toFloat(uint16_t b) {
    return detail::bitsFloat(static_cast<uint32_t>(b) << 16);
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2,
              "16-bit storage types must be 2 bytes");

} // namespace dtorch::rt
