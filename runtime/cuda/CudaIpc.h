// CUDA IPC for the collectives between processes that share one GPU: the
// DeviceIpc of a CUDA device (cudaIpcGetMemHandle / cudaIpcOpenMemHandle,
// cudaEventInterprocess events opened with cudaIpcOpenEventHandle,
// cudaMemcpy2DAsync, the reduction kernel of CudaIpcReduce.cu), and that
// kernel's launcher in plain types (the .cu file includes no runtime
// header).
#pragma once

#include "CudaLaunch.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dtorch::rt {
class DeviceIpc;
} // namespace dtorch::rt

namespace dtorch::rt::cuda {

class CudaDevice;

// Most members one reduction takes (the pieces travel in the launch).
constexpr int kIpcMaxPieces = 16;

enum class IpcReduceOp : int { Sum, Avg, Max, Min };

// out[i] = pieces[0][i] op ... op pieces[n-1][i], i < count, with
// reducePieces' order and rounding; queued on `stream`.
void launchIpcReduce(ElemType type, IpcReduceOp op, void *out,
                     const void *const *pieces, int n, int64_t count,
                     cudaStream_t stream);

// The DeviceIpc of `device` (one per device, for the life of the process).
DeviceIpc &cudaDeviceIpc(CudaDevice &device);

} // namespace dtorch::rt::cuda
