// Helpers of the CUDA kernel registration (C++ side): every CUDA kernel is
// the "cuda" twin of a CPU kernel, with the CPU kernel's arity and check (the
// validator's view of dtypes, shapes and attributes is the same on both) and
// a run that launches on the device's current stream.
#pragma once

#include "CudaDevice.h"
#include "CudaLaunch.h"
#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/Shape.h"

#include <string>
#include <vector>

namespace dtorch::rt::cuda {

ElemType elemTypeOf(DType dtype);

// The device and stream a kernel runs on: the device of its first output
// (or first input), which every tensor of the call must be on.
struct LaunchContext {
  CudaDevice &device;
  cudaStream_t stream;
};
LaunchContext launchContext(const std::vector<const Tensor *> &inputs,
                            const std::vector<Tensor *> &outputs,
                            const char *op);

// Registers `run` for (op, dtype, "cuda") with the arity and check of the
// (op, dtype, "cpu") kernel of `registry` (RuntimeError when there is none).
void addCudaTwin(KernelRegistry &registry, const std::string &op, DType dtype,
                 KernelRunFn run);

// A strided copy with the row-major strides of `srcShape` and `dstShape`.
StridedCopy denseCopy(const Shape &extent, const Shape &srcShape,
                      const Shape &srcOffset, const Shape &dstShape,
                      const Shape &dstOffset);

// Registration by topic (CudaKernelRegistration*.cpp).
void registerCudaElementwiseKernels(KernelRegistry &registry);
void registerCudaCreationKernels(KernelRegistry &registry);
void registerCudaLayoutKernels(KernelRegistry &registry);
void registerCudaReductionKernels(KernelRegistry &registry);
void registerCudaLinalgKernels(KernelRegistry &registry);

} // namespace dtorch::rt::cuda
