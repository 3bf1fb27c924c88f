// Unary and binary elementwise kernels (no broadcasting: operands and result
// share dtype and shape).
#include "KernelSupport.h"

#include <cmath>
#include <limits>

namespace dtorch::rt {

using namespace detail;

namespace {

template <class T, class Fn>
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
    const T *x = inputs[0]->data_as<T>();
    T *out = outputs[0]->data_as<T>();
    for (int64_t i = 0, n = outputs[0]->numel(); i < n; ++i)
      out[i] = fn(x[i]);
  };
  addCpuKernel<T>(registry, op, std::move(kernel));
}

template <class T, class Fn>
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
    const T *a = inputs[0]->data_as<T>();
    const T *b = inputs[1]->data_as<T>();
    T *out = outputs[0]->data_as<T>();
    for (int64_t i = 0, n = outputs[0]->numel(); i < n; ++i)
      out[i] = fn(a[i], b[i]);
  };
  addCpuKernel<T>(registry, op, std::move(kernel));
}

template <class T> T sigmoidOf(T x) {
  if (x >= T(0))
    return T(1) / (T(1) + std::exp(-x));
  T e = std::exp(x);
  return e / (T(1) + e);
}

template <class T> void registerFloatKernels(KernelRegistry &registry) {
  registerUnary<T>(registry, "neg", [](T x) { return -x; });
  registerUnary<T>(registry, "abs", [](T x) { return std::abs(x); });
  registerUnary<T>(registry, "exp", [](T x) { return std::exp(x); });
  registerUnary<T>(registry, "log", [](T x) { return std::log(x); });
  registerUnary<T>(registry, "sqrt", [](T x) { return std::sqrt(x); });
  registerUnary<T>(registry, "rsqrt", [](T x) { return T(1) / std::sqrt(x); });
  registerUnary<T>(registry, "relu",
                   [](T x) { return x < T(0) ? T(0) : x; }); // keeps NaN
  registerUnary<T>(registry, "tanh", [](T x) { return std::tanh(x); });
  registerUnary<T>(registry, "sigmoid", [](T x) { return sigmoidOf(x); });
  registerUnary<T>(registry, "gelu", [](T x) {
    return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2)));
  });
  registerUnary<T>(registry, "silu", [](T x) { return x * sigmoidOf(x); });
  registerUnary<T>(registry, "sin", [](T x) { return std::sin(x); });
  registerUnary<T>(registry, "cos", [](T x) { return std::cos(x); });

  registerBinary<T>(registry, "add", [](T a, T b) { return a + b; });
  registerBinary<T>(registry, "sub", [](T a, T b) { return a - b; });
  registerBinary<T>(registry, "mul", [](T a, T b) { return a * b; });
  registerBinary<T>(registry, "div", [](T a, T b) { return a / b; });
  // NaN-propagating, like torch.maximum / torch.minimum.
  registerBinary<T>(registry, "maximum", [](T a, T b) {
    if (std::isnan(a) || std::isnan(b))
      return std::numeric_limits<T>::quiet_NaN();
    return a < b ? b : a;
  });
  registerBinary<T>(registry, "minimum", [](T a, T b) {
    if (std::isnan(a) || std::isnan(b))
      return std::numeric_limits<T>::quiet_NaN();
    return b < a ? b : a;
  });
  registerBinary<T>(registry, "pow", [](T a, T b) { return std::pow(a, b); });
}

// int64 arithmetic wraps around on overflow (two's complement), like torch.
int64_t wrap(uint64_t value) { return static_cast<int64_t>(value); }

int64_t floorDivide(int64_t a, int64_t b) {
  if (b == 0)
    throw RuntimeError("int64 division by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1)
    return a; // wraps
  int64_t quotient = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0)))
    --quotient;
  return quotient;
}

int64_t integerPower(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 1)
      return 1;
    if (base == -1)
      return (exponent % 2 == 0) ? 1 : -1;
    throw RuntimeError("int64 pow: negative exponent " +
                       std::to_string(exponent) + " with base " +
                       std::to_string(base));
  }
  uint64_t result = 1, factor = static_cast<uint64_t>(base);
  uint64_t remaining = static_cast<uint64_t>(exponent);
  while (remaining) {
    if (remaining & 1)
      result *= factor;
    factor *= factor;
    remaining >>= 1;
  }
  return wrap(result);
}

void registerInt64Kernels(KernelRegistry &registry) {
  using T = int64_t;
  registerUnary<T>(registry, "neg",
                   [](T x) { return wrap(0 - static_cast<uint64_t>(x)); });
  registerUnary<T>(registry, "abs", [](T x) {
    return x < 0 ? wrap(0 - static_cast<uint64_t>(x)) : x;
  });
  registerUnary<T>(registry, "relu", [](T x) { return x < 0 ? T(0) : x; });
  registerBinary<T>(registry, "add", [](T a, T b) {
    return wrap(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  });
  registerBinary<T>(registry, "sub", [](T a, T b) {
    return wrap(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
  });
  registerBinary<T>(registry, "mul", [](T a, T b) {
    return wrap(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  });
  registerBinary<T>(registry, "div", floorDivide);
  registerBinary<T>(registry, "maximum",
                    [](T a, T b) { return a < b ? b : a; });
  registerBinary<T>(registry, "minimum",
                    [](T a, T b) { return b < a ? b : a; });
  registerBinary<T>(registry, "pow", integerPower);
}

void registerBoolKernels(KernelRegistry &registry) {
  registerBinary<bool>(registry, "maximum",
                       [](bool a, bool b) { return a || b; });
  registerBinary<bool>(registry, "minimum",
                       [](bool a, bool b) { return a && b; });
}

} // namespace

void registerElementwiseKernels(KernelRegistry &registry) {
  registerFloatKernels<float>(registry);
  registerFloatKernels<double>(registry);
  registerInt64Kernels(registry);
  registerBoolKernels(registry);
}

} // namespace dtorch::rt
