// Private helpers for the built-in CPU kernels.
#pragma once

#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/Shape.h"

#include <cstdint>
#include <initializer_list>

namespace dtorch::rt::detail {

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> {
  static constexpr DType value = ::dtorch::wire::F32;
};
template <> struct DTypeOf<double> {
  static constexpr DType value = ::dtorch::wire::F64;
};
template <> struct DTypeOf<int64_t> {
  static constexpr DType value = ::dtorch::wire::I64;
};
template <> struct DTypeOf<bool> {
  static constexpr DType value = ::dtorch::wire::BOOL;
};

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

// Reduction dims from `dims` (empty or absent: all dims), normalized,
// deduplicated check, as a per-dim mask.
std::vector<bool> reductionMask(const AttrReader &attrs, int64_t rank);
// The shape of a reduction of `shape` over `mask`.
Shape reducedShape(const Shape &shape, const std::vector<bool> &mask,
                   bool keepdim);

} // namespace dtorch::rt::detail
