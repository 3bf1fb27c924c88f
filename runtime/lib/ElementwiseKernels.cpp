// Unary and binary elementwise kernels (no broadcasting: operands and result
// share dtype and shape).
#include "KernelSupport.h"

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

namespace dtorch::rt {

using namespace detail;

namespace {

// fn works on ComputeType<T> (float32 for the 16-bit floats). `Vectorize`:
// fn is plain arithmetic that the compiler vectorizes for float and double
// when told the buffers never partly overlap (see the loops below).
template <class T, bool Vectorize = false, class Fn>
void registerUnary(KernelRegistry &registry, const char *op, Fn fn) {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &, const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    checkAllSame(inputs, outputs);
  };
  kernel.run = [fn](const AttrReader &,
                    const std::vector<const Tensor *> &inputs,
                    const std::vector<Tensor *> &outputs) {
    using C = ComputeType<T>;
    const T *x = inputs[0]->data_as<T>();
    T *out = outputs[0]->data_as<T>();
    int64_t n = outputs[0]->numel();
    if constexpr (Vectorize && std::is_floating_point_v<T>) {
      // `out` may be `x` (buffer planning runs a kernel in place): element
      // i reads x[i] only, so the vectorized loop is safe without the
      // overlap check, whose failure would run it one element at a time.
#if defined(__clang__)
#pragma clang loop vectorize(assume_safety)
#endif
      for (int64_t i = 0; i < n; ++i)
        out[i] = static_cast<T>(fn(static_cast<C>(x[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        out[i] = static_cast<T>(fn(static_cast<C>(x[i])));
    }
  };
  addCpuKernel<T>(registry, op, std::move(kernel));
}

template <class T, bool Vectorize = false, class Fn>
void registerBinary(KernelRegistry &registry, const char *op, Fn fn) {
  Kernel kernel;
  kernel.numInputs = 2;
  kernel.check = [](const AttrReader &, const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    checkAllSame(inputs, outputs);
  };
  kernel.run = [fn](const AttrReader &,
                    const std::vector<const Tensor *> &inputs,
                    const std::vector<Tensor *> &outputs) {
    using C = ComputeType<T>;
    const T *a = inputs[0]->data_as<T>();
    const T *b = inputs[1]->data_as<T>();
    T *out = outputs[0]->data_as<T>();
    int64_t n = outputs[0]->numel();
    if constexpr (Vectorize && std::is_floating_point_v<T>) {
      // In place or not, element i reads a[i] and b[i] only (see above).
#if defined(__clang__)
#pragma clang loop vectorize(assume_safety)
#endif
      for (int64_t i = 0; i < n; ++i)
        out[i] = static_cast<T>(fn(static_cast<C>(a[i]), static_cast<C>(b[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        out[i] = static_cast<T>(fn(static_cast<C>(a[i]), static_cast<C>(b[i])));
    }
  };
  addCpuKernel<T>(registry, op, std::move(kernel));
}

// float64 only: float32 and the 16-bit floats use FloatMathKernels.cpp.
double sigmoidOf(double x) {
  if (x >= 0.0)
    return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}

// T is float, double, Half or BFloat16; C is what it is computed in.
template <class T> void registerFloatKernels(KernelRegistry &registry) {
  using C = ComputeType<T>;
  registerUnary<T, true>(registry, "neg", [](C x) { return -x; });
  registerUnary<T, true>(registry, "abs", [](C x) { return std::abs(x); });
  registerUnary<T>(registry, "sqrt", [](C x) { return std::sqrt(x); });
  registerUnary<T>(registry, "rsqrt", [](C x) { return C(1) / std::sqrt(x); });
  registerUnary<T, true>(registry, "relu",
                         [](C x) { return x < C(0) ? C(0) : x; }); // keeps NaN
  if constexpr (std::is_same_v<C, double>) {
    // float64 calls libm, as the generated kernels do; the others compute
    // the generated kernels' float32 approximations (FloatMathKernels.cpp).
    registerUnary<T>(registry, "exp", [](C x) { return std::exp(x); });
    registerUnary<T>(registry, "log", [](C x) { return std::log(x); });
    registerUnary<T>(registry, "tanh", [](C x) { return std::tanh(x); });
    registerUnary<T>(registry, "sigmoid", [](C x) { return sigmoidOf(x); });
    registerUnary<T>(registry, "gelu", [](C x) {
      return 0.5 * x * (1.0 + std::erf(x * M_SQRT1_2));
    });
    registerUnary<T>(registry, "silu", [](C x) { return x * sigmoidOf(x); });
  }
  registerUnary<T>(registry, "sin", [](C x) { return std::sin(x); });
  registerUnary<T>(registry, "cos", [](C x) { return std::cos(x); });

  registerBinary<T, true>(registry, "add", [](C a, C b) { return a + b; });
  registerBinary<T, true>(registry, "sub", [](C a, C b) { return a - b; });
  registerBinary<T, true>(registry, "mul", [](C a, C b) { return a * b; });
  registerBinary<T, true>(registry, "div", [](C a, C b) { return a / b; });
  // NaN-propagating, like torch.maximum / torch.minimum, and written as the
  // generated kernels compute them (arith.maximumf/minimumf as MLIR's
  // arith-expand lowers them): a NaN operand is the result (b when both
  // are), and of two equal values (+0 and -0) the second.
  registerBinary<T>(registry, "maximum", [](C a, C b) {
    C larger = !(a <= b) ? a : b;
    return std::isnan(b) ? b : larger;
  });
  registerBinary<T>(registry, "minimum", [](C a, C b) {
    C smaller = !(a >= b) ? a : b;
    return std::isnan(b) ? b : smaller;
  });
  registerBinary<T>(registry, "pow", [](C a, C b) { return std::pow(a, b); });
}

// Integer arithmetic wraps around on overflow (two's complement), like
// torch: it is done in the unsigned type of the same width.
template <class T> T wrap(std::make_unsigned_t<T> value) {
  return static_cast<T>(value);
}

template <class T> T floorDivide(T a, T b) {
  if (b == 0)
    throw RuntimeError(std::string(dtypeName(DTypeOf<T>::value)) +
                       " division by zero");
  if (a == std::numeric_limits<T>::min() && b == -1)
    return a; // wraps
  T quotient = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0)))
    --quotient;
  return quotient;
}

template <class T> T integerPower(T base, T exponent) {
  if (exponent < 0) {
    if (base == 1)
      return 1;
    if (base == -1)
      return (exponent % 2 == 0) ? 1 : -1;
    throw RuntimeError(std::string(dtypeName(DTypeOf<T>::value)) +
                       " pow: negative exponent " + std::to_string(exponent) +
                       " with base " + std::to_string(base));
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, factor = static_cast<U>(base);
  U remaining = static_cast<U>(exponent);
  while (remaining) {
    if (remaining & 1)
      result *= factor;
    factor *= factor;
    remaining >>= 1;
  }
  return wrap<T>(result);
}

// T is int32_t or int64_t.
template <class T> void registerIntegerKernels(KernelRegistry &registry) {
  using U = std::make_unsigned_t<T>;
  registerUnary<T>(registry, "neg",
                   [](T x) { return wrap<T>(U(0) - static_cast<U>(x)); });
  registerUnary<T>(registry, "abs", [](T x) {
    return x < 0 ? wrap<T>(U(0) - static_cast<U>(x)) : x;
  });
  registerUnary<T>(registry, "relu", [](T x) { return x < 0 ? T(0) : x; });
  registerBinary<T>(registry, "add", [](T a, T b) {
    return wrap<T>(static_cast<U>(a) + static_cast<U>(b));
  });
  registerBinary<T>(registry, "sub", [](T a, T b) {
    return wrap<T>(static_cast<U>(a) - static_cast<U>(b));
  });
  registerBinary<T>(registry, "mul", [](T a, T b) {
    return wrap<T>(static_cast<U>(a) * static_cast<U>(b));
  });
  registerBinary<T>(registry, "div", floorDivide<T>);
  registerBinary<T>(registry, "maximum",
                    [](T a, T b) { return a < b ? b : a; });
  registerBinary<T>(registry, "minimum",
                    [](T a, T b) { return b < a ? b : a; });
  registerBinary<T>(registry, "pow", integerPower<T>);
}

void registerBoolKernels(KernelRegistry &registry) {
  registerBinary<bool>(registry, "maximum",
                       [](bool a, bool b) { return a || b; });
  registerBinary<bool>(registry, "minimum",
                       [](bool a, bool b) { return a && b; });
}

} // namespace

void registerElementwiseKernels(KernelRegistry &registry) {
  forEachType(FloatTypes{}, [&](auto tag) {
    registerFloatKernels<typename decltype(tag)::type>(registry);
  });
  registerFloatMathKernels(registry);
  forEachType(IntegerTypes{}, [&](auto tag) {
    registerIntegerKernels<typename decltype(tag)::type>(registry);
  });
  registerBoolKernels(registry);
}

} // namespace dtorch::rt
