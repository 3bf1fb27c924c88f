// argmax and argmin along one dim. The output is int64 (the registry key),
// so the kernel dispatches on the input dtype when it runs.
#include "KernelSupport.h"

#include <cmath>
#include <string>

namespace dtorch::rt {

using namespace detail;

namespace {

// A rank-0 input is treated as rank 1 of extent 1 (dim 0 or -1).
struct ArgLayout {
  int64_t dim = 0;
  int64_t outer = 1;  // product of the extents before dim
  int64_t extent = 1; // extent of dim
  int64_t inner = 1;  // product of the extents after dim
};

ArgLayout argLayout(const AttrReader &attrs, const Shape &shape,
                    const char *op) {
  int64_t rank = static_cast<int64_t>(shape.size());
  ArgLayout layout;
  layout.dim = normalizeDim(attrs.getInt("dim"), rank == 0 ? 1 : rank,
                            (std::string(op) + " dim").c_str());
  for (int64_t d = 0; d < rank; ++d) {
    if (d < layout.dim)
      layout.outer *= shape[d];
    else if (d == layout.dim)
      layout.extent = shape[d];
    else
      layout.inner *= shape[d];
  }
  return layout;
}

Shape argOutputShape(const Shape &shape, int64_t dim, bool keepdim) {
  if (shape.empty())
    return shape;
  Shape out = shape;
  if (keepdim)
    out[dim] = 1;
  else
    out.erase(out.begin() + dim);
  return out;
}

void checkArgReduction(const char *op, const AttrReader &attrs,
                       const std::vector<TensorDesc> &inputs,
                       const std::vector<TensorDesc> &outputs) {
  const TensorDesc &x = inputs[0];
  if (x.dtype == ::dtorch::wire::BOOL)
    throw RuntimeError(std::string(op) + ": input must be a number, got bool");
  visitDtype(x.dtype, op, [](auto) {});
  requireDtype(outputs[0], ::dtorch::wire::I64,
               (std::string(op) + " output").c_str());
  int64_t keepdim = attrs.getInt("keepdim", 0);
  if (keepdim != 0 && keepdim != 1)
    throw RuntimeError(std::string(op) + ": keepdim must be 0 or 1, got " +
                       std::to_string(keepdim));
  ArgLayout layout = argLayout(attrs, x.shape, op);
  Shape expected = argOutputShape(x.shape, layout.dim, keepdim != 0);
  if (expected != outputs[0].shape)
    throw RuntimeError(std::string(op) + " of " + shapeToString(x.shape) +
                       " over dim " + std::to_string(layout.dim) + " gives " +
                       shapeToString(expected) + ", output is " +
                       shapeToString(outputs[0].shape));
  if (layout.extent == 0 && shapeNumel(expected) != 0)
    throw RuntimeError(std::string(op) + ": dim " + std::to_string(layout.dim) +
                       " of " + shapeToString(x.shape) + " is empty");
}

// Ties keep the first index; the first NaN wins over everything.
template <class T>
void argReduce(const T *xs, int64_t *out, const ArgLayout &layout, bool isMax) {
  using C = ComputeType<T>;
  for (int64_t o = 0; o < layout.outer; ++o)
    for (int64_t i = 0; i < layout.inner; ++i) {
      const T *column = xs + o * layout.extent * layout.inner + i;
      int64_t best = 0;
      C bestValue = static_cast<C>(column[0]);
      bool done = false;
      if constexpr (isFloatType<T>)
        done = std::isnan(bestValue);
      for (int64_t k = 1; k < layout.extent && !done; ++k) {
        C value = static_cast<C>(column[k * layout.inner]);
        if constexpr (isFloatType<T>) {
          if (std::isnan(value)) {
            best = k;
            break;
          }
        }
        if (isMax ? bestValue < value : value < bestValue) {
          best = k;
          bestValue = value;
        }
      }
      out[o * layout.inner + i] = best;
    }
}

void registerArgReduction(KernelRegistry &registry, const char *op,
                          bool isMax) {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [op](const AttrReader &attrs,
                      const std::vector<TensorDesc> &inputs,
                      const std::vector<TensorDesc> &outputs) {
    checkArgReduction(op, attrs, inputs, outputs);
  };
  kernel.run = [op, isMax](const AttrReader &attrs,
                           const std::vector<const Tensor *> &inputs,
                           const std::vector<Tensor *> &outputs) {
    const Tensor &x = *inputs[0];
    ArgLayout layout = argLayout(attrs, x.shape(), op);
    if (layout.extent == 0)
      return; // the output is empty (check)
    int64_t *out = outputs[0]->data_as<int64_t>();
    visitDtype(x.dtype(), op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>)
        argReduce<T>(x.data_as<T>(), out, layout, isMax);
    });
  };
  addCpuKernel<int64_t>(registry, op, std::move(kernel));
}

} // namespace

void registerArgReductionKernels(KernelRegistry &registry) {
  registerArgReduction(registry, "argmax", true);
  registerArgReduction(registry, "argmin", false);
}

} // namespace dtorch::rt
