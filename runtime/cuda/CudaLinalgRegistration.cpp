// The "cuda" twins of matmul and bmm: cuBLAS (cublasGemmStridedBatchedEx)
// for float32/float64/float16/bfloat16, a CUDA kernel for int32/int64
// (wrapping sums, as on the CPU). Row-major C = op(A) op(B) is computed as
// the column-major C^T = op(B)^T op(A)^T, so no operand is copied; trans_a /
// trans_b map onto cuBLAS's transposes.
//
// float32 GEMMs compute in float32 (CUBLAS_COMPUTE_32F, no TF32) unless
// DTORCH_CUDA_TF32=1; 16-bit floats accumulate in float32.
#include "CudaRegistrationSupport.h"

#include <cublas_v2.h>

#include <cstdlib>
#include <map>

namespace dtorch::rt::cuda {

namespace {

void checkBlas(cublasStatus_t status, const char *what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw RuntimeError(std::string(what) + ": " +
                       cublasGetStatusString(status));
}

// One cuBLAS handle per thread and device (a handle is not thread-safe).
cublasHandle_t blasHandle(int ordinal) {
  thread_local std::map<int, cublasHandle_t> handles;
  auto it = handles.find(ordinal);
  if (it != handles.end())
    return it->second;
  cublasHandle_t handle = nullptr;
  checkBlas(cublasCreate(&handle), "cublasCreate");
  handles[ordinal] = handle; // kept for the thread's life
  return handle;
}

bool allowTf32() {
  static const bool allowed = [] {
    const char *v = std::getenv("DTORCH_CUDA_TF32");
    return v && std::string(v) == "1";
  }();
  return allowed;
}

struct GemmShape {
  bool transA = false, transB = false;
  int64_t batch = 1, m = 0, n = 0, k = 0;
};

GemmShape gemmShape(const AttrReader &attrs, const Shape &a, const Shape &out) {
  GemmShape g;
  // The compiler folds head transposes into a bmm's layout for CPU programs
  // only (--rank-fold-transpose-into-bmm); cuBLAS's strided batch cannot
  // read them.
  for (const char *name : {"a_perm", "b_perm", "out_perm"})
    if (attrs.has(name))
      throw RuntimeError(std::string("CUDA bmm: '") + name +
                         "' (a permuted layout) is not supported");
  g.transA = attrs.getInt("trans_a", 0) == 1;
  g.transB = attrs.getInt("trans_b", 0) == 1;
  size_t r = a.size();
  g.m = out[r - 2];
  g.n = out[r - 1];
  g.k = g.transA ? a[r - 2] : a[r - 1];
  for (size_t d = 0; d + 2 < r; ++d)
    g.batch *= out[d];
  return g;
}

void floatGemm(LaunchContext &c, DType dtype, const GemmShape &g, const void *a,
               const void *b, void *out) {
  cublasHandle_t handle = blasHandle(c.device.ordinal());
  checkBlas(cublasSetStream(handle, c.stream), "cublasSetStream");
  cudaDataType_t type;
  cublasComputeType_t compute;
  float alpha32 = 1.0f, beta32 = 0.0f;
  double alpha64 = 1.0, beta64 = 0.0;
  const void *alpha = &alpha32, *beta = &beta32;
  switch (dtype) {
  case ::dtorch::wire::F32:
    type = CUDA_R_32F;
    compute = allowTf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    break;
  case ::dtorch::wire::F64:
    type = CUDA_R_64F;
    compute = CUBLAS_COMPUTE_64F;
    alpha = &alpha64;
    beta = &beta64;
    break;
  case ::dtorch::wire::F16:
    type = CUDA_R_16F;
    compute = CUBLAS_COMPUTE_32F;
    break;
  default:
    type = CUDA_R_16BF;
    compute = CUBLAS_COMPUTE_32F;
    break;
  }
  int64_t lda = g.transA ? g.m : g.k, ldb = g.transB ? g.k : g.n;
  checkBlas(cublasGemmStridedBatchedEx(
                handle, g.transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                g.transA ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(g.n),
                static_cast<int>(g.m), static_cast<int>(g.k), alpha, b, type,
                static_cast<int>(ldb), g.k * g.n, a, type,
                static_cast<int>(lda), g.m * g.k, beta, out, type,
                static_cast<int>(g.n), g.m * g.n, static_cast<int>(g.batch),
                compute, CUBLAS_GEMM_DEFAULT),
            "cublasGemmStridedBatchedEx");
}

KernelRunFn gemmRun(DType dtype, const char *name) {
  return [dtype, name](const AttrReader &attrs,
                       const std::vector<const Tensor *> &inputs,
                       const std::vector<Tensor *> &outputs) {
    LaunchContext c = launchContext(inputs, outputs, name);
    Tensor &out = *outputs[0];
    GemmShape g = gemmShape(attrs, inputs[0]->shape(), out.shape());
    if (out.numel() == 0)
      return;
    if (g.k == 0) {
      Stream &stream = c.device.currentStream();
      c.device.fillZero(out.data(), out.nbytes(), &stream);
      return;
    }
    const int64_t intMax = 2147483647;
    if (g.m > intMax || g.n > intMax || g.k > intMax || g.batch > intMax)
      throw RuntimeError(std::string(name) + ": a dim above 2^31-1 on CUDA");
    if (dtype == ::dtorch::wire::I32 || dtype == ::dtorch::wire::I64)
      launchIntegerGemm(elemTypeOf(dtype), g.transA, g.transB, g.batch, g.m,
                        g.n, g.k, inputs[0]->data(), inputs[1]->data(),
                        out.data(), c.stream);
    else
      floatGemm(c, dtype, g, inputs[0]->data(), inputs[1]->data(), out.data());
  };
}

} // namespace

void registerCudaLinalgKernels(KernelRegistry &registry) {
  for (const auto &[op, dtype] : registry.entriesFor(kCpuDevice)) {
    if (op == "matmul")
      addCudaTwin(registry, op, dtype, gemmRun(dtype, "matmul"));
    else if (op == "bmm")
      addCudaTwin(registry, op, dtype, gemmRun(dtype, "bmm"));
  }
}

} // namespace dtorch::rt::cuda
