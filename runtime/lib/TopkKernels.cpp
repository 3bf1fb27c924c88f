// topk_indices: the indices of the k largest (or smallest) values along one
// dim, in order (largest first, or smallest first). The output is int64 (the
// registry key), so the kernel dispatches on the input dtype when it runs.
// NaN counts as larger than every number, as in torch; equal values keep
// their index order.
#include "KernelSupport.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace dtorch::rt {

using namespace detail;

namespace {

struct TopkLayout {
  int64_t dim = 0, outer = 1, extent = 1, inner = 1, k = 0;
  bool largest = true;
};

TopkLayout topkLayout(const AttrReader &attrs, const Shape &shape) {
  int64_t rank = static_cast<int64_t>(shape.size());
  TopkLayout l;
  l.dim = normalizeDim(attrs.getInt("dim"), rank == 0 ? 1 : rank,
                       "topk_indices dim");
  for (int64_t d = 0; d < rank; ++d) {
    if (d < l.dim)
      l.outer *= shape[d];
    else if (d == l.dim)
      l.extent = shape[d];
    else
      l.inner *= shape[d];
  }
  l.k = attrs.getInt("k");
  int64_t largest = attrs.getInt("largest", 1);
  if (largest != 0 && largest != 1)
    throw RuntimeError("topk_indices: largest must be 0 or 1");
  l.largest = largest == 1;
  if (l.k < 0 || l.k > l.extent)
    throw RuntimeError("topk_indices: k = " + std::to_string(l.k) +
                       " is out of range for a dim of extent " +
                       std::to_string(l.extent));
  return l;
}

template <class T> void topk(const T *xs, int64_t *out, const TopkLayout &l) {
  using C = ComputeType<T>;
  std::vector<int64_t> order(l.extent);
  std::vector<C> values(l.extent);
  // "a comes before b": larger first (or smaller first), NaN as the largest,
  // and equal values in index order (a total order, so std::sort is stable).
  auto before = [&](int64_t a, int64_t b) {
    C va = values[a], vb = values[b];
    if constexpr (isFloatType<T>) {
      bool na = std::isnan(va), nb = std::isnan(vb);
      if (na || nb)
        return na == nb ? a < b : l.largest ? na : nb;
    }
    if (va == vb)
      return a < b;
    return l.largest ? vb < va : va < vb;
  };
  for (int64_t o = 0; o < l.outer; ++o)
    for (int64_t i = 0; i < l.inner; ++i) {
      const T *column = xs + o * l.extent * l.inner + i;
      for (int64_t e = 0; e < l.extent; ++e)
        values[e] = static_cast<C>(column[e * l.inner]);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), before);
      int64_t *dst = out + o * l.k * l.inner + i;
      for (int64_t j = 0; j < l.k; ++j)
        dst[j * l.inner] = order[j];
    }
}

} // namespace

void registerTopkKernels(KernelRegistry &registry) {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &attrs,
                    const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    const TensorDesc &x = inputs[0];
    if (x.dtype == ::dtorch::wire::BOOL)
      throw RuntimeError("topk_indices: input must be a number, got bool");
    visitDtype(x.dtype, "topk_indices", [](auto) {});
    requireDtype(outputs[0], ::dtorch::wire::I64, "topk_indices output");
    TopkLayout l = topkLayout(attrs, x.shape);
    Shape expected = x.shape.empty() ? Shape{} : x.shape;
    if (!expected.empty())
      expected[l.dim] = l.k;
    if (expected != outputs[0].shape)
      throw RuntimeError("topk_indices of " + shapeToString(x.shape) +
                         " gives " + shapeToString(expected) + ", output is " +
                         shapeToString(outputs[0].shape));
  };
  kernel.run = [](const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0];
    TopkLayout l = topkLayout(attrs, x.shape());
    int64_t *out = outputs[0]->data_as<int64_t>();
    visitDtype(x.dtype(), "topk_indices", [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>)
        topk<T>(x.data_as<T>(), out, l);
    });
  };
  addCpuKernel<int64_t>(registry, "topk_indices", std::move(kernel));
}

} // namespace dtorch::rt
