#include "dtorch/runtime/DevicePlacement.h"

#include "dtorch/runtime/Collectives.h"

#include <cstring>
#include <map>
#include <mutex>
#include <set>

namespace dtorch::rt {

std::vector<int32_t> assignDeviceOrdinals(
    const std::vector<int64_t> &meshRanks, int worldSize,
    const std::function<std::string(int rank)> &hostOf,
    const std::function<int(int rank, std::string &whyNone)> &devicesOf) {
  // Each rank's index among the ranks of its host, in rank order.
  std::map<std::string, int32_t> seenOnHost;
  std::vector<int32_t> localIndex(static_cast<size_t>(worldSize), 0);
  std::vector<std::string> hosts(static_cast<size_t>(worldSize));
  for (int rank = 0; rank < worldSize; ++rank) {
    hosts[rank] = hostOf(rank);
    localIndex[rank] = seenOnHost[hosts[rank]]++;
  }
  std::vector<int32_t> ordinals;
  ordinals.reserve(meshRanks.size());
  std::string missing;
  for (int64_t rank : meshRanks) {
    if (rank < 0 || rank >= worldSize)
      throw RuntimeError("rank " + std::to_string(rank) +
                         " is outside the world of " +
                         std::to_string(worldSize) + " ranks");
    std::string why;
    int devices = devicesOf(static_cast<int>(rank), why);
    if (devices <= 0) {
      missing += std::string(missing.empty() ? "" : "; ") + "rank " +
                 std::to_string(rank) + " on host " + hosts[rank] + " (" +
                 (why.empty() ? "no device" : why) + ")";
      ordinals.push_back(-1);
      continue;
    }
    ordinals.push_back(localIndex[rank] % devices);
  }
  if (!missing.empty())
    throw RuntimeError("no CUDA device for " + missing);
  return ordinals;
}

bool ranksHaveTheirOwnDevices(
    const std::vector<int64_t> &meshRanks, const std::vector<int32_t> &ordinals,
    const std::function<std::string(int rank)> &hostOf) {
  std::set<std::pair<std::string, int32_t>> taken;
  for (size_t p = 0; p < meshRanks.size() && p < ordinals.size(); ++p)
    if (!taken.insert({hostOf(static_cast<int>(meshRanks[p])), ordinals[p]})
             .second)
      return false;
  return meshRanks.size() == ordinals.size();
}

namespace {

std::mutex &factoriesMutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::string, DeviceCommunicatorFactory> &factories() {
  static std::map<std::string, DeviceCommunicatorFactory> registered;
  return registered;
}

} // namespace

void registerDeviceCommunicatorFactory(const std::string &deviceType,
                                       DeviceCommunicatorFactory factory) {
  std::lock_guard<std::mutex> lock(factoriesMutex());
  factories()[deviceType] = std::move(factory);
}

std::unique_ptr<Communicator> makeDeviceCommunicator(
    int rank, Device &device, std::shared_ptr<KeyValueStore> store,
    std::chrono::milliseconds deadline, const std::string &prefix) {
  DeviceCommunicatorFactory factory;
  {
    std::lock_guard<std::mutex> lock(factoriesMutex());
    auto it = factories().find(device.name());
    if (it == factories().end())
      return nullptr;
    factory = it->second;
  }
  return factory(rank, device, std::move(store), deadline, prefix);
}

namespace {

// A pinned staging block of `device`, returned when it goes out of scope.
class StagingBuffer {
public:
  StagingBuffer(Device &device, size_t bytes)
      : device_(device), bytes_(bytes),
        data_(device.allocateHostStaging(bytes)) {}
  ~StagingBuffer() { device_.deallocateHostStaging(data_, bytes_); }
  StagingBuffer(const StagingBuffer &) = delete;
  StagingBuffer &operator=(const StagingBuffer &) = delete;
  void *data() const { return data_; }

private:
  Device &device_;
  size_t bytes_;
  void *data_;
};

} // namespace

void copyIntoDeviceStaged(const Tensor &host, Tensor &onDevice) {
  if (host.device().kind() != DeviceKind::Cpu)
    throw RuntimeError("copyIntoDeviceStaged: the source is on " +
                       host.device().describe() + ", not the host");
  if (host.nbytes() != onDevice.nbytes())
    throw RuntimeError("copyIntoDeviceStaged: " + host.describe() +
                       " does not fit " + onDevice.describe());
  Device &device = onDevice.device();
  size_t bytes = host.nbytes();
  if (bytes == 0)
    return;
  if (device.kind() == DeviceKind::Cpu) {
    std::memcpy(onDevice.data(), host.data(), bytes);
    return;
  }
  StagingBuffer staging(device, bytes);
  std::memcpy(staging.data(), host.data(), bytes);
  device.copyHostToDevice(onDevice.data(), staging.data(), bytes, nullptr);
}

Tensor copyToDeviceStaged(const Tensor &host, Device &device) {
  if (!host.defined() || &host.device() == &device)
    return host;
  if (host.device().kind() != DeviceKind::Cpu)
    return device.kind() == DeviceKind::Cpu
               ? copyToHostStaged(host)
               : host.to(device); // throws: it goes through the host
  Tensor out = Tensor::empty(host.dtype(), host.shape(), device);
  copyIntoDeviceStaged(host, out);
  return out;
}

Tensor copyToHostStaged(const Tensor &tensor) {
  if (!tensor.defined() || tensor.device().kind() == DeviceKind::Cpu)
    return tensor;
  Device &device = tensor.device();
  Tensor out = Tensor::empty(tensor.dtype(), tensor.shape());
  size_t bytes = tensor.nbytes();
  if (bytes == 0)
    return out;
  StagingBuffer staging(device, bytes);
  device.copyDeviceToHost(staging.data(), tensor.data(), bytes, nullptr);
  std::memcpy(out.data(), staging.data(), bytes);
  return out;
}

} // namespace dtorch::rt
