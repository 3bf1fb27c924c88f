// The launchers of the CUDA kernels (the .cu files), in plain types: the
// .cu files include no runtime header (no protobuf under nvcc), the
// registration (CudaKernelRegistration*.cpp, compiled by the C++ compiler)
// turns the registry's tensors and attributes into these calls. Every
// launcher queues its work on `stream` and returns without waiting.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dtorch::rt::cuda {

// The seven dtypes, in the CUDA files' terms.
enum class ElemType : int { F32, F64, F16, BF16, I32, I64, Bool };

enum class UnaryOp : int {
  Neg,
  Abs,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  Relu,
  Tanh,
  Sigmoid,
  Gelu,
  Silu,
  Sin,
  Cos
};
enum class BinaryOp : int { Add, Sub, Mul, Div, Maximum, Minimum, Pow };
enum class CompareOp : int { Eq, Ne, Lt, Le, Gt, Ge };
enum class ReduceOp : int { Sum, Max, Min };

// Tensors of at most this rank go through the strided kernels.
constexpr int kMaxRank = 8;

// Bits of the device's error word (CudaDevice::errorWord) a kernel sets
// when it meets what the CPU kernel would throw for.
constexpr unsigned kErrorIntegerDivisionByZero = 1u;
constexpr unsigned kErrorNegativeIntegerExponent = 2u;
constexpr unsigned kErrorScaledSumOutOfRange = 4u;
constexpr unsigned kErrorIndexOutOfRange = 8u;

// out = op(x), n elements.
void launchUnary(UnaryOp op, ElemType type, const void *x, void *out, int64_t n,
                 cudaStream_t stream);
// out = op(a, b); integer div/pow set error bits in *errorWord.
void launchBinary(BinaryOp op, ElemType type, const void *a, const void *b,
                  void *out, int64_t n, unsigned *errorWord,
                  cudaStream_t stream);
// out (bool) = a op b.
void launchCompare(CompareOp op, ElemType type, const void *a, const void *b,
                   bool *out, int64_t n, cudaStream_t stream);
// out = cond ? a : b, elements of `elementSize` bytes.
void launchWhere(int elementSize, const bool *cond, const void *a,
                 const void *b, void *out, int64_t n, cudaStream_t stream);
// out (to) = convert(x (from)) with the CPU's rules (KernelSupport.h).
void launchCast(ElemType from, ElemType to, const void *x, void *out, int64_t n,
                cudaStream_t stream);
// Every element = value converted to `type`.
void launchFill(ElemType type, double value, void *out, int64_t n,
                cudaStream_t stream);

// The box of a global tensor a `random` kernel fills.
struct RandomBox {
  int rank = 0;
  int64_t shape[kMaxRank] = {};         // local extents
  int64_t offset[kMaxRank] = {};        // of the box in the global tensor
  int64_t globalStrides[kMaxRank] = {}; // row-major, of the global shape
};
// Uniform [0, 1) or standard normal values of CounterRandom.h (float types).
void launchRandom(ElemType type, uint64_t seed, bool normal,
                  const RandomBox &box, void *out, int64_t n,
                  cudaStream_t stream);

// out[outer, inner] = reduce over k of x[outer, k, inner] (`reduced` = extent
// of k), as the CPU kernels do: sums accumulate in double (floats) or wrap
// (integers), then are multiplied by `scale` (an integer result is
// truncated; out of range sets kErrorScaledSumOutOfRange); max/min
// propagate NaN.
void launchReduce(ReduceOp op, ElemType type, const void *x, void *out,
                  int64_t outer, int64_t reduced, int64_t inner, double scale,
                  unsigned *errorWord, cudaStream_t stream);
// out (int64)[outer, inner] = the index of the max/min along k; ties keep
// the first, the first NaN wins.
void launchArgReduce(bool isMax, ElemType type, const void *x, int64_t *out,
                     int64_t outer, int64_t extent, int64_t inner,
                     cudaStream_t stream);

// A strided copy of elements of `elementSize` bytes: for every index i of
// `shape`, dst[dstOffset + sum i_d dstStrides_d] = src[srcOffset + sum i_d
// srcStrides_d] (offsets and strides in elements; a stride of 0 repeats).
struct StridedCopy {
  int rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t srcStrides[kMaxRank] = {};
  int64_t dstStrides[kMaxRank] = {};
  int64_t srcOffset = 0, dstOffset = 0;
};
void launchStridedCopy(int elementSize, const StridedCopy &copy,
                       const void *src, void *dst, cudaStream_t stream);

// tril (`lower`) / triu over the last two dims [rows, cols] of `n`
// elements: with global i = row + rowOffset, j = col + colOffset, tril keeps
// j - i <= diagonal, triu keeps j - i >= diagonal, the rest is 0.
void launchTriangle(int elementSize, bool lower, int64_t diagonal,
                    int64_t rowOffset, int64_t colOffset, int64_t rows,
                    int64_t cols, int64_t n, const void *src, void *dst,
                    cudaStream_t stream);

// index_select: out[o, j, :] = x[o, index[j] - offset, :] with x viewed as
// [outer, extent, inner] (elements of `elementSize` bytes); an index outside
// [offset, offset + extent) gives zeros when `masked`, else sets
// kErrorIndexOutOfRange.
void launchIndexSelect(int elementSize, const void *x, const int64_t *index,
                       void *out, int64_t outer, int64_t extent, int64_t inner,
                       int64_t count, int64_t offset, bool masked,
                       unsigned *errorWord, cudaStream_t stream);
// gather along `dim`: out[p] = x[p with p[dim] = index[p]]; `indexShape` is
// the output's shape, `xStrides` x's row-major strides (rank <= kMaxRank);
// an index outside [0, x extent of dim) sets kErrorIndexOutOfRange.
struct GatherLayout {
  int rank = 0, dim = 0;
  int64_t indexShape[kMaxRank] = {};
  int64_t xStrides[kMaxRank] = {};
  int64_t extent = 0; // x's extent along dim
};
void launchGather(int elementSize, const GatherLayout &layout, const void *x,
                  const int64_t *index, void *out, int64_t n,
                  unsigned *errorWord, cudaStream_t stream);

// scatter_add into `out` (already a copy of self): for every index element
// p, out[p with p[dim] = index[p]] += src[p]. One thread per line along
// `dim` adds in increasing index order, as the CPU does (lines never share
// a target), so results are bitwise the CPU's. An index outside [0, extent)
// sets kErrorIndexOutOfRange.
struct ScatterLayout {
  int rank = 0, dim = 0;
  int64_t indexShape[kMaxRank] = {};
  int64_t srcStrides[kMaxRank] = {};
  int64_t outStrides[kMaxRank] = {};
  int64_t extent = 0; // out's extent along dim
};
void launchScatterAdd(ElemType type, const ScatterLayout &layout,
                      const int64_t *index, const void *src, void *out,
                      unsigned *errorWord, cudaStream_t stream);

// topk_indices: out (int64)[outer, k, inner] = the indices of the k largest
// (or smallest) values of x[outer, extent, inner] along extent, in order; NaN
// counts as the largest, equal values keep index order. The order is total,
// so each element's rank (how many come before it) says where it goes: one
// thread per element counts, and the result is the CPU's exactly.
void launchTopk(ElemType type, bool largest, const void *x, int64_t *out,
                int64_t outer, int64_t extent, int64_t inner, int64_t k,
                cudaStream_t stream);

// Integer GEMMs (wrapping, as on the CPU) for int32/int64, batched:
// out[b] = op(a[b]) * op(b[b]) with row-major [M,K] / [K,N] (or transposed
// storage), batch strides in elements.
void launchIntegerGemm(ElemType type, bool transA, bool transB, int64_t batch,
                       int64_t m, int64_t n, int64_t k, const void *a,
                       const void *b, void *out, cudaStream_t stream);

// Throws std::runtime_error with `what` and the CUDA error when the last
// launch failed.
void checkLaunch(const char *what);

} // namespace dtorch::rt::cuda
