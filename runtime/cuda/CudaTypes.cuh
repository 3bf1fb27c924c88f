// Device-side element types and conversions with the CPU kernels' exact
// rules (Half.h, KernelSupport.h convertTo): float16 and bfloat16 are 16-bit
// storage (the bits of cuda_fp16/cuda_bf16) computed in float32, converted
// with the same rounding and NaN handling as the host, so a cast or an
// elementwise op gives the host's bits.
#pragma once

#include "CudaLaunch.h"

#include <cstdint>
#include <type_traits>

namespace dtorch::rt::cuda {

struct F16 {
  uint16_t bits;
};
struct BF16 {
  uint16_t bits;
};

__device__ inline uint16_t halfFromFloat(float f) {
  uint32_t x = __float_as_uint(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7c00u |
                                 (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u)
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (absx < 0x38800000u) {
    float v = __fadd_rn(__uint_as_float(absx), 0.5f);
    return static_cast<uint16_t>(sign | (__float_as_uint(v) - 0x3f000000u));
  }
  uint32_t mantOdd = (absx >> 13) & 1u;
  absx += 0xc8000fffu + mantOdd;
  return static_cast<uint16_t>(sign | (absx >> 13));
}
__device__ inline float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f)
    return __uint_as_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    float v = __fmul_rn(static_cast<float>(mant), 5.9604644775390625e-8f);
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
__device__ inline uint16_t bf16FromFloat(float f) {
  uint32_t x = __float_as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}
__device__ inline float bf16ToFloat(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

template <class T>
constexpr bool isSixteenBit = std::is_same_v<T, F16> || std::is_same_v<T, BF16>;
template <class T>
constexpr bool isFloat = std::is_floating_point_v<T> || isSixteenBit<T>;
template <class T>
constexpr bool isInteger =
    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;
// What arithmetic on a T is done in.
template <class T>
using Compute = std::conditional_t<isSixteenBit<T>, float, T>;

template <class T> __device__ inline Compute<T> load(T v) {
  if constexpr (std::is_same_v<T, F16>)
    return halfToFloat(v.bits);
  else if constexpr (std::is_same_v<T, BF16>)
    return bf16ToFloat(v.bits);
  else
    return v;
}
// A Compute<T> value stored as T (16-bit floats round to nearest even).
template <class T> __device__ inline T store(Compute<T> v) {
  if constexpr (std::is_same_v<T, F16>)
    return F16{halfFromFloat(v)};
  else if constexpr (std::is_same_v<T, BF16>)
    return BF16{bf16FromFloat(v)};
  else
    return v;
}

template <class T> struct Limits;
template <> struct Limits<int32_t> {
  static constexpr int32_t min = INT32_MIN, max = INT32_MAX;
};
template <> struct Limits<int64_t> {
  static constexpr int64_t min = INT64_MIN, max = INT64_MAX;
};

// KernelSupport.h convertTo: into bool is `!= 0`, 16-bit floats go through
// float32, float -> integer truncates (NaN and out of range give the
// minimum, as x86 does), the rest is static_cast.
template <class To, class From> __device__ inline To convert(From value) {
  if constexpr (isSixteenBit<From>) {
    return convert<To>(load(value));
  } else if constexpr (std::is_same_v<To, bool>) {
    return value != From(0);
  } else if constexpr (isSixteenBit<To>) {
    return store<To>(static_cast<float>(value));
  } else if constexpr (isInteger<To> && std::is_floating_point_v<From>) {
    constexpr From low = static_cast<From>(Limits<To>::min);
    if (!(value > low - From(1) && value < -low))
      return Limits<To>::min;
    return static_cast<To>(value);
  } else {
    return static_cast<To>(value);
  }
}

// Calls fn(T{}) for the T of `type`.
template <class Fn> inline void visitType(ElemType type, Fn &&fn) {
  switch (type) {
  case ElemType::F32:
    return fn(float{});
  case ElemType::F64:
    return fn(double{});
  case ElemType::F16:
    return fn(F16{});
  case ElemType::BF16:
    return fn(BF16{});
  case ElemType::I32:
    return fn(int32_t{});
  case ElemType::I64:
    return fn(int64_t{});
  case ElemType::Bool:
    return fn(bool{});
  }
}

// Grid size for n elements with `threads` per block and a grid-stride loop.
inline unsigned blocksFor(int64_t n, int threads) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65535 * 8)
    blocks = 65535 * 8;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks);
}

} // namespace dtorch::rt::cuda
