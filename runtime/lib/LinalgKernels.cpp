// matmul and bmm: cblas GEMM for float32/float64, a plain loop for int64.
#include "KernelSupport.h"

#include <cblas.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dtorch::rt {

using namespace detail;

namespace {

std::once_flag blasThreadsFromEnvironment;
std::mutex blasThreadsMutex;
bool blasThreadsSetExplicitly = false;

void applyBlasThreadsFromEnvironment() {
  std::call_once(blasThreadsFromEnvironment, [] {
    std::lock_guard<std::mutex> lock(blasThreadsMutex);
    if (blasThreadsSetExplicitly)
      return;
    int threads = 1;
    if (const char *text = std::getenv("DTORCH_BLAS_THREADS")) {
      char *end = nullptr;
      long parsed = std::strtol(text, &end, 10);
      if (end != text && *end == '\0' && parsed >= 1 && parsed <= 1024)
        threads = static_cast<int>(parsed);
    }
    openblas_set_num_threads(threads);
  });
}

// out[M,N] = a[M,K] * b[K,N], all dense row-major.
template <class T>
void gemm(const T *a, const T *b, T *out, int64_t m, int64_t k, int64_t n) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    std::memset(out, 0, static_cast<size_t>(m * n) * sizeof(T));
    return;
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
      throw RuntimeError("GEMM dimension exceeds the BLAS integer range");
    applyBlasThreadsFromEnvironment();
    int M = static_cast<int>(m), N = static_cast<int>(n),
        K = static_cast<int>(k);
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a,
                  K, b, N, 0.0f, out, N);
    else
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0, a, K,
                  b, N, 0.0, out, N);
  } else {
    // int64 wraps around on overflow; i-k-j order keeps rows of b contiguous.
    auto *acc = reinterpret_cast<uint64_t *>(out);
    std::memset(acc, 0, static_cast<size_t>(m * n) * sizeof(uint64_t));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        uint64_t left = static_cast<uint64_t>(a[i * k + p]);
        const T *row = b + p * n;
        for (int64_t j = 0; j < n; ++j)
          acc[i * n + j] += left * static_cast<uint64_t>(row[j]);
      }
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
  if (a.shape.size() != 3 || b.shape.size() != 3 || out.shape.size() != 3 ||
      a.shape[0] != b.shape[0] || out.shape[0] != a.shape[0] ||
      a.shape[2] != b.shape[1] || out.shape[1] != a.shape[1] ||
      out.shape[2] != b.shape[2])
    throw RuntimeError("bmm shapes " + shapeToString(a.shape) + " x " +
                       shapeToString(b.shape) + " -> " +
                       shapeToString(out.shape) +
                       " do not match [B,M,K] x [B,K,N] -> [B,M,N]");
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
    int64_t batch = a.shape()[0], m = a.shape()[1], k = a.shape()[2],
            n = b.shape()[2];
    const T *as = a.data_as<T>();
    const T *bs = b.data_as<T>();
    T *out = outputs[0]->data_as<T>();
    for (int64_t i = 0; i < batch; ++i)
      gemm<T>(as + i * m * k, bs + i * k * n, out + i * m * n, m, k, n);
  };
  addCpuKernel<T>(registry, "bmm", std::move(bmm));
}

} // namespace

void setBlasThreads(int threads) {
  if (threads < 1)
    throw RuntimeError("BLAS thread count must be at least 1");
  std::lock_guard<std::mutex> lock(blasThreadsMutex);
  blasThreadsSetExplicitly = true;
  openblas_set_num_threads(threads);
}

void registerLinalgKernels(KernelRegistry &registry) {
  registerGemmKernels<float>(registry);
  registerGemmKernels<double>(registry);
  registerGemmKernels<int64_t>(registry);
}

} // namespace dtorch::rt
