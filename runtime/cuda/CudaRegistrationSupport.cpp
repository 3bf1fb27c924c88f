#include "CudaRegistrationSupport.h"

namespace dtorch::rt::cuda {

ElemType elemTypeOf(DType dtype) {
  switch (dtype) {
  case ::dtorch::wire::F32:
    return ElemType::F32;
  case ::dtorch::wire::F64:
    return ElemType::F64;
  case ::dtorch::wire::F16:
    return ElemType::F16;
  case ::dtorch::wire::BF16:
    return ElemType::BF16;
  case ::dtorch::wire::I32:
    return ElemType::I32;
  case ::dtorch::wire::I64:
    return ElemType::I64;
  case ::dtorch::wire::BOOL:
    return ElemType::Bool;
  default:
    throw RuntimeError(std::string("CUDA kernels: unsupported dtype ") +
                       dtypeName(dtype));
  }
}

LaunchContext launchContext(const std::vector<const Tensor *> &inputs,
                            const std::vector<Tensor *> &outputs,
                            const char *op) {
  Device *device = nullptr;
  if (!outputs.empty())
    device = &outputs[0]->device();
  else if (!inputs.empty())
    device = &inputs[0]->device();
  if (!device || device->kind() != DeviceKind::Cuda)
    throw RuntimeError(std::string("CUDA kernel '") + op +
                       "' got a tensor that is not on a CUDA device");
  auto onDevice = [&](const Tensor *t) {
    if (t->defined() && &t->device() != device)
      throw RuntimeError(
          std::string("CUDA kernel '") + op + "': " + t->describe() +
          " is on " + t->device().describe() + ", not " + device->describe());
  };
  for (const Tensor *t : inputs)
    onDevice(t);
  for (const Tensor *t : outputs)
    onDevice(t);
  CudaDevice &cuda = asCuda(*device);
  cuda.makeCurrent();
  return LaunchContext{cuda, cuda.currentCudaStream()};
}

void addCudaTwin(KernelRegistry &registry, const std::string &op, DType dtype,
                 KernelRunFn run) {
  const Kernel *cpu = registry.lookup(op, dtype, kCpuDevice);
  if (!cpu)
    throw RuntimeError("CUDA kernel '" + op + "' for " + dtypeName(dtype) +
                       " has no CPU twin to take its check from");
  Kernel kernel;
  kernel.numInputs = cpu->numInputs;
  kernel.numOutputs = cpu->numOutputs;
  kernel.check = cpu->check;
  kernel.run = std::move(run);
  registry.add(op, dtype, kCudaDevice, std::move(kernel));
}

StridedCopy denseCopy(const Shape &extent, const Shape &srcShape,
                      const Shape &srcOffset, const Shape &dstShape,
                      const Shape &dstOffset) {
  if (extent.size() > static_cast<size_t>(kMaxRank))
    throw RuntimeError("CUDA layout kernels: rank " +
                       std::to_string(extent.size()) + " is above " +
                       std::to_string(kMaxRank));
  StridedCopy c;
  c.rank = static_cast<int>(extent.size());
  std::vector<int64_t> srcStrides = rowMajorStrides(srcShape);
  std::vector<int64_t> dstStrides = rowMajorStrides(dstShape);
  for (int d = 0; d < c.rank; ++d) {
    c.shape[d] = extent[d];
    c.srcStrides[d] = srcStrides[d];
    c.dstStrides[d] = dstStrides[d];
    c.srcOffset += srcOffset[d] * srcStrides[d];
    c.dstOffset += dstOffset[d] * dstStrides[d];
  }
  return c;
}

void registerCudaKernels(KernelRegistry &registry) {
  registerCudaElementwiseKernels(registry);
  registerCudaCreationKernels(registry);
  registerCudaLayoutKernels(registry);
  registerCudaReductionKernels(registry);
  registerCudaLinalgKernels(registry);
}

} // namespace dtorch::rt::cuda
