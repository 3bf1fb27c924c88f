// The Communicator of a rank whose tensors live on its own CUDA device, over
// NCCL: one NCCL communicator per distinct group (a pair for send/recv),
// made at its first use, its ncclUniqueId published by the group's first
// member in the controller's key-value store (NcclBootstrap.h). Every call
// has the deadline of the other backends: a group that does not connect, or
// an operation that does not finish, in time aborts its NCCL communicator
// (ncclCommAbort) and throws RuntimeError naming the group and the other
// members. Tensors must be on the rank's device; each operation runs on the
// communicator's own stream after the work queued so far on the calling
// thread's current stream (an event, no host wait: the executor's
// communication stream, which waits only for the kernels that wrote the
// inputs, so the compute stream keeps running beside NCCL), and the call
// returns once the operation finished.
//
// The reductions are NCCL's (ring or tree order), so float results may
// differ in the last bits from the host backends, which combine members in
// group order. Ranks that share one GPU cannot be members of one NCCL
// communicator: their collectives go through host copies (Executor).
#pragma once

#include "CudaDevice.h"

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/GlooCollectives.h" // KeyValueStore

#include <chrono>
#include <memory>
#include <string>

namespace dtorch::rt::cuda {

struct NcclOptions {
  // Deadline of every blocking step: the unique id, connecting, each call.
  std::chrono::milliseconds deadline{30000};
  // Prefix of this world's keys in the store (carries the rendezvous
  // generation, as Gloo's does).
  std::string prefix = "nccl/world";
};

// The communicator of global rank `rank` computing on `device`.
std::unique_ptr<Communicator>
makeNcclCommunicator(int rank, CudaDevice &device,
                     std::shared_ptr<KeyValueStore> store,
                     const NcclOptions &options = {});

// The NCCL library's version ("2.28.9"), or why it cannot be loaded.
std::string ncclVersionString();

} // namespace dtorch::rt::cuda
