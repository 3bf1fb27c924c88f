// The CUDA device of the runtime's Device interface (Device.h): a caching
// device allocator, a caching pinned-host allocator, CUDA streams and
// events, and a per-thread current stream the CUDA kernels launch on.
#pragma once

#include "dtorch/runtime/Device.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace dtorch::rt {
class KernelRegistry;
} // namespace dtorch::rt

namespace dtorch::rt::cuda {

// Size-bucketed free lists of blocks from `allocate`/`release` (cudaMalloc
// or cudaMallocHost); what it hands out is reused for requests of the same
// bucket (CachingAllocator::bucketSize) instead of going back to CUDA.
class CachingBlockPool {
public:
  using AllocateFn = cudaError_t (*)(void **, size_t);
  using ReleaseFn = cudaError_t (*)(void *);
  CachingBlockPool(const char *what, AllocateFn allocate, ReleaseFn release)
      : what_(what), allocate_(allocate), release_(release) {}
  void *take(size_t bytes);
  void give(void *ptr, size_t bytes);
  void releaseCached();
  size_t bytesCached() const;
  size_t bytesInUse() const;

private:
  const char *what_;
  AllocateFn allocate_;
  ReleaseFn release_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void *>> free_;
  size_t cached_ = 0, inUse_ = 0;
};

class CudaDevice final : public Device {
public:
  explicit CudaDevice(int ordinal);
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  const char *name() const override { return "cuda"; }
  int ordinal() const override { return ordinal_; }
  std::string describe() const override { return description_; }

  void *allocate(size_t bytes) override;
  void deallocate(void *ptr, size_t bytes) override;
  void *allocateHostStaging(size_t bytes) override;
  void deallocateHostStaging(void *ptr, size_t bytes) override;
  void releaseCached() override;

  void copyHostToDevice(void *dst, const void *src, size_t bytes,
                        Stream *stream) override;
  void copyDeviceToHost(void *dst, const void *src, size_t bytes,
                        Stream *stream) override;
  void copyDeviceToDevice(void *dst, const void *src, size_t bytes,
                          Stream *stream) override;
  void fillZero(void *dst, size_t bytes, Stream *stream) override;

  std::unique_ptr<Stream> newStream() override;
  std::unique_ptr<Event> newEvent() override;
  Stream &currentStream() override;
  void setCurrentStream(Stream *stream) override;
  void synchronize() override;

  // The current stream as cudaStream_t (for kernel launches).
  cudaStream_t currentCudaStream();
  // Makes this device current on the calling thread.
  void makeCurrent() const;
  // A device word kernels set error bits in (CudaLaunch.h kError*).
  unsigned *errorWord() const { return errorWord_; }
  // Waits for `stream`, reads and clears the error word; throws RuntimeError
  // naming `op` for a set bit.
  void checkErrorWord(cudaStream_t stream, const char *op);

private:
  void copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
            Stream *stream);

  int ordinal_;
  std::string description_;
  CachingBlockPool devicePool_, hostPool_;
  std::unique_ptr<Stream> defaultStream_;
  unsigned *errorWord_ = nullptr;
};

// Throws RuntimeError "`what`: <CUDA error>" unless error is cudaSuccess.
void check(cudaError_t error, const char *what);

// The device of `ordinal` (made on first use; every CUDA device of the
// process lives until exit). Throws RuntimeError when there is none.
CudaDevice &cudaDevice(int ordinal = 0);
// The CUDA device `device` is, or RuntimeError.
CudaDevice &asCuda(Device &device);

// Registers the "cuda" DeviceProvider and every CUDA kernel (under device
// "cuda"). Idempotent; touches no GPU (works without one).
void registerCudaBackend();
// The CUDA kernels alone, into `registry` (registerCudaBackend calls it on
// the global registry).
void registerCudaKernels(KernelRegistry &registry);

} // namespace dtorch::rt::cuda
