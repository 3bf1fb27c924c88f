// The multi-tensor optimizer kernels `fused_adam` and `fused_sgd`
// (dtensor.fused_adam, dtensor.fused_sgd, docs/program-format.md): the Adam,
// AdamW or SGD update of every parameter of an optimizer group, and its
// state, in one call. The two share the layout of their calls
// (optimizerCallGroups), their checks and the cutting of a call into ranges.
//
// fused_sgd: lr (0-d float64), then n parameters, n gradients (and n
// momentum buffers with a momentum after the first step); outputs the
// parameters (and the buffers). The per-op path's operations in its order
// (python/dtorch/optim/sgd.py with DTORCH_FUSED_SGD=0), in the same types.
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
#include "dtorch/runtime/OptimizerCalls.h"
#include "dtorch/runtime/ParallelFor.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>

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

/// The groups of a call, or a RuntimeError naming `op`.
OptimizerCallGroups requireGroups(const char *op, const AttrReader &attrs,
                                  size_t numInputs, size_t numOutputs) {
  std::optional<OptimizerCallGroups> g =
      optimizerCallGroups(op, attrs, numInputs, numOutputs);
  if (g)
    return *g;
  std::string name(op);
  int scalars = name == "fused_adam" ? 2 : 1;
  int perParam = optimizerInputsPerParam(op, attrs);
  int64_t tensors = static_cast<int64_t>(numInputs) - scalars;
  if (tensors <= 0 || tensors % perParam != 0)
    throw RuntimeError(name + " takes " + (scalars == 2 ? "step, lr" : "lr") +
                       " and " + std::to_string(perParam) +
                       " tensors per parameter, got " +
                       std::to_string(numInputs) + " inputs");
  int64_t n = tensors / perParam;
  int64_t outputs = n * optimizerOutputsPerParam(op, attrs);
  throw RuntimeError(name + " with " + std::to_string(n) + " parameters has " +
                     std::to_string(outputs) + " outputs, got " +
                     std::to_string(numOutputs));
}

/// The checks both kernels share: 0-d float64 scalars (`scalarNames`),
/// float parameters, and every tensor of a parameter's group, inputs and
/// outputs, with the parameter's dtype and shape.
void checkGroups(const char *op, const OptimizerCallGroups &g,
                 const std::vector<std::string> &scalarNames,
                 const std::vector<TensorDesc> &inputs,
                 const std::vector<TensorDesc> &outputs) {
  std::string inputWhat = std::string(op) + " input",
              outputWhat = std::string(op) + " output";
  for (int k = 0; k < g.scalarInputs; ++k) {
    requireDtype(inputs[k], DType::F64,
                 (std::string(op) + " " + scalarNames[k]).c_str());
    if (!inputs[k].shape.empty())
      throw RuntimeError(std::string(op) + " " + scalarNames[k] +
                         " must be 0-d, got " + shapeToString(inputs[k].shape));
  }
  int n = g.numParams;
  for (int i = 0; i < n; ++i) {
    const TensorDesc &param = inputs[g.input(0, i)];
    if (param.dtype != DType::F32 && param.dtype != DType::F64 &&
        param.dtype != DType::F16 && param.dtype != DType::BF16)
      throw RuntimeError(std::string(op) + " parameter " + std::to_string(i) +
                         " must be a float tensor, got " +
                         dtypeName(param.dtype));
    for (int k = 1; k < g.inputsPerParam; ++k)
      requireSameDescs(param, inputs[g.input(k, i)], inputWhat.c_str());
    for (int k = 0; k < g.outputsPerParam; ++k)
      requireSameDescs(param, outputs[k * n + i], outputWhat.c_str());
  }
}

/// Runs `update(i, from, to)` over the elements of every parameter, one
/// after the other, cut into ranges for the rank's thread share (as a
/// generated elementwise kernel is); each element is computed alone, so
/// any cut gives the same bits.
template <typename Update>
void forEachParamRange(const OptimizerCallGroups &g,
                       const std::vector<const Tensor *> &inputs,
                       const Update &update) {
  int64_t total = 0, outBytes = 0;
  for (int i = 0; i < g.numParams; ++i) {
    const Tensor *param = inputs[g.input(0, i)];
    total += param->numel();
    outBytes += g.outputsPerParam * static_cast<int64_t>(param->nbytes());
  }
  auto runRange = [&](int64_t begin, int64_t end) {
    int64_t base = 0;
    for (int i = 0; i < g.numParams && base < end; ++i) {
      int64_t count = inputs[g.input(0, i)]->numel();
      int64_t from = std::max(begin, base), to = std::min(end, base + count);
      if (from < to)
        update(i, from - base, to - base);
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

void checkFusedAdam(const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
  readScalars(attrs);
  OptimizerCallGroups g =
      requireGroups("fused_adam", attrs, inputs.size(), outputs.size());
  checkGroups("fused_adam", g, {"step", "lr"}, inputs, outputs);
}

void runFusedAdam(const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
  AdamScalars s = readScalars(attrs);
  s.step = *inputs[0]->data_as<double>();
  s.lr = *inputs[1]->data_as<double>();
  OptimizerCallGroups g =
      requireGroups("fused_adam", attrs, inputs.size(), outputs.size());
  forEachParamRange(g, inputs, [&](int i, int64_t from, int64_t to) {
    adamUpdateRange(s, inputs, outputs, g.numParams, i, from, to);
  });
}

//===----------------------------------------------------------------------===//
// fused_sgd
//===----------------------------------------------------------------------===//

/// The hyper-parameters of one SGD call.
struct SgdScalars {
  double lr = 0, momentum = 0, dampening = 0, weightDecay = 0;
  bool nesterov = false, maximize = false, firstStep = false;
};

SgdScalars readSgdScalars(const AttrReader &attrs) {
  SgdScalars s;
  s.momentum = attrs.getFloat("momentum");
  s.dampening = attrs.getFloat("dampening");
  s.weightDecay = attrs.getFloat("weight_decay");
  s.nesterov = attrs.getInt("nesterov") != 0;
  s.maximize = attrs.getInt("maximize") != 0;
  s.firstStep = attrs.getInt("first_step") != 0;
  return s;
}

/// One parameter's elements: the per-op path's operations in its order,
/// in M (float32 for 16-bit types), without contraction, rounded once.
/// `buf` is null on the first step (the buffer starts from the gradient)
/// and `bufOut` without momentum.
template <typename T, bool Decay, bool Momentum, bool FirstStep, bool Nesterov>
void sgdUpdate(const SgdScalars &s, int64_t count, const T *param,
               const T *grad, const T *buf, T *paramOut, T *bufOut) {
#pragma clang fp contract(off)
  using M = typename MathType<T>::type;
  // 0-d terms rounded once from float64, as the per-op path's scalars are.
  const M lr = static_cast<M>(s.lr);
  const M momentum = static_cast<M>(s.momentum);
  const M oneMinusDampening = static_cast<M>(1.0 - s.dampening);
  const M weightDecay = static_cast<M>(s.weightDecay);
  const bool maximize = s.maximize;
#pragma clang loop vectorize(assume_safety)
  for (int64_t j = 0; j < count; ++j) {
    M p = static_cast<M>(param[j]);
    M g = static_cast<M>(grad[j]);
    if (maximize)
      g = -g;
    if constexpr (Decay)
      g = g + p * weightDecay;
    if constexpr (Momentum) {
      M b;
      if constexpr (FirstStep)
        b = g;
      else
        b = static_cast<M>(buf[j]) * momentum + g * oneMinusDampening;
      if constexpr (Nesterov)
        g = g + b * momentum;
      else
        g = b;
      bufOut[j] = static_cast<T>(b);
    }
    p = p - lr * g;
    paramOut[j] = static_cast<T>(p);
  }
}

/// Elements [from, to) of parameter i's group, for one dtype.
template <typename T>
void sgdUpdateTyped(const SgdScalars &s, const OptimizerCallGroups &g,
                    const std::vector<const Tensor *> &in,
                    const std::vector<Tensor *> &out, int i, int64_t from,
                    int64_t to) {
  int n = g.numParams;
  auto input = [&](int k) {
    return k < g.inputsPerParam ? in[g.input(k, i)]->data_as<T>() + from
                                : nullptr;
  };
  auto output = [&](int k) {
    return k < g.outputsPerParam ? out[k * n + i]->data_as<T>() + from
                                 : nullptr;
  };
  int64_t count = to - from;
  bool decay = s.weightDecay != 0;
  bool momentum = s.momentum != 0;
  // Decay x (none | first step | later) x nesterov.
  auto run = [&](auto decayTag, auto momentumTag, auto firstTag,
                 auto nesterovTag) {
    sgdUpdate<T, decltype(decayTag)::value, decltype(momentumTag)::value,
              decltype(firstTag)::value, decltype(nesterovTag)::value>(
        s, count, input(0), input(1), input(2), output(0), output(1));
  };
  auto withMomentum = [&](auto decayTag) {
    using True = std::true_type;
    using False = std::false_type;
    if (!momentum)
      return run(decayTag, False{}, False{}, False{});
    if (s.firstStep)
      return s.nesterov ? run(decayTag, True{}, True{}, True{})
                        : run(decayTag, True{}, True{}, False{});
    return s.nesterov ? run(decayTag, True{}, False{}, True{})
                      : run(decayTag, True{}, False{}, False{});
  };
  if (decay)
    withMomentum(std::true_type{});
  else
    withMomentum(std::false_type{});
}

void sgdUpdateRange(const SgdScalars &s, const OptimizerCallGroups &g,
                    const std::vector<const Tensor *> &in,
                    const std::vector<Tensor *> &out, int i, int64_t from,
                    int64_t to) {
  switch (in[g.input(0, i)]->dtype()) {
  case DType::F32:
    return sgdUpdateTyped<float>(s, g, in, out, i, from, to);
  case DType::F64:
    return sgdUpdateTyped<double>(s, g, in, out, i, from, to);
  case DType::F16:
    return sgdUpdateTyped<Half>(s, g, in, out, i, from, to);
  case DType::BF16:
    return sgdUpdateTyped<BFloat16>(s, g, in, out, i, from, to);
  default:
    throw RuntimeError("fused_sgd: parameters must be float tensors");
  }
}

void checkFusedSgd(const AttrReader &attrs,
                   const std::vector<TensorDesc> &inputs,
                   const std::vector<TensorDesc> &outputs) {
  SgdScalars s = readSgdScalars(attrs);
  if (s.momentum == 0 && (s.firstStep || s.nesterov))
    throw RuntimeError("fused_sgd: first_step and nesterov need a momentum");
  OptimizerCallGroups g =
      requireGroups("fused_sgd", attrs, inputs.size(), outputs.size());
  checkGroups("fused_sgd", g, {"lr"}, inputs, outputs);
}

void runFusedSgd(const AttrReader &attrs,
                 const std::vector<const Tensor *> &inputs,
                 const std::vector<Tensor *> &outputs) {
  SgdScalars s = readSgdScalars(attrs);
  s.lr = *inputs[0]->data_as<double>();
  OptimizerCallGroups g =
      requireGroups("fused_sgd", attrs, inputs.size(), outputs.size());
  forEachParamRange(g, inputs, [&](int i, int64_t from, int64_t to) {
    sgdUpdateRange(s, g, inputs, outputs, i, from, to);
  });
}

} // namespace

int optimizerInputsPerParam(std::string_view op, const AttrReader &attrs) {
  if (op == "fused_adam")
    return attrs.getInt("amsgrad", 0) ? 5 : 4;
  return attrs.getFloat("momentum", 0) != 0 && !attrs.getInt("first_step", 0)
             ? 3
             : 2;
}

int optimizerOutputsPerParam(std::string_view op, const AttrReader &attrs) {
  if (op == "fused_adam")
    return optimizerInputsPerParam(op, attrs) - 1;
  return attrs.getFloat("momentum", 0) != 0 ? 2 : 1;
}

std::optional<OptimizerCallGroups> optimizerCallGroups(std::string_view op,
                                                       const AttrReader &attrs,
                                                       size_t numInputs,
                                                       size_t numOutputs) {
  if (op != "fused_adam" && op != "fused_sgd")
    return std::nullopt;
  OptimizerCallGroups g;
  g.scalarInputs = op == "fused_adam" ? 2 : 1;
  g.inputsPerParam = optimizerInputsPerParam(op, attrs);
  g.outputsPerParam = optimizerOutputsPerParam(op, attrs);
  int64_t tensors = static_cast<int64_t>(numInputs) - g.scalarInputs;
  if (tensors <= 0 || tensors % g.inputsPerParam != 0)
    return std::nullopt;
  g.numParams = static_cast<int>(tensors / g.inputsPerParam);
  if (static_cast<int64_t>(numOutputs) !=
      static_cast<int64_t>(g.outputsPerParam) * g.numParams)
    return std::nullopt;
  return g;
}

std::optional<OptimizerCallGroups>
optimizerCallGroups(const ::dtorch::wire::Instruction &inst) {
  return optimizerCallGroups(inst.op(), AttrReader(inst.attrs()),
                             inst.inputs_size(), inst.outputs_size());
}

void registerOptimizerKernels(KernelRegistry &registry) {
  // Keyed by the first output's dtype; each parameter is dispatched on its
  // own, so a group may mix dtypes. Inputs and outputs are both variadic
  // (kVariadicInputs as numOutputs: one or more); the checks count them.
  for (DType dtype : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    registry.add(
        "fused_adam", dtype, kCpuDevice,
        Kernel{kVariadicInputs, kVariadicInputs, checkFusedAdam, runFusedAdam});
    registry.add(
        "fused_sgd", dtype, kCpuDevice,
        Kernel{kVariadicInputs, kVariadicInputs, checkFusedSgd, runFusedSgd});
  }
}

} // namespace dtorch::rt
