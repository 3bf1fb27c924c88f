// Collectives of ranks that share one device: ranks that are threads of one
// worker process computing on the same GPU (a machine with fewer GPUs than
// ranks). NCCL cannot put two ranks of one GPU in a communicator, and
// carrying their data through host memory costs two PCIe crossings per
// member; here the members meet in a process-wide hub of the device, each
// hands over its input tensor (device memory every member of the process
// can address), and each computes its own result with device-to-device
// copies and the device's elementwise kernels (the registry's add,
// maximum, minimum, div), on its current stream.
//
// Which path a group's collectives take (collectivePathOf): the device
// communicator (NCCL) when every member has a device of its own, device
// copies when every member is a thread of one process on one device,
// device ipc (IpcDeviceCollectives.h: exported device memory) when every
// member computes on one device of one host from several processes, and
// the host (pinned staging copies and the host communicator) otherwise.
// DeviceCollectiveRouter applies that choice per group behind one
// Communicator.
//
// Reductions combine the members in group order (acc = x0 op x1 op ...,
// avg divides once at the end), as the host backends do; float16 and
// bfloat16 sums are rounded after each member (the elementwise kernels),
// where the host backends accumulate in float32, so 16-bit sums of three
// or more members may differ from theirs in the last bit.
#pragma once

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/Device.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace dtorch::rt {

// The communicator of global rank `rank`, a thread of this process
// computing on `device`, for groups whose members all compute on `device`
// in this process. Every blocking step has `deadline`; a member that does
// not arrive in time makes the call throw RuntimeError naming it.
std::unique_ptr<Communicator>
makeSharedDeviceCommunicator(int rank, Device &device,
                             std::chrono::milliseconds deadline);

enum class CollectivePath {
  DeviceCommunicator, // every member on a device of its own (NCCL)
  SharedDevice,       // every member a thread of one process on one device
  Host,               // anything else: through pinned host copies
  CrossProcessDevice, // one device of one host, members in several processes
};
const char *collectivePathName(CollectivePath path);

// Where each member of a group computes: its host, its worker process (any
// name unique among the processes of a host) and its device ordinal.
struct MemberPlacement {
  std::string host;
  std::string process;
  int32_t ordinal = 0;
};

// The path of `group`'s collectives from its members' placements.
CollectivePath
collectivePathOf(const Group &group,
                 const std::function<MemberPlacement(int64_t rank)> &placement);

// One Communicator for tensors on `device` that sends each group's
// collectives along its path: `deviceComm` (may be null: such groups go
// through the host), `shared` (device copies), `ipc` (device ipc between
// processes; may be null: such groups go through the host) or `host` (the
// tensors copied to pinned host memory, reduced by the host communicator,
// copied back). Not owning `host`.
class DeviceCollectiveRouter final : public Communicator {
public:
  DeviceCollectiveRouter(int rank,
                         std::function<CollectivePath(const Group &)> pathOf,
                         std::unique_ptr<Communicator> deviceComm,
                         std::unique_ptr<Communicator> shared,
                         Communicator *host,
                         std::unique_ptr<Communicator> ipc = nullptr);

  int rank() const override { return rank_; }
  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override;
  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override;
  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override;
  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override;
  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override;
  void send(const Tensor &x, int64_t peer, int64_t tag) override;
  void recv(Tensor &out, int64_t peer, int64_t tag) override;

private:
  // The communicator of `group`'s path; nullptr for the host path.
  Communicator *onDevice(const Group &group);
  // Runs `call` on host copies of `x` and `out`, then copies `out` back.
  void throughHost(const Tensor &x, Tensor &out,
                   const std::function<void(const Tensor &, Tensor &)> &call);

  int rank_;
  std::function<CollectivePath(const Group &)> pathOf_;
  std::unique_ptr<Communicator> deviceComm_, shared_, ipc_;
  Communicator *host_;
};

} // namespace dtorch::rt
