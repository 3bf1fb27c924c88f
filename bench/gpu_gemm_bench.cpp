// gpu_gemm_bench: TFLOP/s of DTorch's CUDA matmul kernel (the registry's
// "cuda" matmul, as a worker runs it) next to cuBLAS called directly on the
// same buffers, for square GEMMs in float32, bfloat16 and float16.
//
//   gpu_gemm_bench [--sizes 1024,2048,4096,8192] [--iters N]
//
// Prints one row per (dtype, size): both figures and their ratio. Exits 2
// with "no GPU: <reason>" where there is no CUDA device.
#include "CudaDevice.h"
#include "dtorch/runtime/Kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

using namespace dtorch::rt;

namespace {

struct Case {
  const char *name;
  DType dtype;
  cudaDataType_t cudaType;
};

double secondsOf(const std::function<void()> &fn, int iters,
                 cudaStream_t stream) {
  fn(); // warm up (cuBLAS heuristics, caches)
  cudaStreamSynchronize(stream);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i)
    fn();
  cudaStreamSynchronize(stream);
  std::chrono::duration<double> elapsed =
      std::chrono::steady_clock::now() - start;
  return elapsed.count() / iters;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<int64_t> sizes{1024, 2048, 4096, 8192};
  int iters = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--sizes") {
      sizes.clear();
      std::stringstream list(argv[i + 1]);
      std::string item;
      while (std::getline(list, item, ','))
        sizes.push_back(std::stoll(item));
    } else if (flag == "--iters") {
      iters = std::atoi(argv[i + 1]);
    }
  }
  cuda::registerCudaBackend();
  std::string why;
  if (deviceCount("cuda", &why) == 0) {
    std::fprintf(stderr, "gpu_gemm_bench: no GPU: %s\n", why.c_str());
    return 2;
  }
  cuda::CudaDevice &gpu = cuda::cudaDevice(0);
  cudaStream_t stream = gpu.currentCudaStream();
  cublasHandle_t handle;
  cublasCreate(&handle);
  cublasSetStream(handle, stream);
  std::printf("# %s, %d iterations per size\n", gpu.describe().c_str(), iters);
  std::printf("%-9s %6s %14s %14s %7s\n", "dtype", "n", "dtorch TFLOP/s",
              "cuBLAS TFLOP/s", "ratio");
  const Case cases[] = {{"float32", ::dtorch::wire::F32, CUDA_R_32F},
                        {"bfloat16", ::dtorch::wire::BF16, CUDA_R_16BF},
                        {"float16", ::dtorch::wire::F16, CUDA_R_16F}};
  for (const Case &c : cases) {
    const Kernel *matmul = lookupKernel("matmul", c.dtype, kCudaDevice);
    for (int64_t n : sizes) {
      Tensor a = Tensor::empty(c.dtype, {n, n}, gpu);
      Tensor b = Tensor::empty(c.dtype, {n, n}, gpu);
      Tensor out = Tensor::empty(c.dtype, {n, n}, gpu);
      gpu.fillZero(a.data(), a.nbytes(), nullptr);
      gpu.fillZero(b.data(), b.nbytes(), nullptr);
      ::dtorch::wire::Instruction inst;
      AttrReader attrs(inst.attrs());
      std::vector<const Tensor *> in{&a, &b};
      std::vector<Tensor *> outs{&out};
      double ours =
          secondsOf([&] { matmul->run(attrs, in, outs); }, iters, stream);
      float alpha = 1, beta = 0;
      cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
      double theirs = secondsOf(
          [&] {
            cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha,
                         b.data(), c.cudaType, n, a.data(), c.cudaType, n,
                         &beta, out.data(), c.cudaType, n, compute,
                         CUBLAS_GEMM_DEFAULT);
          },
          iters, stream);
      double flops = 2.0 * n * n * n;
      std::printf("%-9s %6lld %14.1f %14.1f %7.3f\n", c.name,
                  static_cast<long long>(n), flops / ours / 1e12,
                  flops / theirs / 1e12, theirs / ours);
    }
  }
  cublasDestroy(handle);
  return 0;
}
