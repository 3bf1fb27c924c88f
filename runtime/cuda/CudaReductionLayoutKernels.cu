// Reductions (sum, max, min, argmax, argmin), the strided copy behind every
// layout op, and the integer GEMM. Reductions over many outputs run one
// thread per output that walks its elements in increasing order, as the CPU
// kernels do, so float sums are bitwise the CPU's; few outputs over long
// extents get a block per output and a tree (sums then differ from the CPU
// in the last bits of the float64 accumulator only).
#include "CudaTypes.cuh"

#include <cuda_runtime.h>

#include <stdexcept>

namespace dtorch::rt::cuda {

namespace {

constexpr int kThreads = 256;

// The accumulator of a sum (double for floats, uint64 wrapping for
// integers) or the running value of max/min (Compute<T>, uint8 for bool).
template <class T, ReduceOp op> struct Reducer {
  using Acc = std::conditional_t<
      op == ReduceOp::Sum, std::conditional_t<isFloat<T>, double, uint64_t>,
      std::conditional_t<std::is_same_v<T, bool>, uint8_t, Compute<T>>>;

  __device__ static Acc identity() {
    if constexpr (op == ReduceOp::Sum) {
      return Acc(0);
    } else if constexpr (std::is_same_v<T, bool>) {
      return op == ReduceOp::Max ? 0 : 1;
    } else if constexpr (isFloat<T>) {
      return op == ReduceOp::Max ? Acc(-INFINITY) : Acc(INFINITY);
    } else {
      return op == ReduceOp::Max ? Limits<T>::min : Limits<T>::max;
    }
  }
  __device__ static Acc lift(T v) {
    if constexpr (op == ReduceOp::Sum) {
      if constexpr (isFloat<T>)
        return static_cast<double>(load(v));
      else
        return static_cast<uint64_t>(v);
    } else {
      return static_cast<Acc>(load(v));
    }
  }
  __device__ static Acc combine(Acc a, Acc b) {
    if constexpr (op == ReduceOp::Sum) {
      return a + b;
    } else {
      if constexpr (isFloat<T>) {
        if (isnan(a))
          return a;
        if (isnan(b))
          return b;
      }
      if (op == ReduceOp::Max)
        return a < b ? b : a;
      return b < a ? b : a;
    }
  }
  __device__ static T finish(Acc acc, double scale, unsigned *errorWord) {
    if constexpr (op == ReduceOp::Sum) {
      if constexpr (isFloat<T>) {
        return convert<T>(acc * scale);
      } else {
        T sum = static_cast<T>(static_cast<std::make_unsigned_t<T>>(acc));
        if (scale == 1.0)
          return sum;
        double scaled = trunc(static_cast<double>(sum) * scale);
        if (!(scaled >= static_cast<double>(Limits<T>::min) &&
              scaled < -static_cast<double>(Limits<T>::min))) {
          atomicOr(errorWord, kErrorScaledSumOutOfRange);
          return 0;
        }
        return static_cast<T>(scaled);
      }
    } else if constexpr (std::is_same_v<T, bool>) {
      return acc != 0;
    } else {
      return store<T>(acc);
    }
  }
};

// One thread per output, elements in increasing order (the CPU's order).
template <class T, ReduceOp op>
__global__ void reducePerThread(const T *x, T *out, int64_t outer,
                                int64_t reduced, int64_t inner, double scale,
                                unsigned *errorWord) {
  using R = Reducer<T, op>;
  int64_t outputs = outer * inner;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < outputs;
       o += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = o / inner, j = o % inner;
    const T *column = x + i * reduced * inner + j;
    auto acc = R::identity();
    for (int64_t k = 0; k < reduced; ++k)
      acc = R::combine(acc, R::lift(column[k * inner]));
    out[o] = R::finish(acc, scale, errorWord);
  }
}

// One block per output, a tree over its elements.
template <class T, ReduceOp op>
__global__ void reducePerBlock(const T *x, T *out, int64_t outer,
                               int64_t reduced, int64_t inner, double scale,
                               unsigned *errorWord) {
  using R = Reducer<T, op>;
  using Acc = typename R::Acc;
  __shared__ Acc partial[kThreads];
  for (int64_t o = blockIdx.x; o < outer * inner; o += gridDim.x) {
    int64_t i = o / inner, j = o % inner;
    const T *column = x + i * reduced * inner + j;
    Acc acc = R::identity();
    for (int64_t k = threadIdx.x; k < reduced; k += blockDim.x)
      acc = R::combine(acc, R::lift(column[k * inner]));
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step /= 2) {
      if (threadIdx.x < step)
        partial[threadIdx.x] =
            R::combine(partial[threadIdx.x], partial[threadIdx.x + step]);
      __syncthreads();
    }
    if (threadIdx.x == 0)
      out[o] = R::finish(partial[0], scale, errorWord);
    __syncthreads();
  }
}

template <class T>
__global__ void argReduceKernel(bool isMax, const T *x, int64_t *out,
                                int64_t outer, int64_t extent, int64_t inner) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       o < outer * inner; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = o / inner, j = o % inner;
    const T *column = x + i * extent * inner + j;
    int64_t best = 0;
    auto bestValue = load(column[0]);
    bool done = false;
    if constexpr (isFloat<T>)
      done = isnan(bestValue);
    for (int64_t k = 1; k < extent && !done; ++k) {
      auto value = load(column[k * inner]);
      if constexpr (isFloat<T>) {
        if (isnan(value)) {
          best = k;
          break;
        }
      }
      if (isMax ? bestValue < value : value < bestValue) {
        best = k;
        bestValue = value;
      }
    }
    out[o] = best;
  }
}

template <class E>
__global__ void stridedCopyKernel(StridedCopy c, const E *src, E *dst,
                                  int64_t n) {
  for (int64_t linear = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       linear < n; linear += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = linear, from = c.srcOffset, to = c.dstOffset;
    for (int d = c.rank - 1; d >= 0; --d) {
      int64_t index = rest % c.shape[d];
      rest /= c.shape[d];
      from += index * c.srcStrides[d];
      to += index * c.dstStrides[d];
    }
    dst[to] = src[from];
  }
}

template <class E>
__global__ void triangleKernel(bool lower, int64_t diagonal, int64_t rowOffset,
                               int64_t colOffset, int64_t rows, int64_t cols,
                               int64_t n, const E *src, E *dst) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t col = i % cols, row = (i / cols) % rows;
    int64_t offDiagonal = (col + colOffset) - (row + rowOffset);
    bool keep = lower ? offDiagonal <= diagonal : offDiagonal >= diagonal;
    dst[i] = keep ? src[i] : E(0);
  }
}

template <class E>
__global__ void indexSelectKernel(const E *x, const int64_t *index, E *out,
                                  int64_t outer, int64_t extent, int64_t inner,
                                  int64_t count, int64_t offset, bool masked,
                                  unsigned *errorWord) {
  int64_t n = outer * count * inner;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t k = i % inner, j = (i / inner) % count, o = i / (inner * count);
    int64_t local = index[j] - offset;
    if (local < 0 || local >= extent) {
      if (!masked)
        atomicOr(errorWord, kErrorIndexOutOfRange);
      out[i] = E(0);
    } else {
      out[i] = x[(o * extent + local) * inner + k];
    }
  }
}

template <class E>
__global__ void gatherKernel(GatherLayout g, const E *x, const int64_t *index,
                             E *out, int64_t n, unsigned *errorWord) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t value = index[i];
    if (value < 0 || value >= g.extent) {
      atomicOr(errorWord, kErrorIndexOutOfRange);
      out[i] = E(0);
      continue;
    }
    int64_t rest = i, source = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
      int64_t p = rest % g.indexShape[d];
      rest /= g.indexShape[d];
      source += (d == g.dim ? value : p) * g.xStrides[d];
    }
    out[i] = x[source];
  }
}

template <class T> __device__ T addLikeTheCpu(T a, T b) {
  if constexpr (isFloat<T>)
    return store<T>(load(a) + load(b));
  else if constexpr (isInteger<T>)
    return static_cast<T>(static_cast<std::make_unsigned_t<T>>(a) +
                          static_cast<std::make_unsigned_t<T>>(b));
  else
    return a || b;
}

template <class T>
__global__ void scatterAddKernel(ScatterLayout g, const int64_t *index,
                                 const T *src, T *out, int64_t lines,
                                 unsigned *errorWord) {
  for (int64_t line = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       line < lines; line += int64_t(gridDim.x) * blockDim.x) {
    // The line's coordinates in the index shape (p[dim] = 0).
    int64_t p[kMaxRank];
    int64_t rest = line;
    for (int d = g.rank - 1; d >= 0; --d) {
      if (d == g.dim) {
        p[d] = 0;
        continue;
      }
      p[d] = rest % g.indexShape[d];
      rest /= g.indexShape[d];
    }
    int64_t indexLinear = 0, indexStride = 1, source = 0, target = 0;
    int64_t indexDimStride = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
      if (d == g.dim)
        indexDimStride = indexStride;
      indexLinear += p[d] * indexStride;
      indexStride *= g.indexShape[d];
      source += p[d] * g.srcStrides[d];
      if (d != g.dim)
        target += p[d] * g.outStrides[d];
    }
    for (int64_t k = 0; k < g.indexShape[g.dim]; ++k) {
      int64_t value = index[indexLinear + k * indexDimStride];
      if (value < 0 || value >= g.extent) {
        atomicOr(errorWord, kErrorIndexOutOfRange);
        return;
      }
      T *slot = out + target + value * g.outStrides[g.dim];
      *slot = addLikeTheCpu(*slot, src[source + k * g.srcStrides[g.dim]]);
    }
  }
}

template <class T>
__global__ void topkKernel(bool largest, const T *x, int64_t *out,
                           int64_t outer, int64_t extent, int64_t inner,
                           int64_t k) {
  int64_t total = outer * extent * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = t % inner, e = (t / inner) % extent, o = t / (inner * extent);
    const T *column = x + o * extent * inner + i;
    auto value = load(column[e * inner]);
    // rank = how many elements come before element e.
    int64_t rank = 0;
    for (int64_t f = 0; f < extent; ++f) {
      if (f == e)
        continue;
      auto other = load(column[f * inner]);
      bool before;
      bool nanHandled = false;
      if constexpr (isFloat<T>) {
        bool nf = isnan(other), ne = isnan(value);
        if (nf || ne) {
          before = nf == ne ? f < e : (largest ? nf : ne);
          nanHandled = true;
        }
      }
      if (!nanHandled) {
        if (other == value)
          before = f < e;
        else
          before = largest ? value < other : other < value;
      }
      rank += before;
    }
    if (rank < k)
      out[o * k * inner + rank * inner + i] = e;
  }
}

// Calls go(E{}) for the unsigned type of `elementSize` bytes.
template <class Go> void byElementSize(int elementSize, Go &&go) {
  switch (elementSize) {
  case 1:
    return go(uint8_t{});
  case 2:
    return go(uint16_t{});
  case 4:
    return go(uint32_t{});
  default:
    return go(uint64_t{});
  }
}

template <class T>
__global__ void integerGemmKernel(bool transA, bool transB, int64_t batch,
                                  int64_t m, int64_t n, int64_t k, const T *a,
                                  const T *b, T *out) {
  using U = std::make_unsigned_t<T>;
  int64_t total = batch * m * n;
  for (int64_t linear = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       linear < total; linear += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = linear / (m * n), rest = linear % (m * n);
    int64_t i = rest / n, j = rest % n;
    const T *ap = a + p * m * k, *bp = b + p * k * n;
    U sum = 0;
    for (int64_t q = 0; q < k; ++q) {
      U left = static_cast<U>(transA ? ap[q * m + i] : ap[i * k + q]);
      U right = static_cast<U>(transB ? bp[j * k + q] : bp[q * n + j]);
      sum += left * right;
    }
    out[linear] = static_cast<T>(sum);
  }
}

template <class T, ReduceOp op>
void reduceTyped(const void *x, void *out, int64_t outer, int64_t reduced,
                 int64_t inner, double scale, unsigned *errorWord,
                 cudaStream_t stream) {
  int64_t outputs = outer * inner;
  const T *xs = static_cast<const T *>(x);
  T *os = static_cast<T *>(out);
  if (outputs >= 1024 || reduced <= 256)
    reducePerThread<T, op>
        <<<blocksFor(outputs, kThreads), kThreads, 0, stream>>>(
            xs, os, outer, reduced, inner, scale, errorWord);
  else
    reducePerBlock<T, op>
        <<<static_cast<unsigned>(outputs < 65535 ? outputs : 65535), kThreads,
           0, stream>>>(xs, os, outer, reduced, inner, scale, errorWord);
}

} // namespace

void launchReduce(ReduceOp op, ElemType type, const void *x, void *out,
                  int64_t outer, int64_t reduced, int64_t inner, double scale,
                  unsigned *errorWord, cudaStream_t stream) {
  if (outer * inner == 0)
    return;
  visitType(type, [&](auto tag) {
    using T = decltype(tag);
    switch (op) {
    case ReduceOp::Sum:
      if constexpr (!std::is_same_v<T, bool>)
        reduceTyped<T, ReduceOp::Sum>(x, out, outer, reduced, inner, scale,
                                      errorWord, stream);
      break;
    case ReduceOp::Max:
      reduceTyped<T, ReduceOp::Max>(x, out, outer, reduced, inner, scale,
                                    errorWord, stream);
      break;
    case ReduceOp::Min:
      reduceTyped<T, ReduceOp::Min>(x, out, outer, reduced, inner, scale,
                                    errorWord, stream);
      break;
    }
  });
  checkLaunch("reduction kernel");
}

void launchArgReduce(bool isMax, ElemType type, const void *x, int64_t *out,
                     int64_t outer, int64_t extent, int64_t inner,
                     cudaStream_t stream) {
  int64_t outputs = outer * inner;
  if (outputs == 0 || extent == 0)
    return;
  visitType(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>)
      argReduceKernel<T><<<blocksFor(outputs, kThreads), kThreads, 0, stream>>>(
          isMax, static_cast<const T *>(x), out, outer, extent, inner);
  });
  checkLaunch("arg reduction kernel");
}

void launchStridedCopy(int elementSize, const StridedCopy &copy,
                       const void *src, void *dst, cudaStream_t stream) {
  int64_t n = 1;
  for (int d = 0; d < copy.rank; ++d)
    n *= copy.shape[d];
  if (n == 0)
    return;
  auto go = [&](auto tag) {
    using E = decltype(tag);
    stridedCopyKernel<E><<<blocksFor(n, kThreads), kThreads, 0, stream>>>(
        copy, static_cast<const E *>(src), static_cast<E *>(dst), n);
  };
  switch (elementSize) {
  case 1:
    go(uint8_t{});
    break;
  case 2:
    go(uint16_t{});
    break;
  case 4:
    go(uint32_t{});
    break;
  case 8:
    go(uint64_t{});
    break;
  default:
    throw std::runtime_error("strided copy: element size " +
                             std::to_string(elementSize));
  }
  checkLaunch("strided copy kernel");
}

void launchTriangle(int elementSize, bool lower, int64_t diagonal,
                    int64_t rowOffset, int64_t colOffset, int64_t rows,
                    int64_t cols, int64_t n, const void *src, void *dst,
                    cudaStream_t stream) {
  if (n == 0)
    return;
  auto go = [&](auto tag) {
    using E = decltype(tag);
    triangleKernel<E><<<blocksFor(n, kThreads), kThreads, 0, stream>>>(
        lower, diagonal, rowOffset, colOffset, rows, cols, n,
        static_cast<const E *>(src), static_cast<E *>(dst));
  };
  switch (elementSize) {
  case 1:
    go(uint8_t{});
    break;
  case 2:
    go(uint16_t{});
    break;
  case 4:
    go(uint32_t{});
    break;
  default:
    go(uint64_t{});
    break;
  }
  checkLaunch("triangle kernel");
}

void launchIndexSelect(int elementSize, const void *x, const int64_t *index,
                       void *out, int64_t outer, int64_t extent, int64_t inner,
                       int64_t count, int64_t offset, bool masked,
                       unsigned *errorWord, cudaStream_t stream) {
  int64_t n = outer * count * inner;
  if (n == 0)
    return;
  byElementSize(elementSize, [&](auto tag) {
    using E = decltype(tag);
    indexSelectKernel<E><<<blocksFor(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const E *>(x), index, static_cast<E *>(out), outer, extent,
        inner, count, offset, masked, errorWord);
  });
  checkLaunch("index_select kernel");
}

void launchGather(int elementSize, const GatherLayout &layout, const void *x,
                  const int64_t *index, void *out, int64_t n,
                  unsigned *errorWord, cudaStream_t stream) {
  if (n == 0)
    return;
  byElementSize(elementSize, [&](auto tag) {
    using E = decltype(tag);
    gatherKernel<E><<<blocksFor(n, kThreads), kThreads, 0, stream>>>(
        layout, static_cast<const E *>(x), index, static_cast<E *>(out), n,
        errorWord);
  });
  checkLaunch("gather kernel");
}

void launchScatterAdd(ElemType type, const ScatterLayout &layout,
                      const int64_t *index, const void *src, void *out,
                      unsigned *errorWord, cudaStream_t stream) {
  int64_t lines = 1;
  for (int d = 0; d < layout.rank; ++d)
    if (d != layout.dim)
      lines *= layout.indexShape[d];
  if (lines == 0 || layout.indexShape[layout.dim] == 0)
    return;
  visitType(type, [&](auto tag) {
    using T = decltype(tag);
    scatterAddKernel<T><<<blocksFor(lines, kThreads), kThreads, 0, stream>>>(
        layout, index, static_cast<const T *>(src), static_cast<T *>(out),
        lines, errorWord);
  });
  checkLaunch("scatter_add kernel");
}

void launchTopk(ElemType type, bool largest, const void *x, int64_t *out,
                int64_t outer, int64_t extent, int64_t inner, int64_t k,
                cudaStream_t stream) {
  int64_t total = outer * extent * inner;
  if (total == 0 || k == 0)
    return;
  visitType(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>)
      topkKernel<T><<<blocksFor(total, kThreads), kThreads, 0, stream>>>(
          largest, static_cast<const T *>(x), out, outer, extent, inner, k);
  });
  checkLaunch("topk kernel");
}

void launchIntegerGemm(ElemType type, bool transA, bool transB, int64_t batch,
                       int64_t m, int64_t n, int64_t k, const void *a,
                       const void *b, void *out, cudaStream_t stream) {
  int64_t total = batch * m * n;
  if (total == 0)
    return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    integerGemmKernel<T><<<blocksFor(total, kThreads), kThreads, 0, stream>>>(
        transA, transB, batch, m, n, k, static_cast<const T *>(a),
        static_cast<const T *>(b), static_cast<T *>(out));
  };
  if (type == ElemType::I32)
    go(int32_t{});
  else if (type == ElemType::I64)
    go(int64_t{});
  else
    throw std::runtime_error("integer gemm: not an integer type");
  checkLaunch("integer gemm kernel");
}

} // namespace dtorch::rt::cuda
