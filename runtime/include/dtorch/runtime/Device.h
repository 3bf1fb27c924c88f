// One interface for the devices a rank computes on: the host CPU and a CUDA
// GPU. A Device allocates its memory (the CPU through the caching host
// allocator, a GPU through a caching device allocator), gives pinned host
// buffers for loads and fetches, makes streams and events, and copies
// between host and device. Kernels are found in the KernelRegistry under the
// device's name() ("cpu", "cuda").
//
// The runtime library itself knows only the CPU device; the CUDA backend
// (runtime/cuda, library dtorch_runtime_cuda, built when DTORCH_CUDA is on)
// registers a DeviceProvider for "cuda" with registerDeviceProvider(), which
// the worker does at start (dtorch::rt::cuda::registerCudaBackend()).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace dtorch::rt {

class Event;

// An ordered queue of device work. CPU streams run their work at once, on
// the calling thread, so they are always synchronized.
class Stream {
public:
  virtual ~Stream() = default;
  // Blocks until all work queued so far has finished.
  virtual void synchronize() = 0;
  // Marks the current end of the stream in `event`.
  virtual void record(Event &event) = 0;
  // Later work on this stream starts after what `event` marks.
  virtual void wait(Event &event) = 0;
  // cudaStream_t for CUDA streams, nullptr for the CPU.
  virtual void *nativeHandle() const = 0;
};

class Event {
public:
  virtual ~Event() = default;
  // Blocks until the work the event marks has finished.
  virtual void synchronize() = 0;
  // Whether it has finished (never blocks).
  virtual bool done() = 0;
};

enum class DeviceKind { Cpu, Cuda };

class Device {
public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  // The kernel registry's device key: "cpu" or "cuda".
  virtual const char *name() const = 0;
  // The device ordinal (0 for the CPU).
  virtual int ordinal() const { return 0; }
  // "cpu", "cuda:0 (NVIDIA H200)".
  virtual std::string describe() const = 0;

  // Device memory: at least `bytes` (64-byte aligned, never null; throws
  // RuntimeError when the device is out of memory even after releasing its
  // cache). deallocate takes the size given to allocate.
  virtual void *allocate(size_t bytes) = 0;
  virtual void deallocate(void *ptr, size_t bytes) = 0;
  // Host memory the device can copy from and to asynchronously (page-locked
  // for CUDA; the caching host allocator for the CPU).
  virtual void *allocateHostStaging(size_t bytes) = 0;
  virtual void deallocateHostStaging(void *ptr, size_t bytes) = 0;
  // Returns cached device blocks to the system.
  virtual void releaseCached() = 0;

  // Copies of `bytes` bytes, queued on `stream` (nullptr: the device's
  // default stream, and the call returns after the copy finished).
  virtual void copyHostToDevice(void *dst, const void *src, size_t bytes,
                                Stream *stream) = 0;
  virtual void copyDeviceToHost(void *dst, const void *src, size_t bytes,
                                Stream *stream) = 0;
  virtual void copyDeviceToDevice(void *dst, const void *src, size_t bytes,
                                  Stream *stream) = 0;
  // Sets `bytes` bytes at dst to zero.
  virtual void fillZero(void *dst, size_t bytes, Stream *stream) = 0;

  virtual std::unique_ptr<Stream> newStream() = 0;
  virtual std::unique_ptr<Event> newEvent() = 0;
  // The stream kernels of the calling thread are queued on (set by the
  // executor for its compute and communication threads; the device's
  // default stream until then).
  virtual Stream &currentStream() = 0;
  virtual void setCurrentStream(Stream *stream) = 0;
  // Blocks until every stream of the device is idle.
  virtual void synchronize() = 0;
};

// The host CPU: never fails, lives for the whole process.
Device &cpuDevice();

// What a backend registers for a device type: how many devices this
// process sees (0 when there is no device or its driver fails: the reason
// goes to `whyNone`) and the device of an ordinal.
struct DeviceProvider {
  std::function<int(std::string &whyNone)> count;
  std::function<Device &(int ordinal)> device;
};
void registerDeviceProvider(const std::string &type, DeviceProvider provider);

// Devices of `type` ("cpu": 1) this process can use; 0 for a type no
// backend was built for or without a device, with the reason in `whyNone`
// when given.
int deviceCount(const std::string &type, std::string *whyNone = nullptr);
// The device of `type` and `ordinal`. Throws RuntimeError saying why when
// there is none ("no CUDA device: ...", "device type 'tpu' is unknown").
Device &deviceOfType(const std::string &type, int ordinal = 0);

} // namespace dtorch::rt
