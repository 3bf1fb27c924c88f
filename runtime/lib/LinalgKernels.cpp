// matmul and bmm: the runtime's BLAS (Blas.h: oneDNN or OpenBLAS chosen from
// CPUID, threads from the rank's core share) for float32/float64;
// float16/bfloat16 convert to float32 around the same sgemm; a plain loop for
// int32/int64. Either operand may be read transposed (`trans_a`, `trans_b`),
// which the BLAS does without a copy; a bmm operand or result may also be
// stored with its leading dims permuted (`a_perm`, `b_perm`, `out_perm`).
#include "KernelSupport.h"
#include "SmallGemm.h"

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

// out[M,N] = op(a)[M,K] * op(b)[K,N], row-major with the row strides lda,
// ldb, ldc (elements; every row is contiguous); op(a) is a (stored [M,K]) or
// a^T (stored [K,M]) with `transA`, likewise for b (stored [K,N] or [N,K]).
// `small`: a bmm's product, which float32 hands to smallSgemm when it fits
// (SmallGemm.h).
template <class T>
void gemmStrided(GemmFlags f, const T *a, int64_t lda, const T *b, int64_t ldb,
                 T *out, int64_t ldc, int64_t m, int64_t k, int64_t n,
                 bool small = false) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      std::fill(out + i * ldc, out + i * ldc + n, T(0));
    return;
  }
  if constexpr (isSixteenBitFloat<T>) {
    // Converted into dense float32 copies around the same sgemm.
    int64_t aRows = f.transA ? k : m, aCols = f.transA ? m : k;
    int64_t bRows = f.transB ? n : k, bCols = f.transB ? k : n;
    std::vector<float> a32(aRows * aCols), b32(bRows * bCols), out32(m * n);
    for (int64_t i = 0; i < aRows; ++i)
      std::copy(a + i * lda, a + i * lda + aCols, a32.begin() + i * aCols);
    for (int64_t i = 0; i < bRows; ++i)
      std::copy(b + i * ldb, b + i * ldb + bCols, b32.begin() + i * bCols);
    gemmStrided<float>(f, a32.data(), aCols, b32.data(), bCols, out32.data(), n,
                       m, k, n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        out[i * ldc + j] = T(out32[i * n + j]);
  } else if constexpr (std::is_floating_point_v<T>) {
    if constexpr (std::is_same_v<T, float>) {
      if (small &&
          smallSgemm(f.transA, f.transB, m, n, k, a, lda, b, ldb, out, ldc))
        return;
      blas::sgemm(f.transA, f.transB, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, out,
                  ldc);
    } else
      blas::dgemm(f.transA, f.transB, m, n, k, 1.0, a, lda, b, ldb, 0.0, out,
                  ldc);
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
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        out[i * ldc + j] = static_cast<T>(acc[i * n + j]);
  }
}

// The same, all dense.
template <class T>
void gemm(GemmFlags f, const T *a, const T *b, T *out, int64_t m, int64_t k,
          int64_t n) {
  gemmStrided<T>(f, a, f.transA ? m : k, b, f.transB ? k : n, out, n, m, k, n);
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

// A bmm operand or result may be stored with its dims permuted, so that the
// head transposes of attention are read and written in place
// (--rank-fold-transpose-into-bmm): `a_perm` / `b_perm` say that the
// product reads transpose(stored, perm) (dim d of the operand is dim
// perm[d] of the stored tensor), `out_perm` that the stored result is
// transpose(product, perm). Every perm keeps the last dim last, so each row
// stays contiguous and the BLAS reads it with a row stride.
std::vector<int64_t> readLayoutPerm(const AttrReader &attrs, const char *name,
                                    size_t rank) {
  std::vector<int64_t> perm(rank);
  for (size_t d = 0; d < rank; ++d)
    perm[d] = static_cast<int64_t>(d);
  if (!attrs.has(name))
    return perm;
  std::vector<int64_t> given = attrs.getInts(name);
  std::vector<bool> seen(rank, false);
  bool ok = given.size() == rank && rank >= 1 &&
            given[rank - 1] == static_cast<int64_t>(rank) - 1;
  for (size_t d = 0; ok && d < rank; ++d) {
    ok = given[d] >= 0 && given[d] < static_cast<int64_t>(rank) &&
         !seen[given[d]];
    if (ok)
      seen[given[d]] = true;
  }
  if (!ok)
    throw RuntimeError(
        std::string("bmm: '") + name + "' must be a permutation of the " +
        std::to_string(rank) + " dims that keeps the last dim last");
  return given;
}

// The shape and element strides of the tensor a bmm computes with, from
// the stored one: an operand reads dim perm[d] as its dim d; the result's
// stored dim d is its dim perm[d].
struct BatchView {
  Shape shape;
  std::vector<int64_t> strides;
};
BatchView operandView(const Shape &stored, const std::vector<int64_t> &perm) {
  std::vector<int64_t> storedStrides = rowMajorStrides(stored);
  BatchView v{Shape(stored.size()), std::vector<int64_t>(stored.size())};
  for (size_t d = 0; d < stored.size(); ++d) {
    v.shape[d] = stored[perm[d]];
    v.strides[d] = storedStrides[perm[d]];
  }
  return v;
}
BatchView resultView(const Shape &stored, const std::vector<int64_t> &perm) {
  std::vector<int64_t> storedStrides = rowMajorStrides(stored);
  BatchView v{Shape(stored.size()), std::vector<int64_t>(stored.size())};
  for (size_t d = 0; d < stored.size(); ++d) {
    v.shape[perm[d]] = stored[d];
    v.strides[perm[d]] = storedStrides[d];
  }
  return v;
}

struct BmmViews {
  BatchView a, b, out;
};
BmmViews bmmViews(const AttrReader &attrs, const Shape &a, const Shape &b,
                  const Shape &out) {
  // A rank mismatch is reported by checkBmm with the shapes; each perm is
  // read against its own tensor's rank.
  return {operandView(a, readLayoutPerm(attrs, "a_perm", a.size())),
          operandView(b, readLayoutPerm(attrs, "b_perm", b.size())),
          resultView(out, readLayoutPerm(attrs, "out_perm", out.size()))};
}

std::string layoutText(const AttrReader &attrs) {
  std::string text;
  for (const char *name : {"a_perm", "b_perm", "out_perm"})
    if (attrs.has(name))
      text += std::string(" (") + name + " " +
              shapeToString(attrs.getInts(name)) + ")";
  return text;
}

void checkBmm(const AttrReader &attrs, const std::vector<TensorDesc> &inputs,
              const std::vector<TensorDesc> &outputs) {
  const TensorDesc &a = inputs[0], &b = inputs[1], &out = outputs[0];
  if (a.dtype != out.dtype || b.dtype != out.dtype)
    throw RuntimeError("bmm operands must share the output dtype");
  GemmFlags f = readGemmFlags(attrs);
  BmmViews v = bmmViews(attrs, a.shape, b.shape, out.shape);
  size_t r = v.a.shape.size();
  bool ok = r >= 3 && v.b.shape.size() == r && v.out.shape.size() == r;
  if (ok) {
    GemmDims d = gemmDims(f, v.a.shape, v.b.shape);
    ok = d.k == d.kb && v.out.shape[r - 2] == d.m && v.out.shape[r - 1] == d.n;
  }
  for (size_t d = 0; ok && d + 2 < r; ++d)
    ok = v.a.shape[d] == v.b.shape[d] && v.out.shape[d] == v.a.shape[d];
  if (!ok)
    throw RuntimeError("bmm shapes " + shapeToString(a.shape) + " x " +
                       shapeToString(b.shape) + " -> " +
                       shapeToString(out.shape) + flagsText(f) +
                       layoutText(attrs) +
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
    Tensor &out = *outputs[0];
    GemmFlags f = readGemmFlags(attrs);
    BmmViews v = bmmViews(attrs, a.shape(), b.shape(), out.shape());
    size_t r = v.a.shape.size();
    GemmDims d = gemmDims(f, v.a.shape, v.b.shape);
    const T *as = a.data_as<T>();
    const T *bs = b.data_as<T>();
    T *outs = out.data_as<T>();
    // Dense operands (no perm) have batch strides M*K and K*N and row
    // strides K or M (N or K); a permuted one its stored tensor's.
    int64_t lda = v.a.strides[r - 2], ldb = v.b.strides[r - 2],
            ldc = v.out.strides[r - 2];
    int64_t batch = 1;
    for (size_t i = 0; i + 2 < r; ++i)
      batch *= v.out.shape[i];
    std::vector<int64_t> index(r - 2, 0);
    int64_t offA = 0, offB = 0, offOut = 0;
    for (int64_t i = 0; i < batch; ++i) {
      gemmStrided<T>(f, as + offA, lda, bs + offB, ldb, outs + offOut, ldc, d.m,
                     d.k, d.n, /*small=*/true);
      for (size_t dim = r - 2; dim-- > 0;) {
        offA += v.a.strides[dim];
        offB += v.b.strides[dim];
        offOut += v.out.strides[dim];
        if (++index[dim] < v.out.shape[dim])
          break;
        offA -= v.a.strides[dim] * v.out.shape[dim];
        offB -= v.b.strides[dim] * v.out.shape[dim];
        offOut -= v.out.strides[dim] * v.out.shape[dim];
        index[dim] = 0;
      }
    }
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
