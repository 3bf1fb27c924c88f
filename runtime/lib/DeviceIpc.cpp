// The registry of DeviceIpc backends and the host fake (DeviceIpc.h).
#include "dtorch/runtime/DeviceIpc.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace dtorch::rt {

namespace {

// The CPU stands in for the device; "exported" memory is a memfd block
// that another process maps through /proc/PID/fd/FD.
class HostDeviceIpc final : public DeviceIpc {
public:
  Device &device() override { return cpuDevice(); }
  std::string deviceIdentity() override { return "host"; }

  void *allocateExported(size_t bytes, std::string &handle) override {
    size_t size = bytes == 0 ? 1 : bytes;
    int fd = static_cast<int>(
        syscall(SYS_memfd_create, "dtorch-device-ipc", MFD_CLOEXEC));
    if (fd < 0)
      throw RuntimeError(std::string("device ipc (host): memfd_create: ") +
                         std::strerror(errno));
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
      int error = errno;
      close(fd);
      throw RuntimeError(std::string("device ipc (host): ftruncate: ") +
                         std::strerror(error));
    }
    void *data = map(fd, size);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fds_[data] = fd;
    }
    handle = "host " + std::to_string(getpid()) + " " + std::to_string(fd) +
             " " + std::to_string(size);
    return data;
  }

  void freeExported(void *data, size_t bytes) override {
    munmap(data, bytes == 0 ? 1 : bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = fds_.find(data);
    if (it != fds_.end()) {
      close(it->second);
      fds_.erase(it);
    }
  }

  void *openPeer(const std::string &handle, size_t bytes) override {
    long long pid = 0, fd = 0;
    unsigned long long size = 0;
    if (std::sscanf(handle.c_str(), "host %lld %lld %llu", &pid, &fd, &size) !=
        3)
      throw RuntimeError("device ipc (host): malformed memory handle '" +
                         handle + "'");
    // As CUDA: no handle opens in the process that exported it, and a
    // handle opens once per process until closed.
    if (pid == getpid())
      throw RuntimeError("device ipc (host): handle '" + handle +
                         "' was exported by this process");
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto &[data, open] : opened_)
        if (open == handle)
          throw RuntimeError("device ipc (host): handle '" + handle +
                             "' is already open in this process");
    }
    if (size < bytes)
      throw RuntimeError("device ipc (host): handle '" + handle + "' has " +
                         std::to_string(size) + " bytes, " +
                         std::to_string(bytes) + " needed");
    std::string path =
        "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    int opened = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (opened < 0)
      throw RuntimeError("device ipc (host): cannot open " + path + ": " +
                         std::strerror(errno));
    void *data = nullptr;
    try {
      data = map(opened, bytes == 0 ? 1 : bytes);
    } catch (...) {
      close(opened);
      throw;
    }
    close(opened); // the mapping keeps the memory
    std::lock_guard<std::mutex> lock(mutex_);
    opened_[data] = handle;
    return data;
  }

  void closePeer(void *data, size_t bytes) override {
    munmap(data, bytes == 0 ? 1 : bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    opened_.erase(data);
  }

  // CPU streams finish every operation before it returns: nothing to mark.
  class NoEvent final : public IpcEvent {
  public:
    void record(Stream &) override {}
    void waitOn(Stream &) override {}
  };
  std::unique_ptr<IpcEvent> newExportedEvent(std::string &handle) override {
    handle = "host-event";
    return std::make_unique<NoEvent>();
  }
  std::unique_ptr<IpcEvent> openPeerEvent(const std::string &handle) override {
    if (handle != "host-event")
      throw RuntimeError("device ipc (host): malformed event handle '" +
                         handle + "'");
    return std::make_unique<NoEvent>();
  }

  void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch,
              size_t width, size_t height, Stream &) override {
    for (size_t row = 0; row < height; ++row)
      std::memcpy(static_cast<char *>(dst) + row * dstPitch,
                  static_cast<const char *>(src) + row * srcPitch, width);
  }

  void reduce(void *out, const std::vector<const void *> &pieces, int64_t count,
              DType dtype, ReduceOp op, Stream &) override {
    reducePieces(out, pieces, count, dtype, op);
  }
  size_t maxPieces() const override { return 255; }

private:
  static void *map(int fd, size_t bytes) {
    void *data =
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED)
      throw RuntimeError(std::string("device ipc (host): mmap of ") +
                         std::to_string(bytes) +
                         " bytes: " + std::strerror(errno));
    return data;
  }

  std::mutex mutex_;
  std::map<void *, int> fds_;
  std::map<void *, std::string> opened_; // peer memory open here
};

std::mutex &registryMutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, DeviceIpcFactory> &registry() {
  static auto *factories = new std::map<std::string, DeviceIpcFactory>;
  return *factories;
}

} // namespace

DeviceIpc &hostDeviceIpc() {
  static auto *ipc = new HostDeviceIpc();
  return *ipc;
}

void registerDeviceIpc(const std::string &deviceType,
                       DeviceIpcFactory factory) {
  std::lock_guard<std::mutex> lock(registryMutex());
  registry()[deviceType] = std::move(factory);
}

DeviceIpc *deviceIpcOf(Device &device) {
  DeviceIpcFactory factory;
  {
    std::lock_guard<std::mutex> lock(registryMutex());
    auto it = registry().find(device.name());
    if (it == registry().end())
      return nullptr;
    factory = it->second;
  }
  return &factory(device);
}

} // namespace dtorch::rt
