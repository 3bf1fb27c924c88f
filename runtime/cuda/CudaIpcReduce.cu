// The reduction kernel of the collectives between processes sharing one GPU
// (CudaIpc.h): out[i] = pieces[0][i] op pieces[1][i] op ..., combined left to
// right as reducePieces (CollectiveReductions.cpp) does on the host, so the
// device path gives the host backends' bits: float32/float64 in their own
// type, float16/bfloat16 sums in float32 rounded once, integer sums wrapping,
// bool as or/and, max/min taking the last NaN in group order.
#include "CudaIpc.h"
#include "CudaTypes.cuh"

#include <stdexcept>
#include <string>

namespace dtorch::rt::cuda {

namespace {

constexpr int kThreads = 256;

template <class T> struct Pieces {
  const T *at[kIpcMaxPieces];
};

template <class T> __device__ bool isNanOf(T v) {
  if constexpr (std::is_same_v<T, F16>)
    return (v.bits & 0x7fffu) > 0x7c00u;
  else if constexpr (std::is_same_v<T, BF16>)
    return (v.bits & 0x7fffu) > 0x7f80u;
  else if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

template <class T>
__global__ void ipcReduceKernel(Pieces<T> pieces, int n, T *out, int64_t count,
                                IpcReduceOp op) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < count; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (op == IpcReduceOp::Sum || op == IpcReduceOp::Avg) {
      if constexpr (isFloat<T>) {
        Compute<T> acc = load(pieces.at[0][i]);
        for (int j = 1; j < n; ++j)
          acc = acc + load(pieces.at[j][i]);
        if (op == IpcReduceOp::Avg)
          acc = acc / static_cast<Compute<T>>(n);
        out[i] = store<T>(acc);
      } else if constexpr (std::is_same_v<T, bool>) {
        bool acc = pieces.at[0][i];
        for (int j = 1; j < n; ++j)
          acc = acc || pieces.at[j][i];
        out[i] = acc;
      } else {
        using U = std::make_unsigned_t<T>;
        U acc = static_cast<U>(pieces.at[0][i]);
        for (int j = 1; j < n; ++j)
          acc = static_cast<U>(acc + static_cast<U>(pieces.at[j][i]));
        out[i] = static_cast<T>(acc);
      }
    } else {
      bool isMax = op == IpcReduceOp::Max;
      T acc = pieces.at[0][i];
      for (int j = 1; j < n; ++j) {
        T x = pieces.at[j][i];
        if constexpr (std::is_same_v<T, bool>) {
          acc = isMax ? (acc || x) : (acc && x);
        } else {
          bool better = isMax ? load(acc) < load(x) : load(x) < load(acc);
          if (isNanOf(x) || (!isNanOf(acc) && better))
            acc = x;
        }
      }
      out[i] = acc;
    }
  }
}

int blocksOf(int64_t count) {
  int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

template <class T>
void launchTyped(void *out, const void *const *pieces, int n, int64_t count,
                 IpcReduceOp op, cudaStream_t stream) {
  Pieces<T> typed{};
  for (int j = 0; j < n; ++j)
    typed.at[j] = static_cast<const T *>(pieces[j]);
  ipcReduceKernel<T><<<blocksOf(count), kThreads, 0, stream>>>(
      typed, n, static_cast<T *>(out), count, op);
}

} // namespace

void launchIpcReduce(ElemType type, IpcReduceOp op, void *out,
                     const void *const *pieces, int n, int64_t count,
                     cudaStream_t stream) {
  if (n < 1 || n > kIpcMaxPieces)
    throw std::runtime_error("ipc reduce of " + std::to_string(n) +
                             " pieces (1 to " + std::to_string(kIpcMaxPieces) +
                             ")");
  if (count <= 0)
    return;
  switch (type) {
  case ElemType::F32:
    return launchTyped<float>(out, pieces, n, count, op, stream);
  case ElemType::F64:
    return launchTyped<double>(out, pieces, n, count, op, stream);
  case ElemType::F16:
    return launchTyped<F16>(out, pieces, n, count, op, stream);
  case ElemType::BF16:
    return launchTyped<BF16>(out, pieces, n, count, op, stream);
  case ElemType::I32:
    return launchTyped<int32_t>(out, pieces, n, count, op, stream);
  case ElemType::I64:
    return launchTyped<int64_t>(out, pieces, n, count, op, stream);
  case ElemType::Bool:
    return launchTyped<bool>(out, pieces, n, count, op, stream);
  }
}

} // namespace dtorch::rt::cuda
