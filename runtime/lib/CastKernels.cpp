// cast: element type conversion with torch's rules (float -> int truncates
// toward zero, anything -> bool is `!= 0`, bool -> number is 0 or 1).
#include "KernelSupport.h"

namespace dtorch::rt {

using namespace detail;

namespace {

template <class Out, class In> void convert(const Tensor &x, Tensor &out) {
  const In *xs = x.data_as<In>();
  Out *os = out.data_as<Out>();
  for (int64_t i = 0, n = out.numel(); i < n; ++i) {
    if constexpr (std::is_same_v<Out, bool>)
      os[i] = xs[i] != In(0);
    else
      os[i] = static_cast<Out>(xs[i]);
  }
}

template <class Out> Kernel castKernel() {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &, const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    DType in = inputs[0].dtype;
    if (in != ::dtorch::wire::F32 && in != ::dtorch::wire::F64 &&
        in != ::dtorch::wire::I64 && in != ::dtorch::wire::BOOL)
      throw RuntimeError(std::string("cast: no conversion from ") +
                         dtypeName(in));
    if (inputs[0].shape != outputs[0].shape)
      throw RuntimeError("cast: input " + shapeToString(inputs[0].shape) +
                         " and output " + shapeToString(outputs[0].shape) +
                         " differ in shape");
  };
  kernel.run = [](const AttrReader &, const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0];
    Tensor &out = *outputs[0];
    switch (x.dtype()) {
    case ::dtorch::wire::F32:
      convert<Out, float>(x, out);
      break;
    case ::dtorch::wire::F64:
      convert<Out, double>(x, out);
      break;
    case ::dtorch::wire::I64:
      convert<Out, int64_t>(x, out);
      break;
    case ::dtorch::wire::BOOL:
      convert<Out, bool>(x, out);
      break;
    default:
      throw RuntimeError(std::string("cast: no conversion from ") +
                         dtypeName(x.dtype()));
    }
  };
  return kernel;
}

} // namespace

void registerCastKernels(KernelRegistry &registry) {
  addCpuKernel<float>(registry, "cast", castKernel<float>());
  addCpuKernel<double>(registry, "cast", castKernel<double>());
  addCpuKernel<int64_t>(registry, "cast", castKernel<int64_t>());
  addCpuKernel<bool>(registry, "cast", castKernel<bool>());
}

} // namespace dtorch::rt
