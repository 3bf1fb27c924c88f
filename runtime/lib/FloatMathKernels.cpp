// The transcendental elementwise kernels on float32, float16 and bfloat16:
// exp, log, tanh, sigmoid, gelu, silu. They compute exactly what the
// controller's generated kernels compute (dtorch/runtime/PolynomialMath.h),
// so a segment gives the same bits unfused and fused.
//
// The loop is compiled three times, for x86-64 with AVX-512, with AVX2 and
// FMA, and for the baseline, and the host's best is picked once: the
// polynomials need a hardware fma to be fast, and vectorize. float64 keeps
// libm (ElementwiseKernels.cpp), as the generated kernels do.
#include "KernelSupport.h"
#include "dtorch/runtime/PolynomialMath.h"

#include <cmath>
#include <cstdlib>
#include <string>

namespace dtorch::rt {

using namespace detail;

namespace {

namespace poly = polynomial;

// One operation each, as KernelCodegen.cpp's emitScalar builds it.
struct ExpOp {
  DTORCH_ALWAYS_INLINE float operator()(float x) const { return poly::exp(x); }
};
struct LogOp {
  DTORCH_ALWAYS_INLINE float operator()(float x) const { return poly::log(x); }
};
struct TanhOp {
  DTORCH_ALWAYS_INLINE float operator()(float x) const { return poly::tanh(x); }
};
// e^-|x| only: 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below.
DTORCH_ALWAYS_INLINE float sigmoidOf(float x) {
  DTORCH_NO_FP_CONTRACT
  bool nonNegative = x >= 0.0f;
  float e = poly::exp(nonNegative ? -x : x);
  float denominator = 1.0f + e;
  float numerator = nonNegative ? 1.0f : e;
  return numerator / denominator;
}
struct SigmoidOp {
  DTORCH_ALWAYS_INLINE float operator()(float x) const { return sigmoidOf(x); }
};
struct SiluOp {
  DTORCH_ALWAYS_INLINE float operator()(float x) const {
    DTORCH_NO_FP_CONTRACT
    return x * sigmoidOf(x);
  }
};
// (0.5 x) (1 + erf(x / sqrt(2))), the erf form; erf is poly::erfPiecewise
// unless DTORCH_ERF_PIECEWISE=0 (MLIR's rational approximation), as the
// generated kernels compute it.
template <bool Piecewise> struct GeluOp {
  DTORCH_ALWAYS_INLINE float operator()(float x) const {
    DTORCH_NO_FP_CONTRACT
    float scaled = x * static_cast<float>(M_SQRT1_2);
    float erf = Piecewise ? poly::erfPiecewise(scaled) : poly::erf(scaled);
    float half = 0.5f * x;
    return half * (1.0f + erf);
  }
};

// out[i] = op(x[i]) computed in float32, rounded to T. `out` may be `x` (an
// in-place kernel): element i reads x[i] only, so vectorizing is safe.
template <class T, class Op>
DTORCH_ALWAYS_INLINE void mapElements(const T *x, T *out, int64_t n) {
  Op op;
#if defined(__clang__)
#pragma clang loop vectorize(assume_safety)
#endif
  for (int64_t i = 0; i < n; ++i)
    out[i] = static_cast<T>(op(static_cast<float>(x[i])));
}

using MapFn = void (*)(const void *x, void *out, int64_t n);

template <class T, class Op>
void mapBaseline(const void *x, void *out, int64_t n) {
  mapElements<T, Op>(static_cast<const T *>(x), static_cast<T *>(out), n);
}

#if defined(__x86_64__) && defined(__clang__)
#define DTORCH_HAS_ISA_VARIANTS 1
// With F16C, float16 converts through the compiler's _Float16 (vcvtph2ps,
// vcvtps2ph: the conversions of the generated kernels, which round to
// nearest even like Half), so the loop vectorizes.
template <class T> struct HardwareType {
  using type = T;
};
template <> struct HardwareType<Half> {
  using type = _Float16;
};

template <class T, class Op>
__attribute__((target("avx2,fma,f16c,bmi,bmi2"))) void
mapAvx2(const void *x, void *out, int64_t n) {
  using H = typename HardwareType<T>::type;
  mapElements<H, Op>(static_cast<const H *>(x), static_cast<H *>(out), n);
}

template <class T, class Op>
__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c,bmi,"
                      "bmi2"))) void
mapAvx512(const void *x, void *out, int64_t n) {
  using H = typename HardwareType<T>::type;
  mapElements<H, Op>(static_cast<const H *>(x), static_cast<H *>(out), n);
}

enum class Isa { Baseline, Avx2, Avx512 };

// The best variant the host runs; DTORCH_KERNEL_ISA=avx2 or baseline picks
// a lesser one (the tests check that every variant gives the same bits).
Isa hostIsa() {
  static const Isa isa = [] {
    const char *forced = std::getenv("DTORCH_KERNEL_ISA");
    std::string cap = forced ? forced : "";
    __builtin_cpu_init();
    if (cap == "baseline")
      return Isa::Baseline;
    if (cap != "avx2" && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("bmi2"))
      return Isa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2"))
      return Isa::Avx2;
    return Isa::Baseline;
  }();
  return isa;
}
#endif

template <class T, class Op> MapFn bestMap() {
#if defined(DTORCH_HAS_ISA_VARIANTS)
  switch (hostIsa()) {
  case Isa::Avx512:
    return &mapAvx512<T, Op>;
  case Isa::Avx2:
    return &mapAvx2<T, Op>;
  case Isa::Baseline:
    break;
  }
#endif
  return &mapBaseline<T, Op>;
}

template <class T, class Op>
void registerMapped(KernelRegistry &registry, const char *name) {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &, const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    checkAllSame(inputs, outputs);
  };
  kernel.run = [map =
                    bestMap<T, Op>()](const AttrReader &,
                                      const std::vector<const Tensor *> &inputs,
                                      const std::vector<Tensor *> &outputs) {
    map(inputs[0]->data_as<T>(), outputs[0]->data_as<T>(), outputs[0]->numel());
  };
  addCpuKernel<T>(registry, name, std::move(kernel));
}

template <class T> void registerFor(KernelRegistry &registry) {
  registerMapped<T, ExpOp>(registry, "exp");
  registerMapped<T, LogOp>(registry, "log");
  registerMapped<T, TanhOp>(registry, "tanh");
  registerMapped<T, SigmoidOp>(registry, "sigmoid");
  if (poly::erfPiecewiseFromEnvironment())
    registerMapped<T, GeluOp<true>>(registry, "gelu");
  else
    registerMapped<T, GeluOp<false>>(registry, "gelu");
  registerMapped<T, SiluOp>(registry, "silu");
}

} // namespace

void detail::registerFloatMathKernels(KernelRegistry &registry) {
  registerFor<float>(registry);
  registerFor<Half>(registry);
  registerFor<BFloat16>(registry);
}

} // namespace dtorch::rt
