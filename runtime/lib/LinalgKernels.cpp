// matmul and bmm: the runtime's BLAS (Blas.h: oneDNN or OpenBLAS chosen from
// CPUID, threads from the rank's core share) for float32/float64;
// float16/bfloat16 convert to float32 around the same sgemm; a plain loop for
// int32/int64.
#include "KernelSupport.h"

#include "dtorch/runtime/Blas.h"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace dtorch::rt {

using namespace detail;

namespace {

// out[M,N] = a[M,K] * b[K,N], all dense row-major.
template <class T>
void gemm(const T *a, const T *b, T *out, int64_t m, int64_t k, int64_t n) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    std::fill(out, out + m * n, T(0));
    return;
  }
  if constexpr (isSixteenBitFloat<T>) {
    std::vector<float> a32(a, a + m * k), b32(b, b + k * n), out32(m * n);
    gemm<float>(a32.data(), b32.data(), out32.data(), m, k, n);
    for (int64_t i = 0; i < m * n; ++i)
      out[i] = T(out32[i]);
  } else if constexpr (std::is_floating_point_v<T>) {
    if constexpr (std::is_same_v<T, float>)
      blas::sgemm(false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, out, n);
    else
      blas::dgemm(false, false, m, n, k, 1.0, a, k, b, n, 0.0, out, n);
  } else {
    // Integers wrap around on overflow: the sums are done in the unsigned
    // type of the same width. i-k-j order keeps rows of b contiguous.
    using U = std::make_unsigned_t<T>;
    std::vector<U> acc(static_cast<size_t>(m * n), 0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        U left = static_cast<U>(a[i * k + p]);
        const T *row = b + p * n;
        U *accRow = acc.data() + i * n;
        for (int64_t j = 0; j < n; ++j)
          accRow[j] += left * static_cast<U>(row[j]);
      }
    for (int64_t i = 0; i < m * n; ++i)
      out[i] = static_cast<T>(acc[i]);
  }
}

void checkMatmul(const AttrReader &, const std::vector<TensorDesc> &inputs,
                 const std::vector<TensorDesc> &outputs) {
  const TensorDesc &a = inputs[0], &b = inputs[1], &out = outputs[0];
  if (a.dtype != out.dtype || b.dtype != out.dtype)
    throw RuntimeError("matmul operands must share the output dtype");
  if (a.shape.size() != 2 || b.shape.size() != 2 || out.shape.size() != 2 ||
      a.shape[1] != b.shape[0] || out.shape[0] != a.shape[0] ||
      out.shape[1] != b.shape[1])
    throw RuntimeError("matmul shapes " + shapeToString(a.shape) + " x " +
                       shapeToString(b.shape) + " -> " +
                       shapeToString(out.shape) +
                       " do not match [M,K] x [K,N] -> [M,N]");
}

void checkBmm(const AttrReader &, const std::vector<TensorDesc> &inputs,
              const std::vector<TensorDesc> &outputs) {
  const TensorDesc &a = inputs[0], &b = inputs[1], &out = outputs[0];
  if (a.dtype != out.dtype || b.dtype != out.dtype)
    throw RuntimeError("bmm operands must share the output dtype");
  size_t r = a.shape.size();
  bool ok = r >= 3 && b.shape.size() == r && out.shape.size() == r &&
            a.shape[r - 1] == b.shape[r - 2] &&
            out.shape[r - 2] == a.shape[r - 2] &&
            out.shape[r - 1] == b.shape[r - 1];
  for (size_t d = 0; ok && d + 2 < r; ++d)
    ok = a.shape[d] == b.shape[d] && out.shape[d] == a.shape[d];
  if (!ok)
    throw RuntimeError("bmm shapes " + shapeToString(a.shape) + " x " +
                       shapeToString(b.shape) + " -> " +
                       shapeToString(out.shape) +
                       " do not match [B...,M,K] x [B...,K,N] -> [B...,M,N]");
}

template <class T> void registerGemmKernels(KernelRegistry &registry) {
  Kernel matmul;
  matmul.numInputs = 2;
  matmul.check = checkMatmul;
  matmul.run = [](const AttrReader &, const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &a = *inputs[0], &b = *inputs[1];
    gemm<T>(a.data_as<T>(), b.data_as<T>(), outputs[0]->data_as<T>(),
            a.shape()[0], a.shape()[1], b.shape()[1]);
  };
  addCpuKernel<T>(registry, "matmul", std::move(matmul));

  Kernel bmm;
  bmm.numInputs = 2;
  bmm.check = checkBmm;
  bmm.run = [](const AttrReader &, const std::vector<const Tensor *> &inputs,
               const std::vector<Tensor *> &outputs) {
    const Tensor &a = *inputs[0], &b = *inputs[1];
    size_t r = a.shape().size();
    int64_t batch = 1;
    for (size_t d = 0; d + 2 < r; ++d)
      batch *= a.shape()[d];
    int64_t m = a.shape()[r - 2], k = a.shape()[r - 1], n = b.shape()[r - 1];
    const T *as = a.data_as<T>();
    const T *bs = b.data_as<T>();
    T *out = outputs[0]->data_as<T>();
    for (int64_t i = 0; i < batch; ++i)
      gemm<T>(as + i * m * k, bs + i * k * n, out + i * m * n, m, k, n);
  };
  addCpuKernel<T>(registry, "bmm", std::move(bmm));
}

} // namespace

void setBlasThreads(int threads) { blas::setThreads(threads); }

void registerLinalgKernels(KernelRegistry &registry) {
  forEachType(NumericTypes{}, [&](auto tag) {
    registerGemmKernels<typename decltype(tag)::type>(registry);
  });
}

} // namespace dtorch::rt
