// The multi-tensor optimizer kernel `fused_adam` (dtensor.fused_adam,
// docs/program-format.md): the Adam or AdamW update of every parameter of an
// optimizer group, and its state, in one call.
//
// Inputs: step and lr (0-d float64), then n parameters, n gradients, n first
// moments, n second moments (and n maxima with amsgrad = 1). Outputs: the
// updated parameters, first moments, second moments (and maxima). Parameter
// i's group has one shape and dtype; groups may differ in both.
//
// Float32 and float64 are computed in their own type with the per-op path's
// operations in its order and no contraction, so the result has the bits of
// the update recorded op by op (python/dtorch/optim/adam.py with
// foreach=False). Float16 and bfloat16 are computed in float32 and rounded
// once at the end (torch's fused kernels do the same).
//
// Each element of a group's outputs is computed from the same element of its
// inputs alone, read before it is written, so an output may live in the
// storage of any input of its group (donation): the loops are marked
// `vectorize(assume_safety)`, so in-place calls stay vectorised. For the
// same reason a call may be cut anywhere: the parameters' elements, one
// after the other, are split into ranges for the rank's thread share
// (kernelParts, ParallelFor.h), as a generated elementwise kernel is.
#include "KernelSupport.h"
#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/ParallelFor.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace dtorch::rt {
namespace {

/// The hyper-parameters of one call, as the per-op path computes them.
struct AdamScalars {
  double beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0;
  bool decoupled = false, amsgrad = false, maximize = false;
  double lr = 0, step = 0;
};

/// How weight decay enters: not at all, added to the gradient (Adam), or
/// applied to the parameter (AdamW).
enum class Decay { None, L2, Decoupled };

template <typename T> struct MathType {
  using type = float;
};
template <> struct MathType<double> {
  using type = double;
};

template <typename T, Decay D, bool Amsgrad>
void adamUpdate(const AdamScalars &s, int64_t count, const T *param,
                const T *grad, const T *expAvg, const T *expAvgSq,
                const T *maxExpAvgSq, T *paramOut, T *expAvgOut, T *expAvgSqOut,
                T *maxExpAvgSqOut) {
#pragma clang fp contract(off)
  using M = typename MathType<T>::type;
  // 0-d terms, computed in float64 and rounded once, as the per-op path's
  // 0-d tensors are.
  const double biasCorrection1 = 1.0 - std::pow(s.beta1, s.step);
  const M stepSize = static_cast<M>(s.lr / biasCorrection1);
  const M biasCorrection2Sqrt =
      static_cast<M>(std::sqrt(1.0 - std::pow(s.beta2, s.step)));
  const M decay = static_cast<M>(1.0 - s.lr * s.weightDecay);
  const M weightDecay = static_cast<M>(s.weightDecay);
  const M sign = s.maximize ? M(-1) : M(1);
  // torch's lerp: start + (end - start) * w for |w| < 0.5, else
  // end - (end - start) * (1 - w).
  const double w = 1.0 - s.beta1;
  const bool lerpFromStart = std::abs(w) < 0.5;
  const M lerpWeight = static_cast<M>(lerpFromStart ? w : 1.0 - w);
  const M beta2 = static_cast<M>(s.beta2);
  const M oneMinusBeta2 = static_cast<M>(1.0 - s.beta2);
  const M eps = static_cast<M>(s.eps);
#pragma clang loop vectorize(assume_safety)
  for (int64_t j = 0; j < count; ++j) {
    M p = static_cast<M>(param[j]);
    M g = static_cast<M>(grad[j]) * sign;
    M m = static_cast<M>(expAvg[j]);
    M v = static_cast<M>(expAvgSq[j]);
    if constexpr (D == Decay::L2)
      g = g + p * weightDecay;
    if constexpr (D == Decay::Decoupled)
      p = p * decay;
    M diff = g - m;
    m = lerpFromStart ? m + diff * lerpWeight : g - diff * lerpWeight;
    v = v * beta2 + g * g * oneMinusBeta2;
    M vUsed = v;
    if constexpr (Amsgrad) {
      M previous = static_cast<M>(maxExpAvgSq[j]);
      // maximum's rule: NaN propagates, else the larger.
      vUsed = (previous != previous || previous > v) ? previous : v;
      maxExpAvgSqOut[j] = static_cast<T>(vUsed);
    }
    // sqrt without errno (std::sqrt keeps the loop from vectorizing).
    M denom = __builtin_elementwise_sqrt(vUsed) / biasCorrection2Sqrt + eps;
    p = p - stepSize * (m / denom);
    paramOut[j] = static_cast<T>(p);
    expAvgOut[j] = static_cast<T>(m);
    expAvgSqOut[j] = static_cast<T>(v);
  }
}

/// Elements [from, to) of parameter i's group.
template <typename T, Decay D>
void adamUpdateOf(const AdamScalars &s, const std::vector<const Tensor *> &in,
                  const std::vector<Tensor *> &out, int64_t n, int64_t i,
                  int64_t from, int64_t to) {
  auto input = [&](int64_t k) {
    return in[2 + k * n + i]->data_as<T>() + from;
  };
  auto output = [&](int64_t k) { return out[k * n + i]->data_as<T>() + from; };
  int64_t count = to - from;
  if (s.amsgrad)
    adamUpdate<T, D, true>(s, count, input(0), input(1), input(2), input(3),
                           input(4), output(0), output(1), output(2),
                           output(3));
  else
    adamUpdate<T, D, false>(s, count, input(0), input(1), input(2), input(3),
                            nullptr, output(0), output(1), output(2), nullptr);
}

template <typename T>
void adamUpdateTyped(const AdamScalars &s,
                     const std::vector<const Tensor *> &in,
                     const std::vector<Tensor *> &out, int64_t n, int64_t i,
                     int64_t from, int64_t to) {
  if (s.weightDecay == 0)
    adamUpdateOf<T, Decay::None>(s, in, out, n, i, from, to);
  else if (s.decoupled)
    adamUpdateOf<T, Decay::Decoupled>(s, in, out, n, i, from, to);
  else
    adamUpdateOf<T, Decay::L2>(s, in, out, n, i, from, to);
}

/// Elements [from, to) of parameter i's group, dispatched on its dtype.
void adamUpdateRange(const AdamScalars &s,
                     const std::vector<const Tensor *> &in,
                     const std::vector<Tensor *> &out, int64_t n, int64_t i,
                     int64_t from, int64_t to) {
  switch (in[2 + i]->dtype()) {
  case DType::F32:
    return adamUpdateTyped<float>(s, in, out, n, i, from, to);
  case DType::F64:
    return adamUpdateTyped<double>(s, in, out, n, i, from, to);
  case DType::F16:
    return adamUpdateTyped<Half>(s, in, out, n, i, from, to);
  case DType::BF16:
    return adamUpdateTyped<BFloat16>(s, in, out, n, i, from, to);
  default:
    throw RuntimeError("fused_adam: parameters must be float tensors");
  }
}

AdamScalars readScalars(const AttrReader &attrs) {
  AdamScalars s;
  s.beta1 = attrs.getFloat("beta1");
  s.beta2 = attrs.getFloat("beta2");
  s.eps = attrs.getFloat("eps");
  s.weightDecay = attrs.getFloat("weight_decay");
  s.decoupled = attrs.getInt("decoupled") != 0;
  s.amsgrad = attrs.getInt("amsgrad") != 0;
  s.maximize = attrs.getInt("maximize") != 0;
  return s;
}

void checkFusedAdam(const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
  AdamScalars s = readScalars(attrs);
  int64_t perParam = s.amsgrad ? 5 : 4;
  int64_t tensors = static_cast<int64_t>(inputs.size()) - 2;
  if (tensors <= 0 || tensors % perParam != 0)
    throw RuntimeError("fused_adam takes step, lr and " +
                       std::to_string(perParam) +
                       " tensors per parameter, got " +
                       std::to_string(inputs.size()) + " inputs");
  int64_t n = tensors / perParam;
  if (static_cast<int64_t>(outputs.size()) != (perParam - 1) * n)
    throw RuntimeError("fused_adam with " + std::to_string(n) +
                       " parameters has " + std::to_string((perParam - 1) * n) +
                       " outputs, got " + std::to_string(outputs.size()));
  for (int k = 0; k < 2; ++k) {
    requireDtype(inputs[k], DType::F64,
                 k == 0 ? "fused_adam step" : "fused_adam lr");
    if (!inputs[k].shape.empty())
      throw RuntimeError(std::string("fused_adam ") + (k == 0 ? "step" : "lr") +
                         " must be 0-d, got " + shapeToString(inputs[k].shape));
  }
  for (int64_t i = 0; i < n; ++i) {
    const TensorDesc &param = inputs[2 + i];
    if (param.dtype != DType::F32 && param.dtype != DType::F64 &&
        param.dtype != DType::F16 && param.dtype != DType::BF16)
      throw RuntimeError("fused_adam parameter " + std::to_string(i) +
                         " must be a float tensor, got " +
                         dtypeName(param.dtype));
    for (int64_t k = 1; k < perParam; ++k)
      requireSameDescs(param, inputs[2 + k * n + i], "fused_adam input");
    for (int64_t k = 0; k + 1 < perParam; ++k)
      requireSameDescs(param, outputs[k * n + i], "fused_adam output");
  }
}

void runFusedAdam(const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
  AdamScalars s = readScalars(attrs);
  s.step = *inputs[0]->data_as<double>();
  s.lr = *inputs[1]->data_as<double>();
  int64_t perParam = s.amsgrad ? 5 : 4;
  int64_t n = (static_cast<int64_t>(inputs.size()) - 2) / perParam;
  // Every parameter's elements one after the other: the call is cut into
  // ranges of that sequence (the rank's thread share, as a generated
  // elementwise kernel is); each element is computed alone, so any cut
  // gives the same bits.
  int64_t total = 0, outBytes = 0;
  for (int64_t i = 0; i < n; ++i) {
    total += inputs[2 + i]->numel();
    outBytes += (perParam - 1) * static_cast<int64_t>(inputs[2 + i]->nbytes());
  }
  auto runRange = [&](int64_t begin, int64_t end) {
    int64_t base = 0;
    for (int64_t i = 0; i < n && base < end; ++i) {
      int64_t count = inputs[2 + i]->numel();
      int64_t from = std::max(begin, base), to = std::min(end, base + count);
      if (from < to)
        adamUpdateRange(s, inputs, outputs, n, i, from - base, to - base);
      base += count;
    }
  };
  int parts = kernelParts(total, outBytes);
  if (parts <= 1) {
    runRange(0, total);
    return;
  }
  parallelFor(parts, [&](int part) {
    runRange(total * part / parts, total * (part + 1) / parts);
  });
}

} // namespace

void registerOptimizerKernels(KernelRegistry &registry) {
  // Keyed by the first output's dtype; each parameter is dispatched on its
  // own, so a group may mix dtypes. Inputs and outputs are both variadic
  // (kVariadicInputs as numOutputs: one or more); checkFusedAdam counts
  // them.
  for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16})
    registry.add(
        "fused_adam", dtype, kCpuDevice,
        Kernel{kVariadicInputs, kVariadicInputs, checkFusedAdam, runFusedAdam});
}

} // namespace dtorch::rt
