// cast: element type conversion between any two of the seven dtypes with
// torch's rules (float -> int truncates toward zero, anything -> bool is
// `!= 0`, bool -> number is 0 or 1, 16-bit floats go through float32).
#include "KernelSupport.h"

namespace dtorch::rt {

using namespace detail;

namespace {

template <class Out, class In> void convert(const Tensor &x, Tensor &out) {
  const In *xs = x.data_as<In>();
  Out *os = out.data_as<Out>();
  for (int64_t i = 0, n = out.numel(); i < n; ++i)
    os[i] = convertTo<Out>(xs[i]);
}

template <class Out> Kernel castKernel() {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &, const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    visitDtype(inputs[0].dtype, "cast: no conversion from input", [](auto) {});
    if (inputs[0].shape != outputs[0].shape)
      throw RuntimeError("cast: input " + shapeToString(inputs[0].shape) +
                         " and output " + shapeToString(outputs[0].shape) +
                         " differ in shape");
  };
  kernel.run = [](const AttrReader &, const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0];
    visitDtype(x.dtype(), "cast: no conversion from input", [&](auto tag) {
      convert<Out, typename decltype(tag)::type>(x, *outputs[0]);
    });
  };
  return kernel;
}

} // namespace

void registerCastKernels(KernelRegistry &registry) {
  forEachType(AllTypes{}, [&](auto tag) {
    using Out = typename decltype(tag)::type;
    addCpuKernel<Out>(registry, "cast", castKernel<Out>());
  });
}

} // namespace dtorch::rt
