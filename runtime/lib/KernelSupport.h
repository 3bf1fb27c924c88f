// Private helpers for the built-in CPU kernels.
#pragma once

#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/Shape.h"

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>

namespace dtorch::rt::detail {

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> {
  static constexpr DType value = ::dtorch::wire::F32;
};
template <> struct DTypeOf<double> {
  static constexpr DType value = ::dtorch::wire::F64;
};
template <> struct DTypeOf<Half> {
  static constexpr DType value = ::dtorch::wire::F16;
};
template <> struct DTypeOf<BFloat16> {
  static constexpr DType value = ::dtorch::wire::BF16;
};
template <> struct DTypeOf<int32_t> {
  static constexpr DType value = ::dtorch::wire::I32;
};
template <> struct DTypeOf<int64_t> {
  static constexpr DType value = ::dtorch::wire::I64;
};
template <> struct DTypeOf<bool> {
  static constexpr DType value = ::dtorch::wire::BOOL;
};

// float16 and bfloat16 are stored in 16 bits and computed in float32.
template <class T>
constexpr bool isSixteenBitFloat =
    std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
template <class T>
constexpr bool isFloatType =
    std::is_floating_point_v<T> || isSixteenBitFloat<T>;
template <class T>
constexpr bool isIntegerType =
    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;
// The type arithmetic on a T is done in.
template <class T>
using ComputeType = std::conditional_t<isSixteenBitFloat<T>, float, T>;

// Converts `value` to T with torch's rules: into bool is `!= 0`, into a
// 16-bit float goes through float32, everything else is a static_cast
// (floats truncate toward zero into integers).
template <class T, class From> T convertTo(From value) {
  if constexpr (std::is_same_v<T, bool>) {
    if constexpr (isSixteenBitFloat<From>)
      return static_cast<float>(value) != 0.0f;
    else
      return value != From(0);
  } else if constexpr (isSixteenBitFloat<T>) {
    return T(static_cast<float>(value));
  } else if constexpr (isSixteenBitFloat<From>) {
    return convertTo<T>(static_cast<float>(value));
  } else if constexpr (isIntegerType<T> && std::is_floating_point_v<From>) {
    // NaN and values out of T's range give T's minimum (as x86 does) rather
    // than undefined behaviour.
    constexpr From low = static_cast<From>(std::numeric_limits<T>::min());
    if (!(value > low - From(1) && value < -low))
      return std::numeric_limits<T>::min();
    return static_cast<T>(value);
  } else {
    return static_cast<T>(value);
  }
}

// A value standing for a type, so generic lambdas can receive a type.
template <class T> struct TypeTag {
  using type = T;
};
template <class... Ts> struct TypeList {};

using AllTypes =
    TypeList<float, double, Half, BFloat16, int32_t, int64_t, bool>;
using NumericTypes = TypeList<float, double, Half, BFloat16, int32_t, int64_t>;
using FloatTypes = TypeList<float, double, Half, BFloat16>;
using IntegerTypes = TypeList<int32_t, int64_t>;

// Calls fn(TypeTag<T>{}) for every T of the list.
template <class... Ts, class Fn> void forEachType(TypeList<Ts...>, Fn &&fn) {
  (fn(TypeTag<Ts>{}), ...);
}

// Calls fn(TypeTag<T>{}) for the T of `dtype` (any of the seven dtypes) and
// returns its result; throws RuntimeError naming `what` for anything else.
template <class Fn>
decltype(auto) visitDtype(DType dtype, const char *what, Fn &&fn) {
  switch (dtype) {
  case ::dtorch::wire::F32:
    return fn(TypeTag<float>{});
  case ::dtorch::wire::F64:
    return fn(TypeTag<double>{});
  case ::dtorch::wire::F16:
    return fn(TypeTag<Half>{});
  case ::dtorch::wire::BF16:
    return fn(TypeTag<BFloat16>{});
  case ::dtorch::wire::I32:
    return fn(TypeTag<int32_t>{});
  case ::dtorch::wire::I64:
    return fn(TypeTag<int64_t>{});
  case ::dtorch::wire::BOOL:
    return fn(TypeTag<bool>{});
  default:
    throw RuntimeError(std::string(what) + ": unsupported dtype " +
                       dtypeName(dtype));
  }
}

// Registers `kernel` for (op, T, cpu).
template <class T>
void addCpuKernel(KernelRegistry &registry, const char *op, Kernel kernel) {
  registry.add(op, DTypeOf<T>::value, kCpuDevice, std::move(kernel));
}

// A check that every input and the output share dtype and shape.
inline void checkAllSame(const std::vector<TensorDesc> &inputs,
                         const std::vector<TensorDesc> &outputs) {
  for (size_t i = 0; i < inputs.size(); ++i)
    requireSameDescs(outputs.at(0), inputs[i],
                     ("input " + std::to_string(i) + " vs output").c_str());
}

// exp, log, tanh, sigmoid, gelu, silu on float32, float16 and bfloat16, as
// the generated kernels compute them (FloatMathKernels.cpp).
void registerFloatMathKernels(KernelRegistry &registry);

// Reduction dims from `dims` (empty or absent: all dims), normalized,
// deduplicated check, as a per-dim mask.
std::vector<bool> reductionMask(const AttrReader &attrs, int64_t rank);
// The shape of a reduction of `shape` over `mask`.
Shape reducedShape(const Shape &shape, const std::vector<bool> &mask,
                   bool keepdim);

// Advances a row-major multi-index over `shape`; false after the last one.
inline bool nextIndex(std::vector<int64_t> &index, const Shape &shape) {
  for (size_t d = index.size(); d-- > 0;) {
    if (++index[d] < shape[d])
      return true;
    index[d] = 0;
  }
  return false;
}

} // namespace dtorch::rt::detail
