// sum and max over a set of dims.
#include "KernelSupport.h"

#include <cmath>
#include <limits>

namespace dtorch::rt {

namespace detail {

std::vector<bool> reductionMask(const AttrReader &attrs, int64_t rank) {
  std::vector<int64_t> dims = attrs.getInts("dims", {});
  std::vector<bool> mask(static_cast<size_t>(rank), dims.empty());
  for (int64_t dim : dims) {
    int64_t d = normalizeDim(dim, rank, "reduction dim");
    if (mask[d])
      throw RuntimeError("reduction dim " + std::to_string(dim) +
                         " is repeated");
    mask[d] = true;
  }
  return mask;
}

Shape reducedShape(const Shape &shape, const std::vector<bool> &mask,
                   bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (!mask[d])
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

} // namespace detail

using namespace detail;

namespace {

void checkReduction(const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
  const TensorDesc &x = inputs[0];
  const TensorDesc &out = outputs[0];
  if (x.dtype != out.dtype)
    throw RuntimeError(std::string("input is ") + dtypeName(x.dtype) +
                       ", output is " + dtypeName(out.dtype));
  std::vector<bool> mask =
      reductionMask(attrs, static_cast<int64_t>(x.shape.size()));
  Shape expected = reducedShape(x.shape, mask, attrs.getInt("keepdim", 0) != 0);
  if (expected != out.shape)
    throw RuntimeError("reduction of " + shapeToString(x.shape) + " gives " +
                       shapeToString(expected) + ", output is " +
                       shapeToString(out.shape));
}

// For each input element in row-major order, calls visit(inputLinear,
// outLinear).
template <class Visit>
void forEachReduced(const Shape &inShape, const std::vector<bool> &mask,
                    Visit visit) {
  int64_t numel = shapeNumel(inShape);
  if (numel == 0)
    return;
  size_t rank = inShape.size();
  // Strides of the output (dims kept), 0 for reduced dims.
  std::vector<int64_t> outStrides(rank, 0);
  int64_t stride = 1;
  for (size_t d = rank; d-- > 0;) {
    if (!mask[d]) {
      outStrides[d] = stride;
      stride *= inShape[d];
    }
  }
  std::vector<int64_t> index(rank, 0);
  int64_t outLinear = 0;
  for (int64_t i = 0; i < numel; ++i) {
    visit(i, outLinear);
    for (size_t d = rank; d-- > 0;) {
      outLinear += outStrides[d];
      if (++index[d] < inShape[d])
        break;
      outLinear -= outStrides[d] * inShape[d];
      index[d] = 0;
    }
  }
}

// float accumulates in double; int64 wraps around.
template <class T>
using SumAccumulator =
    std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;

template <class T> void registerSum(KernelRegistry &registry) {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    checkReduction(attrs, inputs, outputs);
    double scale = attrs.getFloat("scale", 1.0);
    if (!std::isfinite(scale))
      throw RuntimeError("sum: scale must be finite");
  };
  kernel.run = [](const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0];
    Tensor &out = *outputs[0];
    std::vector<bool> mask = reductionMask(attrs, x.dim());
    double scale = attrs.getFloat("scale", 1.0);
    std::vector<SumAccumulator<T>> acc(static_cast<size_t>(out.numel()), 0);
    const T *xs = x.data_as<T>();
    forEachReduced(x.shape(), mask, [&](int64_t in, int64_t o) {
      acc[o] += static_cast<SumAccumulator<T>>(xs[in]);
    });
    T *result = out.data_as<T>();
    for (size_t i = 0; i < acc.size(); ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        result[i] = static_cast<T>(acc[i] * scale);
      } else {
        int64_t sum = static_cast<int64_t>(acc[i]);
        if (scale == 1.0) {
          result[i] = sum;
        } else {
          double scaled = std::trunc(static_cast<double>(sum) * scale);
          if (!(scaled >= -0x1.0p63 && scaled < 0x1.0p63))
            throw RuntimeError("sum: scaled int64 result is out of range");
          result[i] = static_cast<int64_t>(scaled);
        }
      }
    }
  };
  addCpuKernel<T>(registry, "sum", std::move(kernel));
}

template <class T> T lowestValue() {
  if constexpr (std::is_same_v<T, bool>)
    return false;
  else if constexpr (std::is_floating_point_v<T>)
    return -std::numeric_limits<T>::infinity();
  else
    return std::numeric_limits<T>::lowest();
}

template <class T> void registerMax(KernelRegistry &registry) {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = checkReduction;
  kernel.run = [](const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0];
    Tensor &out = *outputs[0];
    std::vector<bool> mask = reductionMask(attrs, x.dim());
    T *result = out.data_as<T>();
    for (int64_t i = 0, n = out.numel(); i < n; ++i)
      result[i] = lowestValue<T>();
    const T *xs = x.data_as<T>();
    forEachReduced(x.shape(), mask, [&](int64_t in, int64_t o) {
      T value = xs[in];
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(value) || std::isnan(result[o])) {
          result[o] = std::numeric_limits<T>::quiet_NaN(); // NaN propagates
          return;
        }
      }
      if (result[o] < value)
        result[o] = value;
    });
  };
  addCpuKernel<T>(registry, "max", std::move(kernel));
}

} // namespace

void registerReductionKernels(KernelRegistry &registry) {
  registerSum<float>(registry);
  registerSum<double>(registry);
  registerSum<int64_t>(registry);
  registerMax<float>(registry);
  registerMax<double>(registry);
  registerMax<int64_t>(registry);
  registerMax<bool>(registry);
}

} // namespace dtorch::rt
