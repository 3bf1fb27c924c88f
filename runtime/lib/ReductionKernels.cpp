// sum, max and min over a set of dims.
#include "ColumnSum.h"
#include "KernelSupport.h"

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

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

// Calls visit(inputLinear, outLinear) for every input element, in the
// order forEachReduced does for each output element (increasing input
// index), so sums come out bitwise the same; loops over contiguous memory
// when the reduction collapses to [outer, reduced, inner].
template <class Visit>
void forEachReducedFast(const Shape &inShape, const std::vector<bool> &mask,
                        Visit visit) {
  int64_t outer, reduced, inner;
  if (!collapseReduction(inShape, mask, outer, reduced, inner)) {
    forEachReduced(inShape, mask, visit);
    return;
  }
  if (inner == 1 && outer > 1) {
    // Each output reduces one contiguous row (softmax's and layer_norm's
    // last dim). One row at a time is one chain of dependent additions;
    // kRows rows side by side are independent chains that overlap, and each
    // row is still visited in increasing order.
    constexpr int64_t kRows = 8;
    int64_t o = 0;
    for (; o + kRows <= outer; o += kRows)
      for (int64_t r = 0; r < reduced; ++r)
        for (int64_t l = 0; l < kRows; ++l)
          visit((o + l) * reduced + r, o + l);
    for (; o < outer; ++o)
      for (int64_t r = 0; r < reduced; ++r)
        visit(o * reduced + r, o);
    return;
  }
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t r = 0; r < reduced; ++r) {
      int64_t base = (o * reduced + r) * inner;
      for (int64_t k = 0; k < inner; ++k)
        visit(base + k, o * inner + k);
    }
}

// Floats (16-bit ones included) accumulate in double; integers wrap around
// in their own width (the sum is done in uint64_t and truncated).
template <class T>
using SumAccumulator = std::conditional_t<isFloatType<T>, double, uint64_t>;

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
    bool done = false;
    if constexpr (std::is_same_v<T, float>) {
      // Sums over leading dims (bias gradients): each column in order,
      // vectorized across the columns (the same bits).
      int64_t outer, reduced, inner;
      if (collapseReduction(x.shape(), mask, outer, reduced, inner) &&
          inner > 1 && x.numel() > 0)
        done = columnSumFloat32(xs, outer, reduced, inner, acc.data());
    }
    if (!done)
      forEachReducedFast(x.shape(), mask, [&](int64_t in, int64_t o) {
        if constexpr (isFloatType<T>)
          acc[o] += static_cast<double>(static_cast<ComputeType<T>>(xs[in]));
        else
          acc[o] += static_cast<uint64_t>(xs[in]);
      });
    T *result = out.data_as<T>();
    for (size_t i = 0; i < acc.size(); ++i) {
      if constexpr (isFloatType<T>) {
        result[i] = convertTo<T>(acc[i] * scale);
      } else {
        // Two's complement truncation to T's width.
        T sum = static_cast<T>(static_cast<std::make_unsigned_t<T>>(acc[i]));
        if (scale == 1.0) {
          result[i] = sum;
        } else {
          double scaled = std::trunc(static_cast<double>(sum) * scale);
          if (!(scaled >= static_cast<double>(std::numeric_limits<T>::min()) &&
                scaled < -static_cast<double>(std::numeric_limits<T>::min())))
            throw RuntimeError(std::string("sum: scaled ") +
                               dtypeName(DTypeOf<T>::value) +
                               " result is out of range");
          result[i] = static_cast<T>(scaled);
        }
      }
    }
  };
  addCpuKernel<T>(registry, "sum", std::move(kernel));
}

// The start value of `max` (the lowest value) or `min` (the highest).
template <class T> T reductionIdentity(bool isMax) {
  if constexpr (std::is_same_v<T, bool>)
    return !isMax;
  else if constexpr (isFloatType<T>)
    return convertTo<T>(isMax ? -std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::infinity());
  else
    return isMax ? std::numeric_limits<T>::lowest()
                 : std::numeric_limits<T>::max();
}

// `max` and `min`; NaN propagates like torch.amax / torch.amin.
template <class T> void registerMaxMin(KernelRegistry &registry, bool isMax) {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = checkReduction;
  kernel.run = [isMax](const AttrReader &attrs,
                       const std::vector<const Tensor *> &inputs,
                       const std::vector<Tensor *> &outputs) {
    // Compare in C; keep the running values in S (not std::vector<bool>).
    using C = ComputeType<T>;
    using S = std::conditional_t<std::is_same_v<C, bool>, uint8_t, C>;
    const Tensor &x = *inputs[0];
    Tensor &out = *outputs[0];
    std::vector<bool> mask = reductionMask(attrs, x.dim());
    std::vector<S> best(static_cast<size_t>(out.numel()),
                        static_cast<S>(reductionIdentity<T>(isMax)));
    const T *xs = x.data_as<T>();
    forEachReducedFast(x.shape(), mask, [&](int64_t in, int64_t o) {
      S value = static_cast<S>(static_cast<C>(xs[in]));
      S &slot = best[o];
      if constexpr (isFloatType<T>) {
        if (std::isnan(slot))
          return; // NaN propagates
        if (std::isnan(value)) {
          slot = value;
          return;
        }
      }
      if (isMax ? slot < value : value < slot)
        slot = value;
    });
    T *result = out.data_as<T>();
    for (size_t i = 0; i < best.size(); ++i)
      result[i] = static_cast<T>(best[i]);
  };
  addCpuKernel<T>(registry, isMax ? "max" : "min", std::move(kernel));
}

} // namespace

void registerReductionKernels(KernelRegistry &registry) {
  forEachType(NumericTypes{}, [&](auto tag) {
    using T = typename decltype(tag)::type;
    registerSum<T>(registry);
    registerMaxMin<T>(registry, true);
    registerMaxMin<T>(registry, false);
  });
  registerMaxMin<bool>(registry, true);
  registerMaxMin<bool>(registry, false);
}

} // namespace dtorch::rt
