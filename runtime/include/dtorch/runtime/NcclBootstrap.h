// How the ranks of one NCCL communicator agree on its ncclUniqueId: the first
// member of the group makes it (ncclGetUniqueId) and publishes it in the
// controller's key-value store, the store that already carries the Gloo
// rendezvous and the collective-link secret (the worker's ControllerStore);
// the other members read it there, within the collectives' deadline. No
// NCCL header is needed here (the id is 128 opaque bytes), so this is built
// and tested without CUDA; NcclCommunicator (runtime/cuda) uses it.
#pragma once

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/GlooCollectives.h" // KeyValueStore

#include <chrono>
#include <functional>
#include <string>

namespace dtorch::rt {

// The store key of the unique id of `group`'s communicator under `prefix`
// (which carries the rendezvous generation): "<prefix>/id/<r0>,<r1>,...".
std::string ncclUniqueIdKey(const std::string &prefix, const Group &group);

// The unique id of `group`'s communicator as `rank` (a member) learns it:
// the first member calls `makeId` and sets it in `store`; every other member
// waits for it up to `deadline`. Throws RuntimeError naming the group, the
// member that should have published the id and the deadline when it does not
// come, and when an id of another size than `idBytes` is found or made.
std::string exchangeNcclUniqueId(KeyValueStore &store,
                                 const std::string &prefix, int64_t rank,
                                 const Group &group,
                                 const std::function<std::string()> &makeId,
                                 size_t idBytes,
                                 std::chrono::milliseconds deadline);

} // namespace dtorch::rt
