// eq ne lt le gt ge (bool output; the kernel dispatches on the input dtype)
// and where (select between two tensors by a bool condition).
#include "KernelSupport.h"

#include <string>

namespace dtorch::rt {

using namespace detail;

namespace {

enum class Comparison { Eq, Ne, Lt, Le, Gt, Ge };

// IEEE semantics: every comparison with a NaN is false except `ne`. The
// comparison is a template argument, so each loop is one branch-free
// comparison that the compiler vectorizes.
template <Comparison kind, class C> bool compare(C a, C b) {
  if constexpr (kind == Comparison::Eq)
    return a == b;
  else if constexpr (kind == Comparison::Ne)
    return a != b;
  else if constexpr (kind == Comparison::Lt)
    return a < b;
  else if constexpr (kind == Comparison::Le)
    return a <= b;
  else if constexpr (kind == Comparison::Gt)
    return a > b;
  else
    return a >= b;
}

template <Comparison kind, class T>
void compareLoop(const T *a, const T *b, bool *out, int64_t n) {
  using C = ComputeType<T>;
  for (int64_t i = 0; i < n; ++i)
    out[i] = compare<kind>(static_cast<C>(a[i]), static_cast<C>(b[i]));
}

template <class T>
void compareAll(Comparison kind, const T *a, const T *b, bool *out, int64_t n) {
  switch (kind) {
  case Comparison::Eq:
    return compareLoop<Comparison::Eq>(a, b, out, n);
  case Comparison::Ne:
    return compareLoop<Comparison::Ne>(a, b, out, n);
  case Comparison::Lt:
    return compareLoop<Comparison::Lt>(a, b, out, n);
  case Comparison::Le:
    return compareLoop<Comparison::Le>(a, b, out, n);
  case Comparison::Gt:
    return compareLoop<Comparison::Gt>(a, b, out, n);
  case Comparison::Ge:
    return compareLoop<Comparison::Ge>(a, b, out, n);
  }
}

void registerComparison(KernelRegistry &registry, const char *op,
                        Comparison kind) {
  Kernel kernel;
  kernel.numInputs = 2;
  kernel.check = [op](const AttrReader &, const std::vector<TensorDesc> &inputs,
                      const std::vector<TensorDesc> &outputs) {
    visitDtype(inputs[0].dtype, op, [](auto) {});
    requireSameDescs(inputs[0], inputs[1],
                     (std::string(op) + ": input 1 vs input 0").c_str());
    requireDtype(outputs[0], ::dtorch::wire::BOOL,
                 (std::string(op) + " output").c_str());
    if (outputs[0].shape != inputs[0].shape)
      throw RuntimeError(std::string(op) + ": output " +
                         shapeToString(outputs[0].shape) +
                         " differs in shape from the inputs " +
                         shapeToString(inputs[0].shape));
  };
  kernel.run = [op, kind](const AttrReader &,
                          const std::vector<const Tensor *> &inputs,
                          const std::vector<Tensor *> &outputs) {
    const Tensor &a = *inputs[0], &b = *inputs[1];
    bool *out = outputs[0]->data_as<bool>();
    visitDtype(a.dtype(), op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      compareAll<T>(kind, a.data_as<T>(), b.data_as<T>(), out, a.numel());
    });
  };
  addCpuKernel<bool>(registry, op, std::move(kernel));
}

template <class T> void registerWhere(KernelRegistry &registry) {
  Kernel kernel;
  kernel.numInputs = 3;
  kernel.check = [](const AttrReader &, const std::vector<TensorDesc> &inputs,
                    const std::vector<TensorDesc> &outputs) {
    requireDtype(inputs[0], ::dtorch::wire::BOOL, "where: condition");
    if (inputs[0].shape != outputs[0].shape)
      throw RuntimeError("where: condition " + shapeToString(inputs[0].shape) +
                         " differs in shape from the output " +
                         shapeToString(outputs[0].shape));
    requireSameDescs(outputs[0], inputs[1], "where: input 1 vs output");
    requireSameDescs(outputs[0], inputs[2], "where: input 2 vs output");
  };
  kernel.run = [](const AttrReader &, const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const bool *cond = inputs[0]->data_as<bool>();
    const T *a = inputs[1]->data_as<T>();
    const T *b = inputs[2]->data_as<T>();
    T *out = outputs[0]->data_as<T>();
    // Both values are read first, so the choice is a select (vectorized,
    // no branch to mispredict on an irregular condition).
    for (int64_t i = 0, n = outputs[0]->numel(); i < n; ++i) {
      T x = a[i], y = b[i];
      out[i] = cond[i] ? x : y;
    }
  };
  addCpuKernel<T>(registry, "where", std::move(kernel));
}

} // namespace

void registerComparisonKernels(KernelRegistry &registry) {
  registerComparison(registry, "eq", Comparison::Eq);
  registerComparison(registry, "ne", Comparison::Ne);
  registerComparison(registry, "lt", Comparison::Lt);
  registerComparison(registry, "le", Comparison::Le);
  registerComparison(registry, "gt", Comparison::Gt);
  registerComparison(registry, "ge", Comparison::Ge);
  forEachType(AllTypes{}, [&](auto tag) {
    registerWhere<typename decltype(tag)::type>(registry);
  });
}

} // namespace dtorch::rt
