// Every (op, dtype) of the CPU registry has a "cuda" twin, except the ones
// listed here: the CUDA backend's honest to-do list. Adding a CPU kernel
// without a CUDA twin, or a twin without taking it off the list, fails.
#include "CudaDevice.h"
#include "dtorch/runtime/Device.h"
#include "dtorch/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace dtorch::rt::cuda {
namespace {

// Ops whose CUDA kernels are not written yet (every dtype of each).
// fused_adam, fused_sgd: a CUDA mesh calls the kernel generated through
// MLIR's NVVM path; with DTORCH_GENERATED_ADAM=0 dtorch.optim.Adam/AdamW and
// SGD record the per-op update on CUDA meshes instead
// (python/dtorch/optim/optimizer.py, _fused_on).
const std::set<std::string> kOpsWithoutCudaKernel = {"fused_adam", "fused_sgd"};

TEST(CudaKernelCoverage, EveryCpuKernelHasACudaTwinOrIsListed) {
  registerCudaBackend();
  KernelRegistry &registry = KernelRegistry::global();
  std::set<std::string> missingOps;
  std::string unexpected;
  int twins = 0;
  for (const auto &[op, dtype] : registry.entriesFor(kCpuDevice)) {
    if (registry.lookup(op, dtype, kCudaDevice)) {
      ++twins;
      if (kOpsWithoutCudaKernel.count(op))
        unexpected += " " + op + "/" + dtypeName(dtype) + " (has a twin)";
      continue;
    }
    missingOps.insert(op);
    if (!kOpsWithoutCudaKernel.count(op))
      unexpected += " " + op + "/" + dtypeName(dtype) + " (no twin)";
  }
  EXPECT_EQ(unexpected, "")
      << "update kOpsWithoutCudaKernel or write the CUDA kernel";
  EXPECT_EQ(missingOps, kOpsWithoutCudaKernel);
  std::cout << "CUDA twins: " << twins
            << " (op, dtype) kernels; to do: " << missingOps.size() << " ops\n";
}

// A CUDA kernel has no entry the CPU lacks: each takes its check from its
// CPU twin.
TEST(CudaKernelCoverage, NoCudaKernelWithoutCpuTwin) {
  registerCudaBackend();
  KernelRegistry &registry = KernelRegistry::global();
  for (const auto &[op, dtype] : registry.entriesFor(kCudaDevice)) {
    const Kernel *cpu = registry.lookup(op, dtype, kCpuDevice);
    ASSERT_NE(cpu, nullptr) << op << "/" << dtypeName(dtype);
    const Kernel *gpu = registry.lookup(op, dtype, kCudaDevice);
    EXPECT_EQ(gpu->numInputs, cpu->numInputs) << op;
    EXPECT_EQ(gpu->numOutputs, cpu->numOutputs) << op;
    EXPECT_EQ(static_cast<bool>(gpu->check), static_cast<bool>(cpu->check))
        << op;
  }
}

// Registering touches no GPU; asking for a device where there is none is a
// RuntimeError that says so (here: always; on a GPU machine: skipped).
TEST(CudaDevice, NoDeviceIsAClearError) {
  registerCudaBackend();
  std::string why;
  if (deviceCount("cuda", &why) > 0)
    GTEST_SKIP() << "a CUDA device is present: the no-device path is not "
                    "reachable";
  EXPECT_FALSE(why.empty());
  try {
    deviceOfType("cuda");
    FAIL() << "deviceOfType(\"cuda\") did not throw";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cudaDevice(0), RuntimeError);
}

} // namespace
} // namespace dtorch::rt::cuda
