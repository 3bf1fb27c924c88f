#include "dtorch/runtime/Device.h"

#include "dtorch/runtime/Allocator.h"
#include "dtorch/runtime/Tensor.h"

#include <cstring>
#include <map>
#include <mutex>

namespace dtorch::rt {

namespace {

// CPU work runs when it is issued, so a CPU stream is always idle and every
// event has happened.
class CpuEvent final : public Event {
public:
  void synchronize() override {}
  bool done() override { return true; }
};

class CpuStream final : public Stream {
public:
  void synchronize() override {}
  void record(Event &) override {}
  void wait(Event &) override {}
  void *nativeHandle() const override { return nullptr; }
};

class CpuDevice final : public Device {
public:
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  const char *name() const override { return "cpu"; }
  std::string describe() const override { return "cpu"; }

  void *allocate(size_t bytes) override {
    return CachingAllocator::instance().allocate(bytes);
  }
  void deallocate(void *ptr, size_t bytes) override {
    CachingAllocator::instance().deallocate(ptr, bytes);
  }
  void *allocateHostStaging(size_t bytes) override { return allocate(bytes); }
  void deallocateHostStaging(void *ptr, size_t bytes) override {
    deallocate(ptr, bytes);
  }
  void releaseCached() override {
    CachingAllocator::instance().releaseCached();
  }

  void copyHostToDevice(void *dst, const void *src, size_t bytes,
                        Stream *) override {
    copy(dst, src, bytes);
  }
  void copyDeviceToHost(void *dst, const void *src, size_t bytes,
                        Stream *) override {
    copy(dst, src, bytes);
  }
  void copyDeviceToDevice(void *dst, const void *src, size_t bytes,
                          Stream *) override {
    copy(dst, src, bytes);
  }
  void fillZero(void *dst, size_t bytes, Stream *) override {
    if (bytes)
      std::memset(dst, 0, bytes);
  }

  std::unique_ptr<Stream> newStream() override {
    return std::make_unique<CpuStream>();
  }
  std::unique_ptr<Event> newEvent() override {
    return std::make_unique<CpuEvent>();
  }
  Stream &currentStream() override { return defaultStream_; }
  void setCurrentStream(Stream *) override {}
  void synchronize() override {}

private:
  static void copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src)
      std::memmove(dst, src, bytes);
  }
  CpuStream defaultStream_;
};

struct Providers {
  std::mutex mutex;
  std::map<std::string, DeviceProvider> byType;
};
Providers &providers() {
  static Providers *p = new Providers; // never destroyed: used at exit
  return *p;
}

const DeviceProvider *findProvider(const std::string &type) {
  Providers &p = providers();
  std::lock_guard<std::mutex> lock(p.mutex);
  auto it = p.byType.find(type);
  return it == p.byType.end() ? nullptr : &it->second;
}

} // namespace

Device &cpuDevice() {
  static CpuDevice *device = new CpuDevice; // never destroyed
  return *device;
}

void registerDeviceProvider(const std::string &type, DeviceProvider provider) {
  Providers &p = providers();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.byType[type] = std::move(provider);
}

int deviceCount(const std::string &type, std::string *whyNone) {
  if (type == "cpu")
    return 1;
  const DeviceProvider *provider = findProvider(type);
  std::string why;
  int count = 0;
  if (!provider)
    why = type == "cuda" ? "this build has no CUDA backend (DTORCH_CUDA off)"
                         : "device type '" + type + "' is unknown";
  else
    count = provider->count(why);
  if (whyNone)
    *whyNone = count > 0 ? std::string() : why;
  return count;
}

Device &deviceOfType(const std::string &type, int ordinal) {
  if (type == "cpu")
    return cpuDevice();
  std::string why;
  int count = deviceCount(type, &why);
  if (count == 0)
    throw RuntimeError((type == "cuda" ? "no CUDA device: " : "no device: ") +
                       why);
  if (ordinal < 0 || ordinal >= count)
    throw RuntimeError(type + " device " + std::to_string(ordinal) +
                       " does not exist (" + std::to_string(count) +
                       " visible)");
  return findProvider(type)->device(ordinal);
}

} // namespace dtorch::rt
