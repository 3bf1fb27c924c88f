// The DeviceIpc of a CUDA device (CudaIpc.h): exported memory and events
// through CUDA IPC, copies and the reduction kernel on the caller's stream.
#include "CudaIpc.h"

#include "CudaDevice.h"
#include "CudaRegistrationSupport.h"

#include "dtorch/runtime/DeviceIpc.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>

namespace dtorch::rt::cuda {

namespace {

std::string toHex(const void *data, size_t bytes) {
  static const char *digits = "0123456789abcdef";
  std::string text;
  for (size_t i = 0; i < bytes; ++i) {
    unsigned char c = static_cast<const unsigned char *>(data)[i];
    text += digits[c >> 4];
    text += digits[c & 15];
  }
  return text;
}

void fromHex(const std::string &text, void *data, size_t bytes,
             const char *what) {
  if (text.size() != 2 * bytes)
    throw RuntimeError(std::string("cuda ipc: malformed ") + what + " handle");
  auto value = [&](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    throw RuntimeError(std::string("cuda ipc: malformed ") + what + " handle");
  };
  for (size_t i = 0; i < bytes; ++i)
    static_cast<unsigned char *>(data)[i] = static_cast<unsigned char>(
        value(text[2 * i]) * 16 + value(text[2 * i + 1]));
}

cudaStream_t nativeOf(Stream &stream) {
  return static_cast<cudaStream_t>(stream.nativeHandle());
}

class CudaIpcEvent final : public IpcEvent {
public:
  CudaIpcEvent(cudaEvent_t event, int ordinal)
      : event_(event), ordinal_(ordinal) {}
  ~CudaIpcEvent() override { cudaEventDestroy(event_); }
  void record(Stream &stream) override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    check(cudaEventRecord(event_, nativeOf(stream)), "cudaEventRecord (ipc)");
  }
  void waitOn(Stream &stream) override {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    check(cudaStreamWaitEvent(nativeOf(stream), event_, 0),
          "cudaStreamWaitEvent (ipc)");
  }

private:
  cudaEvent_t event_;
  int ordinal_;
};

class CudaDeviceIpc final : public DeviceIpc {
public:
  explicit CudaDeviceIpc(CudaDevice &device) : device_(device) {}

  Device &device() override { return device_; }

  std::string deviceIdentity() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (identity_.empty()) {
      cudaDeviceProp properties{};
      check(cudaGetDeviceProperties(&properties, device_.ordinal()),
            "cudaGetDeviceProperties");
      identity_ = "GPU-" + toHex(&properties.uuid, sizeof(properties.uuid));
    }
    return identity_;
  }

  void *allocateExported(size_t bytes, std::string &handle) override {
    device_.makeCurrent();
    void *data = nullptr;
    check(cudaMalloc(&data, bytes == 0 ? 1 : bytes), "cudaMalloc (ipc arena)");
    cudaIpcMemHandle_t exported{};
    cudaError_t error = cudaIpcGetMemHandle(&exported, data);
    if (error != cudaSuccess) {
      cudaFree(data);
      check(error, "cudaIpcGetMemHandle");
    }
    handle = toHex(&exported, sizeof(exported));
    return data;
  }

  void freeExported(void *data, size_t) override {
    device_.makeCurrent();
    cudaFree(data);
  }

  void *openPeer(const std::string &handle, size_t) override {
    cudaIpcMemHandle_t exported{};
    fromHex(handle, &exported, sizeof(exported), "memory");
    device_.makeCurrent();
    void *data = nullptr;
    check(cudaIpcOpenMemHandle(&data, exported, cudaIpcMemLazyEnablePeerAccess),
          "cudaIpcOpenMemHandle");
    return data;
  }

  void closePeer(void *data, size_t) override {
    device_.makeCurrent();
    cudaIpcCloseMemHandle(data);
  }

  std::unique_ptr<IpcEvent> newExportedEvent(std::string &handle) override {
    device_.makeCurrent();
    cudaEvent_t event = nullptr;
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming |
                                               cudaEventInterprocess),
          "cudaEventCreate (ipc)");
    cudaIpcEventHandle_t exported{};
    cudaError_t error = cudaIpcGetEventHandle(&exported, event);
    if (error != cudaSuccess) {
      cudaEventDestroy(event);
      check(error, "cudaIpcGetEventHandle");
    }
    handle = toHex(&exported, sizeof(exported));
    return std::make_unique<CudaIpcEvent>(event, device_.ordinal());
  }

  std::unique_ptr<IpcEvent> openPeerEvent(const std::string &handle) override {
    cudaIpcEventHandle_t exported{};
    fromHex(handle, &exported, sizeof(exported), "event");
    device_.makeCurrent();
    cudaEvent_t event = nullptr;
    check(cudaIpcOpenEventHandle(&event, exported), "cudaIpcOpenEventHandle");
    return std::make_unique<CudaIpcEvent>(event, device_.ordinal());
  }

  void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch,
              size_t width, size_t height, Stream &stream) override {
    if (width == 0 || height == 0)
      return;
    device_.makeCurrent();
    if (height == 1)
      check(cudaMemcpyAsync(dst, src, width, cudaMemcpyDeviceToDevice,
                            nativeOf(stream)),
            "cudaMemcpyAsync (ipc)");
    else
      check(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, height,
                              cudaMemcpyDeviceToDevice, nativeOf(stream)),
            "cudaMemcpy2DAsync (ipc)");
  }

  void reduce(void *out, const std::vector<const void *> &pieces, int64_t count,
              DType dtype, rt::ReduceOp op, Stream &stream) override {
    rt::checkReducible(dtype, op);
    IpcReduceOp how = op == rt::ReduceOp::Sum   ? IpcReduceOp::Sum
                      : op == rt::ReduceOp::Avg ? IpcReduceOp::Avg
                      : op == rt::ReduceOp::Max ? IpcReduceOp::Max
                                                : IpcReduceOp::Min;
    device_.makeCurrent();
    try {
      launchIpcReduce(elemTypeOf(dtype), how, out, pieces.data(),
                      static_cast<int>(pieces.size()), count, nativeOf(stream));
    } catch (const std::exception &error) {
      throw RuntimeError(error.what());
    }
    check(cudaGetLastError(), "ipc reduce kernel launch");
  }

  size_t maxPieces() const override { return kIpcMaxPieces; }

private:
  CudaDevice &device_;
  std::mutex mutex_;
  std::string identity_;
};

} // namespace

DeviceIpc &cudaDeviceIpc(CudaDevice &device) {
  static std::mutex mutex;
  static auto *made = new std::map<int, std::unique_ptr<CudaDeviceIpc>>;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<CudaDeviceIpc> &ipc = (*made)[device.ordinal()];
  if (!ipc)
    ipc = std::make_unique<CudaDeviceIpc>(device);
  return *ipc;
}

} // namespace dtorch::rt::cuda
