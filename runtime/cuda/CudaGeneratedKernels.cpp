// The launcher of generated GPU kernels (wire::Executable.gpu, PTX made by
// the controller through MLIR's NVVM path, lib/Compiler/GpuKernelCodegen.cpp):
// each PTX text is loaded once per device and content hash with the CUDA
// driver (cuModuleLoadDataEx, which JIT-assembles it for the device), its
// entry found with cuModuleGetFunction, and every call queued with
// cuLaunchKernel on the device's current stream. The driver functions come
// from the CUDA runtime (cudaGetDriverEntryPointByVersion), so nothing links
// against libcuda: the library loads and runs its tests on a machine
// without a driver.
#include "CudaGeneratedKernels.h"
#include "CudaDevice.h"

#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Tensor.h"

#include <cuda.h>

#include <climits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace dtorch::rt::cuda {
namespace {

struct DriverApi {
  decltype(&::cuModuleLoadDataEx) moduleLoadDataEx = nullptr;
  decltype(&::cuModuleGetFunction) moduleGetFunction = nullptr;
  decltype(&::cuLaunchKernel) launchKernel = nullptr;
  decltype(&::cuGetErrorString) getErrorString = nullptr;
};

template <class Fn> void resolve(const char *symbol, Fn &fn) {
  void *address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t error = cudaGetDriverEntryPointByVersion(
      symbol, &address, CUDA_VERSION, cudaEnableDefault, &found);
  if (error != cudaSuccess || found != cudaDriverEntryPointSuccess || !address)
    throw RuntimeError(std::string("the CUDA driver has no ") + symbol + " (" +
                       cudaGetErrorString(error) + ")");
  fn = reinterpret_cast<Fn>(address);
}

const DriverApi &driver() {
  static std::mutex mutex;
  static DriverApi api;
  static bool ready = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!ready) {
    resolve("cuModuleLoadDataEx", api.moduleLoadDataEx);
    resolve("cuModuleGetFunction", api.moduleGetFunction);
    resolve("cuLaunchKernel", api.launchKernel);
    resolve("cuGetErrorString", api.getErrorString);
    ready = true;
  }
  return api;
}

std::string driverError(CUresult result) {
  const char *text = nullptr;
  if (driver().getErrorString(result, &text) != CUDA_SUCCESS || !text)
    return "CUDA driver error " + std::to_string(static_cast<int>(result));
  return text;
}

std::mutex &modulesMutex() {
  static std::mutex m;
  return m;
}

// Loaded entries by (device ordinal, content hash); kept until exit.
std::map<std::pair<int, std::string>, CUfunction> &loadedFunctions() {
  static auto *table = new std::map<std::pair<int, std::string>, CUfunction>();
  return *table;
}

CUfunction loadFunction(CudaDevice &device,
                        const ::dtorch::wire::Executable &exe) {
  std::lock_guard<std::mutex> lock(modulesMutex());
  auto key = std::make_pair(device.ordinal(), exe.content_hash());
  auto it = loadedFunctions().find(key);
  if (it != loadedFunctions().end())
    return it->second;
  checkExecutable(exe); // the bytes are the ones the controller hashed
  const ::dtorch::wire::GpuKernel &gpu = exe.gpu();
  device.makeCurrent();
  const DriverApi &api = driver();
  // The JIT's messages name what the PTX lacks (an architecture the device
  // does not have, a PTX version the driver does not know).
  std::vector<char> log(8192, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {log.data(), reinterpret_cast<void *>(log.size())};
  CUmodule module = nullptr;
  CUresult result =
      api.moduleLoadDataEx(&module, gpu.ptx().c_str(), 2, options, values);
  if (result != CUDA_SUCCESS)
    throw RuntimeError("generated GPU kernel '" + gpu.entry() + "' (" +
                       gpu.arch() + ") does not load on " + device.describe() +
                       ": " + driverError(result) + " " +
                       std::string(log.data()));
  CUfunction function = nullptr;
  result = api.moduleGetFunction(&function, module, gpu.entry().c_str());
  if (result != CUDA_SUCCESS)
    throw RuntimeError("generated GPU kernel has no entry '" + gpu.entry() +
                       "': " + driverError(result));
  loadedFunctions().emplace(key, function);
  return function;
}

void launchGenerated(Device &device, const ::dtorch::wire::Executable &exe,
                     void *const *inputs, void *const *outputs,
                     const double *scalars) {
  CudaDevice &cuda = asCuda(device);
  const ::dtorch::wire::GpuKernel &gpu = exe.gpu();
  if (gpu.grid_x() == 0)
    return; // a group of no elements
  if (gpu.grid_x() > INT_MAX)
    throw RuntimeError("generated GPU kernel '" + gpu.entry() + "' needs " +
                       std::to_string(gpu.grid_x()) +
                       " blocks, more than a grid holds");
  CUfunction function = loadFunction(cuda, exe);
  // Each parameter points at its value: a buffer's device pointer or a
  // float64 constant (cuLaunchKernel copies them when it queues the call).
  int numInputs = exe.inputs_size(), numOutputs = exe.outputs_size();
  std::vector<void *> params;
  params.reserve(static_cast<size_t>(gpu.params_size()));
  for (int p : gpu.params()) {
    if (p < numInputs)
      params.push_back(const_cast<void **>(&inputs[p]));
    else if (p < numInputs + numOutputs)
      params.push_back(const_cast<void **>(&outputs[p - numInputs]));
    else
      params.push_back(
          const_cast<double *>(&scalars[p - numInputs - numOutputs]));
  }
  cuda.makeCurrent();
  CUresult result = driver().launchKernel(
      function, static_cast<unsigned>(gpu.grid_x()), 1, 1,
      static_cast<unsigned>(gpu.block_x()), 1, 1, 0,
      reinterpret_cast<CUstream>(cuda.currentCudaStream()), params.data(),
      nullptr);
  if (result != CUDA_SUCCESS)
    throw RuntimeError("launching generated GPU kernel '" + gpu.entry() +
                       "' failed: " + driverError(result));
}

} // namespace

void registerGeneratedKernelLauncher() {
  registerDeviceKernelLauncher("cuda", &launchGenerated);
}

void launchGeneratedKernel(Device &device,
                           const ::dtorch::wire::Executable &exe,
                           void *const *inputs, void *const *outputs,
                           const double *scalars) {
  launchGenerated(device, exe, inputs, outputs, scalars);
}

} // namespace dtorch::rt::cuda
