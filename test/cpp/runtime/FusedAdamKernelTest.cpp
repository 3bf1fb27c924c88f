// The multi-tensor `fused_adam` kernel (runtime/lib/OptimizerKernels.cpp):
// one call updates parameters of several shapes and dtypes; float32 and
// float64 results equal a plain per-element reference bit for bit (the
// per-op update's operations in order), float16 and bfloat16 a float32
// reference rounded once; written over donated inputs it gives the same
// bits; the program validator rejects malformed calls.
#include "KernelTestSupport.h"

#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/ProgramValidator.h"

#include <cstring>

namespace dtorch::rt::test {
namespace {

struct Hyper {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.05;
  bool decoupled = true, amsgrad = false, maximize = false;
  double lr = 1e-2, step = 3;
};

void setHyper(Instruction &inst, const Hyper &h) {
  setFloat(inst, "beta1", h.beta1);
  setFloat(inst, "beta2", h.beta2);
  setFloat(inst, "eps", h.eps);
  setFloat(inst, "weight_decay", h.weightDecay);
  setInt(inst, "decoupled", h.decoupled);
  setInt(inst, "amsgrad", h.amsgrad);
  setInt(inst, "maximize", h.maximize);
}

/// The per-op update of one element, in M (float32 for 16-bit types),
/// with no contraction: what the kernel must equal.
#pragma clang fp contract(off)
template <class T, class M>
void referenceUpdate(const Hyper &h, T &pRef, T g0, T &mRef, T &vRef,
                     T &vmaxRef) {
  M stepSize = static_cast<M>(h.lr / (1.0 - std::pow(h.beta1, h.step)));
  M bc2 = static_cast<M>(std::sqrt(1.0 - std::pow(h.beta2, h.step)));
  M p = static_cast<M>(pRef), g = static_cast<M>(g0);
  M m = static_cast<M>(mRef), v = static_cast<M>(vRef);
  if (h.maximize)
    g = -g;
  if (h.weightDecay != 0 && !h.decoupled)
    g = g + p * static_cast<M>(h.weightDecay);
  if (h.weightDecay != 0 && h.decoupled)
    p = p * static_cast<M>(1.0 - h.lr * h.weightDecay);
  M w = static_cast<M>(1.0 - h.beta1);
  m = m + (g - m) * w;
  v = v * static_cast<M>(h.beta2) + g * g * static_cast<M>(1.0 - h.beta2);
  M used = v;
  if (h.amsgrad) {
    M previous = static_cast<M>(vmaxRef);
    used = previous > v ? previous : v;
    vmaxRef = static_cast<T>(used);
  }
  M denom = std::sqrt(used) / bc2 + static_cast<M>(h.eps);
  p = p - stepSize * (m / denom);
  pRef = static_cast<T>(p);
  mRef = static_cast<T>(m);
  vRef = static_cast<T>(v);
}

template <class T>
using MathOf = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
bool sameBits(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// Runs fused_adam on `shapes` (one dtype) and checks every output against
/// the reference; with `donate`, each output takes the storage of the input
/// it replaces.
template <class T>
void checkAgainstReference(DType dtype, const Hyper &h, bool donate) {
  const std::vector<Shape> shapes = {{3, 5}, {7}, {1}, {2, 2, 3}};
  size_t n = shapes.size();
  int perParam = h.amsgrad ? 5 : 4;
  ProgramBuilder b;
  std::vector<Tensor> inputs;
  auto scalar = [&](double v) {
    inputs.push_back(makeTensor<double>(F64, {}, {v}));
    return b.input(F64, {});
  };
  std::vector<int> ins{scalar(h.step), scalar(h.lr)};
  // values[k][i]: tensor k (p, g, m, v, vmax) of parameter i.
  std::vector<std::vector<std::vector<T>>> values(perParam);
  for (int k = 0; k < perParam; ++k)
    for (size_t i = 0; i < n; ++i) {
      int64_t count = 1;
      for (int64_t d : shapes[i])
        count *= d;
      // Second moments are non-negative.
      double low = k >= 3 ? 0.0 : -2.0;
      values[k].push_back(randomValues<T>(count, low, 2.0, 11 * k + i + 1));
      inputs.push_back(makeTensor<T>(dtype, shapes[i], values[k][i]));
      ins.push_back(b.input(dtype, shapes[i]));
    }
  std::vector<int> outs;
  for (int k = 0; k + 1 < perParam; ++k)
    for (size_t i = 0; i < n; ++i)
      outs.push_back(b.buffer(dtype, shapes[i]));
  setHyper(b.add("fused_adam", ins, outs), h);
  for (int o : outs)
    b.output(o);
  std::vector<bool> donated(inputs.size(), false);
  std::vector<const void *> storage(outs.size());
  if (donate) {
    std::vector<int> donors;
    for (int k = 0; k + 1 < perParam; ++k)
      for (size_t i = 0; i < n; ++i) {
        size_t input = 2 + (k == 0 ? 0 : k + 1) * n + i;
        donors.push_back(static_cast<int>(input));
        donated[input] = true;
        storage[k * n + i] = inputs[input].data();
      }
    for (int d : donors)
      b.program().add_output_donors(d);
  }
  Executor executor(nullptr);
  std::vector<Tensor> out =
      executor.runValidated(b.program(), std::move(inputs), {}, donated);
  ASSERT_EQ(out.size(), (perParam - 1) * n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<T> p = values[0][i], m = values[2][i], v = values[3][i];
    std::vector<T> vmax = h.amsgrad ? values[4][i] : std::vector<T>(p.size());
    for (size_t j = 0; j < p.size(); ++j)
      referenceUpdate<T, MathOf<T>>(h, p[j], values[1][i][j], m[j], v[j],
                                    vmax[j]);
    std::vector<std::vector<T>> want{p, m, v};
    if (h.amsgrad)
      want.push_back(vmax);
    for (size_t k = 0; k < want.size(); ++k) {
      EXPECT_TRUE(sameBits(valuesOf<T>(out[k * n + i]), want[k]))
          << "output " << k << " of parameter " << i;
      if (donate)
        EXPECT_EQ(out[k * n + i].data(), storage[k * n + i])
            << "output " << k << " of parameter " << i << " was not in place";
    }
  }
}

template <class C> class FusedAdamKernel : public ::testing::Test {};
TYPED_TEST_SUITE(FusedAdamKernel, FloatCases);

TYPED_TEST(FusedAdamKernel, EqualsThePerElementUpdate) {
  using T = typename TypeParam::T;
  Hyper adamw;
  checkAgainstReference<T>(TypeParam::dtype, adamw, false);
  Hyper adam;
  adam.decoupled = false;
  adam.amsgrad = true;
  adam.maximize = true;
  adam.step = 1;
  checkAgainstReference<T>(TypeParam::dtype, adam, false);
  Hyper plain;
  plain.weightDecay = 0;
  plain.step = 20;
  checkAgainstReference<T>(TypeParam::dtype, plain, false);
}

TYPED_TEST(FusedAdamKernel, WritesOverDonatedInputsWithTheSameBits) {
  using T = typename TypeParam::T;
  Hyper adamw;
  checkAgainstReference<T>(TypeParam::dtype, adamw, true);
  Hyper ams;
  ams.amsgrad = true;
  checkAgainstReference<T>(TypeParam::dtype, ams, true);
}

TEST(FusedAdamKernelCheck, RejectsMalformedCalls) {
  auto program = [](int params, int tensors, int outputs, DType scalar,
                    DType second) {
    ProgramBuilder b;
    std::vector<int> ins{b.input(scalar, {}), b.input(F64, {})};
    for (int t = 0; t < tensors; ++t)
      ins.push_back(b.input(t == params ? second : F32, {4}));
    std::vector<int> outs;
    for (int o = 0; o < outputs; ++o)
      outs.push_back(b.buffer(F32, {4}));
    setHyper(b.add("fused_adam", ins, outs), Hyper{});
    for (int o : outs)
      b.output(o);
    return b.program();
  };
  auto expectRejected = [](const Program &p, const std::string &fragment) {
    try {
      validateProgram(p, -1);
      ADD_FAILURE() << "accepted; expected: " << fragment;
    } catch (const RuntimeError &e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
          << e.what();
    }
  };
  EXPECT_NO_THROW(validateProgram(program(1, 4, 3, F64, F32), -1));
  expectRejected(program(1, 5, 3, F64, F32), "4 tensors per parameter");
  expectRejected(program(1, 4, 2, F64, F32), "has 3 outputs, got 2");
  expectRejected(program(1, 4, 3, F32, F32), "step must be float64");
  // The gradient of parameter 0 is float64, its parameter float32.
  expectRejected(program(1, 4, 3, F64, F64), "fused_adam input");
}

} // namespace
} // namespace dtorch::rt::test
