//===- FloatBits.h - a double's bits in a float wire format ------*- C++
//-*-===//
//
// Shared by the bitwise tests of generated kernels (host, mixed types, GPU):
// the bit pattern a value has in f64, f32, f16 or bf16 storage.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/Tensor.h"

#include <cstdint>
#include <cstring>

namespace dtorch::testsupport {

/// The bits of `value` in the float format `dtype` (F64, F32, F16; any
/// other value is taken as BF16), rounded as the runtime rounds.
inline uint64_t floatBitsOf(double value, rt::DType dtype) {
  switch (dtype) {
  case ::dtorch::wire::F64: {
    uint64_t u;
    std::memcpy(&u, &value, 8);
    return u;
  }
  case ::dtorch::wire::F32: {
    float v = static_cast<float>(value);
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  }
  case ::dtorch::wire::F16:
    return rt::Half(static_cast<float>(value)).bits;
  default:
    return rt::BFloat16(static_cast<float>(value)).bits;
  }
}

} // namespace dtorch::testsupport
