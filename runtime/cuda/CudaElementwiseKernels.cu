// Elementwise CUDA kernels: unary, binary, comparisons, where, cast, fill
// and the counter-based random fill. One grid-stride kernel per (op, type),
// instantiated from templates over the seven element types.
#include "CudaTypes.cuh"
#include "dtorch/runtime/CounterRandom.h"

#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>

namespace dtorch::rt::cuda {

namespace {

constexpr int kThreads = 256;

template <class C> __device__ C sigmoidOf(C x) {
  if (x >= C(0))
    return C(1) / (C(1) + exp(-x));
  C e = exp(x);
  return e / (C(1) + e);
}

template <class C> __device__ C applyFloatUnary(UnaryOp op, C x) {
  switch (op) {
  case UnaryOp::Neg:
    return -x;
  case UnaryOp::Abs:
    return fabs(x);
  case UnaryOp::Exp:
    return exp(x);
  case UnaryOp::Log:
    return log(x);
  case UnaryOp::Sqrt:
    return sqrt(x);
  case UnaryOp::Rsqrt:
    return C(1) / sqrt(x);
  case UnaryOp::Relu:
    return x < C(0) ? C(0) : x;
  case UnaryOp::Tanh:
    return tanh(x);
  case UnaryOp::Sigmoid:
    return sigmoidOf(x);
  case UnaryOp::Gelu:
    return C(0.5) * x * (C(1) + erf(x * C(0.70710678118654752440)));
  case UnaryOp::Silu:
    return x * sigmoidOf(x);
  case UnaryOp::Sin:
    return sin(x);
  case UnaryOp::Cos:
    return cos(x);
  }
  return x;
}

template <class T> __device__ T applyIntegerUnary(UnaryOp op, T x) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
  case UnaryOp::Neg:
    return static_cast<T>(U(0) - static_cast<U>(x));
  case UnaryOp::Abs:
    return x < 0 ? static_cast<T>(U(0) - static_cast<U>(x)) : x;
  case UnaryOp::Relu:
    return x < 0 ? T(0) : x;
  default:
    return x; // not registered for integers
  }
}

template <class T>
__global__ void unaryKernel(UnaryOp op, const T *x, T *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (isFloat<T>)
      out[i] = store<T>(applyFloatUnary(op, load(x[i])));
    else if constexpr (isInteger<T>)
      out[i] = applyIntegerUnary(op, x[i]);
    else
      out[i] = x[i];
  }
}

template <class C> __device__ C applyFloatBinary(BinaryOp op, C a, C b) {
  switch (op) {
  case BinaryOp::Add:
    return a + b;
  case BinaryOp::Sub:
    return a - b;
  case BinaryOp::Mul:
    return a * b;
  case BinaryOp::Div:
    return a / b;
  case BinaryOp::Maximum:
    if (isnan(a) || isnan(b))
      return C(NAN);
    return a < b ? b : a;
  case BinaryOp::Minimum:
    if (isnan(a) || isnan(b))
      return C(NAN);
    return b < a ? b : a;
  case BinaryOp::Pow:
    return pow(a, b);
  }
  return a;
}

template <class T>
__device__ T applyIntegerBinary(BinaryOp op, T a, T b, unsigned *errorWord) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
  case BinaryOp::Add:
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  case BinaryOp::Sub:
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  case BinaryOp::Mul:
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  case BinaryOp::Div: {
    if (b == 0) {
      atomicOr(errorWord, kErrorIntegerDivisionByZero);
      return 0;
    }
    if (a == Limits<T>::min && b == -1)
      return a;
    T quotient = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
      --quotient;
    return quotient;
  }
  case BinaryOp::Maximum:
    return a < b ? b : a;
  case BinaryOp::Minimum:
    return b < a ? b : a;
  case BinaryOp::Pow: {
    if (b < 0) {
      if (a == 1)
        return 1;
      if (a == -1)
        return (b % 2 == 0) ? 1 : -1;
      atomicOr(errorWord, kErrorNegativeIntegerExponent);
      return 0;
    }
    U result = 1, factor = static_cast<U>(a), remaining = static_cast<U>(b);
    while (remaining) {
      if (remaining & 1)
        result *= factor;
      factor *= factor;
      remaining >>= 1;
    }
    return static_cast<T>(result);
  }
  }
  return a;
}

template <class T>
__global__ void binaryKernel(BinaryOp op, const T *a, const T *b, T *out,
                             int64_t n, unsigned *errorWord) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (isFloat<T>)
      out[i] = store<T>(applyFloatBinary(op, load(a[i]), load(b[i])));
    else if constexpr (isInteger<T>)
      out[i] = applyIntegerBinary(op, a[i], b[i], errorWord);
    else // bool: maximum is or, minimum is and
      out[i] = op == BinaryOp::Maximum ? (a[i] || b[i]) : (a[i] && b[i]);
  }
}

template <class T>
__global__ void compareKernel(CompareOp op, const T *a, const T *b, bool *out,
                              int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    auto x = load(a[i]);
    auto y = load(b[i]);
    bool r = false;
    switch (op) {
    case CompareOp::Eq:
      r = x == y;
      break;
    case CompareOp::Ne:
      r = x != y;
      break;
    case CompareOp::Lt:
      r = x < y;
      break;
    case CompareOp::Le:
      r = x <= y;
      break;
    case CompareOp::Gt:
      r = x > y;
      break;
    case CompareOp::Ge:
      r = x >= y;
      break;
    }
    out[i] = r;
  }
}

template <class T>
__global__ void whereKernel(const bool *cond, const T *a, const T *b, T *out,
                            int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = cond[i] ? a[i] : b[i];
}

template <class To, class From>
__global__ void castKernel(const From *x, To *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = convert<To>(x[i]);
}

// out[1..n) = out[0].
template <class T> __global__ void fillFromFirstKernel(T *out, int64_t n) {
  T value = out[0];
  for (int64_t i = 1 + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = value;
}

template <class T> __global__ void convertOne(double value, T *out) {
  *out = convert<T>(value);
}

// The largest T below 1 (as CreationKernels.cpp).
template <class T> __device__ T largestBelowOne() {
  if constexpr (std::is_same_v<T, F16>)
    return F16{0x3bffu};
  else if constexpr (std::is_same_v<T, BF16>)
    return BF16{0x3f7fu};
  else
    return nextafter(T(1), T(0));
}

template <class T>
__global__ void randomKernel(uint64_t seed, bool normal, RandomBox box, T *out,
                             int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    // The global linear index of local element i.
    uint64_t global = 0;
    int64_t rest = i;
    for (int d = box.rank - 1; d >= 0; --d) {
      int64_t index = rest % box.shape[d];
      rest /= box.shape[d];
      global +=
          static_cast<uint64_t>((box.offset[d] + index) * box.globalStrides[d]);
    }
    if (normal) {
      out[i] = convert<T>(counter_random::normal(seed, global));
    } else {
      T value = convert<T>(counter_random::uniform(seed, global));
      out[i] = load(value) < Compute<T>(1) ? value : largestBelowOne<T>();
    }
  }
}

} // namespace

void checkLaunch(const char *what) {
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " +
                             cudaGetErrorString(error));
}

void launchUnary(UnaryOp op, ElemType type, const void *x, void *out, int64_t n,
                 cudaStream_t stream) {
  if (n == 0)
    return;
  visitType(type, [&](auto tag) {
    using T = decltype(tag);
    unaryKernel<T><<<blocksFor(n, kThreads), kThreads, 0, stream>>>(
        op, static_cast<const T *>(x), static_cast<T *>(out), n);
  });
  checkLaunch("unary kernel");
}

void launchBinary(BinaryOp op, ElemType type, const void *a, const void *b,
                  void *out, int64_t n, unsigned *errorWord,
                  cudaStream_t stream) {
  if (n == 0)
    return;
  visitType(type, [&](auto tag) {
    using T = decltype(tag);
    binaryKernel<T><<<blocksFor(n, kThreads), kThreads, 0, stream>>>(
        op, static_cast<const T *>(a), static_cast<const T *>(b),
        static_cast<T *>(out), n, errorWord);
  });
  checkLaunch("binary kernel");
}

void launchCompare(CompareOp op, ElemType type, const void *a, const void *b,
                   bool *out, int64_t n, cudaStream_t stream) {
  if (n == 0)
    return;
  visitType(type, [&](auto tag) {
    using T = decltype(tag);
    compareKernel<T><<<blocksFor(n, kThreads), kThreads, 0, stream>>>(
        op, static_cast<const T *>(a), static_cast<const T *>(b), out, n);
  });
  checkLaunch("comparison kernel");
}

void launchWhere(int elementSize, const bool *cond, const void *a,
                 const void *b, void *out, int64_t n, cudaStream_t stream) {
  if (n == 0)
    return;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    whereKernel<T><<<blocksFor(n, kThreads), kThreads, 0, stream>>>(
        cond, static_cast<const T *>(a), static_cast<const T *>(b),
        static_cast<T *>(out), n);
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
  checkLaunch("where kernel");
}

void launchCast(ElemType from, ElemType to, const void *x, void *out, int64_t n,
                cudaStream_t stream) {
  if (n == 0)
    return;
  visitType(to, [&](auto toTag) {
    using To = decltype(toTag);
    visitType(from, [&](auto fromTag) {
      using From = decltype(fromTag);
      castKernel<To, From><<<blocksFor(n, kThreads), kThreads, 0, stream>>>(
          static_cast<const From *>(x), static_cast<To *>(out), n);
    });
  });
  checkLaunch("cast kernel");
}

void launchFill(ElemType type, double value, void *out, int64_t n,
                cudaStream_t stream) {
  if (n == 0)
    return;
  visitType(type, [&](auto tag) {
    using T = decltype(tag);
    // The value is converted on the device with the device rules into
    // element 0, then repeated.
    convertOne<T><<<1, 1, 0, stream>>>(value, static_cast<T *>(out));
    if (n > 1)
      fillFromFirstKernel<T><<<blocksFor(n, kThreads), kThreads, 0, stream>>>(
          static_cast<T *>(out), n);
  });
  checkLaunch("fill kernel");
}

void launchRandom(ElemType type, uint64_t seed, bool normal,
                  const RandomBox &box, void *out, int64_t n,
                  cudaStream_t stream) {
  if (n == 0)
    return;
  visitType(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (isFloat<T>)
      randomKernel<T><<<blocksFor(n, kThreads), kThreads, 0, stream>>>(
          seed, normal, box, static_cast<T *>(out), n);
    else
      throw std::runtime_error("random: not a float type");
  });
  checkLaunch("random kernel");
}

} // namespace dtorch::rt::cuda
