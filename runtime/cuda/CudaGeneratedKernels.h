// Generated GPU kernels (wire::Executable.gpu: PTX from the controller's
// NVVM path) on CUDA devices, through the driver API
// (CudaGeneratedKernels.cpp).
#pragma once

#include "dtorch_program.pb.h"

namespace dtorch::rt {
class Device;
} // namespace dtorch::rt

namespace dtorch::rt::cuda {

// Registers the launcher of generated kernels for devices named "cuda"
// (registerCudaBackend calls it). Touches no GPU.
void registerGeneratedKernelLauncher();

// Loads `exe` on `device` the first time (per device and content hash) and
// queues one call on the device's current stream: `inputs` and `outputs`
// are device pointers in the executable's order, `scalars` its
// num_scalars float64 constants. Throws RuntimeError when the driver
// refuses the code or the launch.
void launchGeneratedKernel(Device &device,
                           const ::dtorch::wire::Executable &exe,
                           void *const *inputs, void *const *outputs,
                           const double *scalars);

} // namespace dtorch::rt::cuda
