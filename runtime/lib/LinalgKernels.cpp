// matmul and bmm: the runtime's BLAS (Blas.h: oneDNN or OpenBLAS chosen from
// CPUID, threads from the rank's core share) for float32/float64;
// float16/bfloat16 convert to float32 around the same sgemm; a plain loop for
// int32/int64. Either operand may be read transposed (`trans_a`, `trans_b`),
// which the BLAS does without a copy.
#include "KernelSupport.h"

#include "dtorch/runtime/Blas.h"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace dtorch::rt {

using namespace detail;

namespace {

// Which operands a GEMM reads transposed: `trans_a` / `trans_b` (0 or 1,
// default 0). A transposed operand is stored with its last two dims swapped
// (a as [K,M], b as [N,K]); --rank-fold-transpose-into-matmul sets them
// instead of materialising the transpose.
struct GemmFlags {
  bool transA = false, transB = false;
};

bool readFlag(const AttrReader &attrs, const char *name) {
  int64_t value = attrs.getInt(name, 0);
  if (value != 0 && value != 1)
    throw RuntimeError(std::string("attribute '") + name +
                       "' must be 0 or 1, got " + std::to_string(value));
  return value == 1;
}

GemmFlags readGemmFlags(const AttrReader &attrs) {
  return {readFlag(attrs, "trans_a"), readFlag(attrs, "trans_b")};
}

// out[M,N] = op(a)[M,K] * op(b)[K,N], all dense row-major; op(a) is a
// (stored [M,K]) or a^T (stored [K,M]) with `transA`, likewise for b (stored
// [K,N] or [N,K]).
template <class T>
void gemm(GemmFlags f, const T *a, const T *b, T *out, int64_t m, int64_t k,
          int64_t n) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    std::fill(out, out + m * n, T(0));
    return;
  }
  int64_t lda = f.transA ? m : k, ldb = f.transB ? k : n;
  if constexpr (isSixteenBitFloat<T>) {
    std::vector<float> a32(a, a + m * k), b32(b, b + k * n), out32(m * n);
    gemm<float>(f, a32.data(), b32.data(), out32.data(), m, k, n);
    for (int64_t i = 0; i < m * n; ++i)
      out[i] = T(out32[i]);
  } else if constexpr (std::is_floating_point_v<T>) {
    if constexpr (std::is_same_v<T, float>)
      blas::sgemm(f.transA, f.transB, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, out,
                  n);
    else
      blas::dgemm(f.transA, f.transB, m, n, k, 1.0, a, lda, b, ldb, 0.0, out,
                  n);
  } else {
    // Integers wrap around on overflow: the sums are done in the unsigned
    // type of the same width. i-k-j order keeps rows of op(b) contiguous
    // when b is not transposed; a transposed b has contiguous columns of
    // op(b), so each output is a dot product over k.
    using U = std::make_unsigned_t<T>;
    auto left = [&](int64_t i, int64_t p) {
      return static_cast<U>(f.transA ? a[p * lda + i] : a[i * lda + p]);
    };
    std::vector<U> acc(static_cast<size_t>(m * n), 0);
    for (int64_t i = 0; i < m; ++i) {
      U *accRow = acc.data() + i * n;
      if (f.transB) {
        for (int64_t j = 0; j < n; ++j) {
          const T *column = b + j * ldb;
          U sum = 0;
          for (int64_t p = 0; p < k; ++p)
            sum += left(i, p) * static_cast<U>(column[p]);
          accRow[j] = sum;
        }
      } else {
        for (int64_t p = 0; p < k; ++p) {
          U l = left(i, p);
          const T *row = b + p * ldb;
          for (int64_t j = 0; j < n; ++j)
            accRow[j] += l * static_cast<U>(row[j]);
        }
      }
    }
    for (int64_t i = 0; i < m * n; ++i)
      out[i] = static_cast<T>(acc[i]);
  }
}

// The [M, K] and [K, N] of op(a), op(b) from the stored shapes' last two
// dims.
struct GemmDims {
  int64_t m, k, kb, n;
};
GemmDims gemmDims(GemmFlags f, const Shape &a, const Shape &b) {
  size_t r = a.size();
  GemmDims d;
  d.m = f.transA ? a[r - 1] : a[r - 2];
  d.k = f.transA ? a[r - 2] : a[r - 1];
  d.kb = f.transB ? b[r - 1] : b[r - 2];
  d.n = f.transB ? b[r - 2] : b[r - 1];
  return d;
}

std::string flagsText(GemmFlags f) {
  std::string text;
  if (f.transA)
    text += " (a transposed)";
  if (f.transB)
    text += " (b transposed)";
  return text;
}

void checkMatmul(const AttrReader &attrs, const std::vector<TensorDesc> &inputs,
                 const std::vector<TensorDesc> &outputs) {
  const TensorDesc &a = inputs[0], &b = inputs[1], &out = outputs[0];
  if (a.dtype != out.dtype || b.dtype != out.dtype)
    throw RuntimeError("matmul operands must share the output dtype");
  GemmFlags f = readGemmFlags(attrs);
  bool ok = a.shape.size() == 2 && b.shape.size() == 2 && out.shape.size() == 2;
  if (ok) {
    GemmDims d = gemmDims(f, a.shape, b.shape);
    ok = d.k == d.kb && out.shape[0] == d.m && out.shape[1] == d.n;
  }
  if (!ok)
    throw RuntimeError("matmul shapes " + shapeToString(a.shape) + " x " +
                       shapeToString(b.shape) + " -> " +
                       shapeToString(out.shape) + flagsText(f) +
                       " do not match [M,K] x [K,N] -> [M,N]");
}

void checkBmm(const AttrReader &attrs, const std::vector<TensorDesc> &inputs,
              const std::vector<TensorDesc> &outputs) {
  const TensorDesc &a = inputs[0], &b = inputs[1], &out = outputs[0];
  if (a.dtype != out.dtype || b.dtype != out.dtype)
    throw RuntimeError("bmm operands must share the output dtype");
  GemmFlags f = readGemmFlags(attrs);
  size_t r = a.shape.size();
  bool ok = r >= 3 && b.shape.size() == r && out.shape.size() == r;
  if (ok) {
    GemmDims d = gemmDims(f, a.shape, b.shape);
    ok = d.k == d.kb && out.shape[r - 2] == d.m && out.shape[r - 1] == d.n;
  }
  for (size_t d = 0; ok && d + 2 < r; ++d)
    ok = a.shape[d] == b.shape[d] && out.shape[d] == a.shape[d];
  if (!ok)
    throw RuntimeError("bmm shapes " + shapeToString(a.shape) + " x " +
                       shapeToString(b.shape) + " -> " +
                       shapeToString(out.shape) + flagsText(f) +
                       " do not match [B...,M,K] x [B...,K,N] -> [B...,M,N]");
}

template <class T> void registerGemmKernels(KernelRegistry &registry) {
  Kernel matmul;
  matmul.numInputs = 2;
  matmul.check = checkMatmul;
  matmul.run = [](const AttrReader &attrs,
                  const std::vector<const Tensor *> &inputs,
                  const std::vector<Tensor *> &outputs) {
    const Tensor &a = *inputs[0], &b = *inputs[1];
    GemmFlags f = readGemmFlags(attrs);
    GemmDims d = gemmDims(f, a.shape(), b.shape());
    gemm<T>(f, a.data_as<T>(), b.data_as<T>(), outputs[0]->data_as<T>(), d.m,
            d.k, d.n);
  };
  addCpuKernel<T>(registry, "matmul", std::move(matmul));

  Kernel bmm;
  bmm.numInputs = 2;
  bmm.check = checkBmm;
  bmm.run = [](const AttrReader &attrs,
               const std::vector<const Tensor *> &inputs,
               const std::vector<Tensor *> &outputs) {
    const Tensor &a = *inputs[0], &b = *inputs[1];
    GemmFlags f = readGemmFlags(attrs);
    size_t r = a.shape().size();
    int64_t batch = 1;
    for (size_t d = 0; d + 2 < r; ++d)
      batch *= a.shape()[d];
    GemmDims d = gemmDims(f, a.shape(), b.shape());
    const T *as = a.data_as<T>();
    const T *bs = b.data_as<T>();
    T *out = outputs[0]->data_as<T>();
    // Each product's operands are dense: a transposed operand only swaps
    // the last two dims, so the batch strides stay M*K and K*N.
    for (int64_t i = 0; i < batch; ++i)
      gemm<T>(f, as + i * d.m * d.k, bs + i * d.k * d.n, out + i * d.m * d.n,
              d.m, d.k, d.n);
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
