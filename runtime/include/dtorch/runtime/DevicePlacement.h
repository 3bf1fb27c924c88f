// Which device each rank of a mesh computes on, and the copies between the
// host and a device that the worker's puts, fetches and host-carried
// collectives make through pinned (page-locked) staging buffers.
//
// The controller decides the placement once per mesh (init_device_mesh) and
// sends it with every upload of the mesh's programs (UploadProgram's
// device_type and device_ordinals); each rank's executor then computes on
// that device (Executor::setDevice).
#pragma once

#include "dtorch/runtime/Device.h"
#include "dtorch/runtime/Tensor.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtorch::rt {

class Communicator;
class KeyValueStore;

// The GPU of each rank of `meshRanks` (in their order), as torchrun's
// LOCAL_RANK picks it: the rank's index among the ranks 0..worldSize-1 that
// live on its host (`hostOf`), modulo the number of devices its worker
// process sees (`devicesOf`). Ranks on hosts with fewer GPUs than ranks
// share GPUs. Throws RuntimeError naming every rank with no device (with
// its host and the reason `devicesOf` gives).
std::vector<int32_t> assignDeviceOrdinals(
    const std::vector<int64_t> &meshRanks, int worldSize,
    const std::function<std::string(int rank)> &hostOf,
    const std::function<int(int rank, std::string &whyNone)> &devicesOf);

// `host` (a tensor in CPU memory) in the memory of `device`, copied through
// a pinned staging buffer of the device; `host` itself when `device` is the
// CPU or the tensor is already there.
Tensor copyToDeviceStaged(const Tensor &host, Device &device);
// The tensor in CPU memory: copied out through a pinned staging buffer of
// its device, or the tensor itself when it is on the CPU.
Tensor copyToHostStaged(const Tensor &tensor);
// Copies the CPU tensor `host` into `onDevice` (same dtype and size, on any
// device) through a pinned staging buffer.
void copyIntoDeviceStaged(const Tensor &host, Tensor &onDevice);

// Whether the ranks of a mesh may form device communicators (NCCL): every
// rank has a GPU of its own, no two ranks of one host share an ordinal.
// Ranks that share a GPU cannot be members of one NCCL communicator: their
// collectives go through host copies.
bool ranksHaveTheirOwnDevices(
    const std::vector<int64_t> &meshRanks, const std::vector<int32_t> &ordinals,
    const std::function<std::string(int rank)> &hostOf);

// What a backend registers to make the communicator of `rank` for tensors
// on `device` (the CUDA backend: NCCL). `store` is the controller's
// key-value store (rendezvous under `prefix`), `deadline` that of every
// blocking call.
using DeviceCommunicatorFactory = std::function<std::unique_ptr<Communicator>(
    int rank, Device &device, std::shared_ptr<KeyValueStore> store,
    std::chrono::milliseconds deadline, const std::string &prefix)>;
void registerDeviceCommunicatorFactory(const std::string &deviceType,
                                       DeviceCommunicatorFactory factory);
// The registered factory's communicator, or nullptr when no backend
// registered one for the device's type.
std::unique_ptr<Communicator> makeDeviceCommunicator(
    int rank, Device &device, std::shared_ptr<KeyValueStore> store,
    std::chrono::milliseconds deadline, const std::string &prefix);

} // namespace dtorch::rt
