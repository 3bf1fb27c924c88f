#include "CudaDevice.h"
#include "CudaGeneratedKernels.h"
#include "CudaIpc.h"

#ifdef DTORCH_HAVE_NCCL
#include "NcclCommunicator.h"
#endif
#include "CudaLaunch.h"
#include "dtorch/runtime/DeviceIpc.h"
#include "dtorch/runtime/DevicePlacement.h"

#include "dtorch/runtime/Allocator.h"
#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/Tensor.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>

namespace dtorch::rt::cuda {

void check(cudaError_t error, const char *what) {
  if (error != cudaSuccess)
    throw RuntimeError(std::string(what) + ": " + cudaGetErrorName(error) +
                       " (" + cudaGetErrorString(error) + ")");
}

// ---- caching pools ----
void *CachingBlockPool::take(size_t bytes) {
  size_t bucket = CachingAllocator::bucketSize(bytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(bucket);
    if (it != free_.end() && !it->second.empty()) {
      void *ptr = it->second.back();
      it->second.pop_back();
      cached_ -= bucket;
      inUse_ += bucket;
      return ptr;
    }
  }
  void *ptr = nullptr;
  cudaError_t error = allocate_(&ptr, bucket);
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError(); // clear it, give the cache back, try once more
    releaseCached();
    error = allocate_(&ptr, bucket);
  }
  check(error, (std::string(what_) + " of " + std::to_string(bucket) + " bytes")
                   .c_str());
  std::lock_guard<std::mutex> lock(mutex_);
  inUse_ += bucket;
  return ptr;
}

void CachingBlockPool::give(void *ptr, size_t bytes) {
  size_t bucket = CachingAllocator::bucketSize(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  free_[bucket].push_back(ptr);
  inUse_ -= bucket;
  cached_ += bucket;
}

void CachingBlockPool::releaseCached() {
  std::unordered_map<size_t, std::vector<void *>> blocks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks.swap(free_);
    cached_ = 0;
  }
  for (auto &[bucket, list] : blocks)
    for (void *ptr : list)
      release_(ptr);
}

size_t CachingBlockPool::bytesCached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}
size_t CachingBlockPool::bytesInUse() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return inUse_;
}

namespace {

cudaError_t mallocDevice(void **ptr, size_t bytes) {
  return cudaMalloc(ptr, bytes);
}
cudaError_t mallocHost(void **ptr, size_t bytes) {
  return cudaMallocHost(ptr, bytes);
}

// ---- streams and events ----
class CudaEvent final : public Event {
public:
  explicit CudaEvent(const CudaDevice &device) {
    device.makeCurrent();
    check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming),
          "cudaEventCreate");
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  void synchronize() override {
    check(cudaEventSynchronize(event_), "cudaEventSynchronize");
  }
  bool done() override {
    cudaError_t error = cudaEventQuery(event_);
    if (error == cudaErrorNotReady)
      return false;
    check(error, "cudaEventQuery");
    return true;
  }
  cudaEvent_t handle() const { return event_; }

private:
  cudaEvent_t event_ = nullptr;
};

class CudaStream final : public Stream {
public:
  // `owned`: a stream made here (destroyed with the object); otherwise the
  // legacy default stream (nullptr).
  CudaStream(const CudaDevice &device, bool owned) : owned_(owned) {
    if (owned) {
      device.makeCurrent();
      check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
            "cudaStreamCreate");
    }
  }
  ~CudaStream() override {
    if (owned_)
      cudaStreamDestroy(stream_);
  }
  void synchronize() override {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  void record(Event &event) override {
    check(cudaEventRecord(static_cast<CudaEvent &>(event).handle(), stream_),
          "cudaEventRecord");
  }
  void wait(Event &event) override {
    check(cudaStreamWaitEvent(stream_, static_cast<CudaEvent &>(event).handle(),
                              0),
          "cudaStreamWaitEvent");
  }
  void *nativeHandle() const override { return stream_; }

private:
  bool owned_;
  cudaStream_t stream_ = nullptr;
};

thread_local Stream *currentStreamOfThread = nullptr;

std::string describeDevice(int ordinal) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess)
    return "cuda:" + std::to_string(ordinal);
  return "cuda:" + std::to_string(ordinal) + " (" + prop.name + ", sm_" +
         std::to_string(prop.major) + std::to_string(prop.minor) + ")";
}

} // namespace

// ---- the device ----
CudaDevice::CudaDevice(int ordinal)
    : ordinal_(ordinal), description_(describeDevice(ordinal)),
      devicePool_("cudaMalloc", mallocDevice, cudaFree),
      hostPool_("cudaMallocHost", mallocHost, cudaFreeHost) {
  makeCurrent();
  defaultStream_ = std::make_unique<CudaStream>(*this, /*owned=*/false);
  check(cudaMalloc(reinterpret_cast<void **>(&errorWord_), sizeof(unsigned)),
        "cudaMalloc (error word)");
  check(cudaMemset(errorWord_, 0, sizeof(unsigned)), "cudaMemset");
}

CudaDevice::~CudaDevice() = default; // lives until exit (never destroyed)

void CudaDevice::makeCurrent() const {
  check(cudaSetDevice(ordinal_), "cudaSetDevice");
}

void *CudaDevice::allocate(size_t bytes) {
  makeCurrent();
  return devicePool_.take(bytes);
}
void CudaDevice::deallocate(void *ptr, size_t bytes) {
  devicePool_.give(ptr, bytes);
}
void *CudaDevice::allocateHostStaging(size_t bytes) {
  return hostPool_.take(bytes);
}
void CudaDevice::deallocateHostStaging(void *ptr, size_t bytes) {
  hostPool_.give(ptr, bytes);
}
void CudaDevice::releaseCached() {
  makeCurrent();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  devicePool_.releaseCached();
  hostPool_.releaseCached();
}

void CudaDevice::copy(void *dst, const void *src, size_t bytes,
                      cudaMemcpyKind kind, Stream *stream) {
  if (bytes == 0 || dst == src)
    return;
  makeCurrent();
  cudaStream_t s =
      stream ? static_cast<cudaStream_t>(stream->nativeHandle()) : nullptr;
  check(cudaMemcpyAsync(dst, src, bytes, kind, s), "cudaMemcpyAsync");
  if (!stream)
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void CudaDevice::copyHostToDevice(void *dst, const void *src, size_t bytes,
                                  Stream *stream) {
  copy(dst, src, bytes, cudaMemcpyHostToDevice, stream);
}
void CudaDevice::copyDeviceToHost(void *dst, const void *src, size_t bytes,
                                  Stream *stream) {
  copy(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
}
void CudaDevice::copyDeviceToDevice(void *dst, const void *src, size_t bytes,
                                    Stream *stream) {
  copy(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
}
void CudaDevice::fillZero(void *dst, size_t bytes, Stream *stream) {
  if (bytes == 0)
    return;
  makeCurrent();
  cudaStream_t s =
      stream ? static_cast<cudaStream_t>(stream->nativeHandle()) : nullptr;
  check(cudaMemsetAsync(dst, 0, bytes, s), "cudaMemsetAsync");
  if (!stream)
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

std::unique_ptr<Stream> CudaDevice::newStream() {
  return std::make_unique<CudaStream>(*this, /*owned=*/true);
}
std::unique_ptr<Event> CudaDevice::newEvent() {
  return std::make_unique<CudaEvent>(*this);
}
Stream &CudaDevice::currentStream() {
  return currentStreamOfThread ? *currentStreamOfThread : *defaultStream_;
}
void CudaDevice::setCurrentStream(Stream *stream) {
  currentStreamOfThread = stream;
}
cudaStream_t CudaDevice::currentCudaStream() {
  return static_cast<cudaStream_t>(currentStream().nativeHandle());
}
void CudaDevice::synchronize() {
  makeCurrent();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void CudaDevice::checkErrorWord(cudaStream_t stream, const char *op) {
  unsigned word = 0;
  check(cudaMemcpyAsync(&word, errorWord_, sizeof word, cudaMemcpyDeviceToHost,
                        stream),
        "cudaMemcpyAsync (error word)");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (word == 0)
    return;
  check(cudaMemsetAsync(errorWord_, 0, sizeof word, stream), "cudaMemsetAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  std::string what = std::string(op) + ": ";
  if (word & 1u)
    what += "integer division by zero";
  else if (word & 2u)
    what += "negative exponent of an integer base other than 1 or -1";
  else if (word & kErrorIndexOutOfRange)
    what += "an index is out of range";
  else
    what += "scaled integer sum is out of range";
  throw RuntimeError(what);
}

// ---- the process's devices ----
namespace {

int visibleDevices(std::string &whyNone) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    whyNone = std::string("cudaGetDeviceCount failed: ") +
              cudaGetErrorName(error) + " (" + cudaGetErrorString(error) + ")";
    cudaGetLastError();
    return 0;
  }
  if (count == 0)
    whyNone = "cudaGetDeviceCount found no device";
  return count;
}

} // namespace

CudaDevice &cudaDevice(int ordinal) {
  static std::mutex mutex;
  static auto *devices = new std::unordered_map<int, CudaDevice *>;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = devices->find(ordinal);
  if (it != devices->end())
    return *it->second;
  std::string why;
  int count = visibleDevices(why);
  if (count == 0)
    throw RuntimeError("no CUDA device: " + why);
  if (ordinal < 0 || ordinal >= count)
    throw RuntimeError("CUDA device " + std::to_string(ordinal) +
                       " does not exist (" + std::to_string(count) +
                       " visible)");
  auto *device = new CudaDevice(ordinal); // never destroyed
  (*devices)[ordinal] = device;
  return *device;
}

CudaDevice &asCuda(Device &device) {
  if (device.kind() != DeviceKind::Cuda)
    throw RuntimeError("a CUDA kernel got a tensor on " + device.describe());
  return static_cast<CudaDevice &>(device);
}

void registerCudaBackend() {
  static std::once_flag once;
  std::call_once(once, [] {
    DeviceProvider provider;
    provider.count = [](std::string &why) { return visibleDevices(why); };
    provider.device = [](int ordinal) -> Device & {
      return cudaDevice(ordinal);
    };
    registerDeviceProvider("cuda", std::move(provider));
    registerCudaKernels(KernelRegistry::global());
    // Collectives between processes sharing a GPU (IpcDeviceCollectives.h).
    registerDeviceIpc("cuda", [](Device &device) -> DeviceIpc & {
      return cudaDeviceIpc(asCuda(device));
    });
#ifdef DTORCH_HAVE_NCCL
    registerDeviceCommunicatorFactory(
        "cuda",
        [](int rank, Device &device, std::shared_ptr<KeyValueStore> store,
           std::chrono::milliseconds deadline, const std::string &prefix) {
          NcclOptions options;
          options.deadline = deadline;
          options.prefix = prefix;
          return makeNcclCommunicator(rank, asCuda(device), std::move(store),
                                      options);
        });
#endif
    registerGeneratedKernelLauncher();
  });
}

} // namespace dtorch::rt::cuda
