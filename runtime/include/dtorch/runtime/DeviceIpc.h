// The device calls that collectives between processes sharing one GPU need,
// behind one small interface, so that their protocol (handle exchange, chunk
// ownership, sequencing, errors) runs on a fake device here and on CUDA
// (runtime/cuda/CudaIpc.cpp: cudaIpcGetMemHandle / cudaIpcOpenMemHandle,
// interprocess events, a reduction kernel) where there is a GPU.
//
// Memory and events are exported as opaque handle strings that another
// process of the same host opens; the handles travel through the rendezvous
// store (IpcDeviceCollectives.h).
//
// hostDeviceIpc() is the fake: "device" memory is host memory in memfd
// blocks that another process opens through /proc/PID/fd, streams are the
// CPU's (every operation finishes before the call returns) and events are
// no-ops; the reduction is reducePieces. It works across forked processes
// and across threads of one process alike.
#pragma once

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/Device.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtorch::rt {

// An event another process can wait for (CUDA: cudaEventInterprocess).
class IpcEvent {
public:
  virtual ~IpcEvent() = default;
  // Marks the current end of `stream` (only the process that made it).
  virtual void record(Stream &stream) = 0;
  // Later work on `stream` starts after the last record made so far.
  virtual void waitOn(Stream &stream) = 0;
};

class DeviceIpc {
public:
  virtual ~DeviceIpc() = default;
  // The device the memory and the streams belong to.
  virtual Device &device() = 0;
  // Identity of the physical device (CUDA: its UUID; the fake: "host"):
  // members whose identities differ cannot share memory.
  virtual std::string deviceIdentity() = 0;

  // Device memory of `bytes` that other processes can open with the
  // returned handle; freed with freeExported.
  virtual void *allocateExported(size_t bytes, std::string &handle) = 0;
  virtual void freeExported(void *data, size_t bytes) = 0;
  // Maps the memory behind `handle` (exported by another process) into this
  // one; unmapped with closePeer. Throws RuntimeError when it cannot, for a
  // handle this process exported, and for one already open here (CUDA's
  // rules, which the fake enforces too: callers share one opening).
  virtual void *openPeer(const std::string &handle, size_t bytes) = 0;
  virtual void closePeer(void *data, size_t bytes) = 0;

  // An event of this process that others can open by `handle`.
  virtual std::unique_ptr<IpcEvent> newExportedEvent(std::string &handle) = 0;
  // Another process's event (waitOn only).
  virtual std::unique_ptr<IpcEvent>
  openPeerEvent(const std::string &handle) = 0;

  // Copies `height` rows of `width` bytes from src (rows `srcPitch` apart)
  // to dst (rows `dstPitch` apart), queued on `stream`; any of the memory
  // may be a peer's.
  virtual void copy2D(void *dst, size_t dstPitch, const void *src,
                      size_t srcPitch, size_t width, size_t height,
                      Stream &stream) = 0;
  // out[i] = pieces[0][i] op pieces[1][i] op ... for i < count, as
  // reducePieces combines them (group order, 16-bit floats summed in
  // float32), queued on `stream`. `out` is none of the pieces.
  virtual void reduce(void *out, const std::vector<const void *> &pieces,
                      int64_t count, DType dtype, ReduceOp op,
                      Stream &stream) = 0;
  // Most pieces one reduce takes (a group larger than that cannot use it).
  virtual size_t maxPieces() const = 0;
};

// The fake: host memory standing in for device memory (see above).
DeviceIpc &hostDeviceIpc();

// What a backend registers for its device type (the CUDA backend for
// "cuda"): the DeviceIpc of a device of that type.
using DeviceIpcFactory = std::function<DeviceIpc &(Device &device)>;
void registerDeviceIpc(const std::string &deviceType, DeviceIpcFactory factory);
// The registered DeviceIpc of `device`, or nullptr when its backend has
// none (the CPU has none: its ranks share memory through the host
// communicators).
DeviceIpc *deviceIpcOf(Device &device);

} // namespace dtorch::rt
