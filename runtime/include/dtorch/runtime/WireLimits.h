// Bounds on every size and count a peer can put in a message, checked before
// anything is allocated for it. A message over a bound is refused with an
// error reply (or poisons the values it would make); the process stays up.
// The message itself is bounded by TransportOptions::maxMessageBytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dtorch::rt {

// Dims of a tensor or buffer shape.
inline constexpr int kMaxTensorRank = 16;
// Bytes of one tensor or buffer, and of a program's arena (16 TiB: more than
// any one host holds; a shape beyond it is a corrupt or hostile message).
inline constexpr int64_t kMaxTensorBytes = int64_t(1) << 44;
// Handles named by one run, free or put message.
inline constexpr int kMaxHandlesPerMessage = 1 << 20;
// Positions of a mesh (it never has more than the world's ranks).
inline constexpr int64_t kMaxMeshPositions = int64_t(1) << 20;
// Instructions, buffers and events of one program.
inline constexpr int kMaxProgramInstructions = 1 << 22;
inline constexpr int kMaxProgramBuffers = 1 << 22;
inline constexpr int kMaxProgramEvents = 1 << 22;
// Events a rank's profiler buffer may be asked to keep.
inline constexpr uint64_t kMaxTraceCapacity = uint64_t(1) << 24;
// The controller's rendezvous store (served to authenticated workers).
inline constexpr size_t kMaxStoreKeyBytes = 1024;
inline constexpr size_t kMaxStoreValueBytes = size_t(1) << 20;
inline constexpr size_t kMaxStoreKeys = size_t(1) << 16;
inline constexpr size_t kMaxStoreTotalBytes = size_t(64) << 20;

} // namespace dtorch::rt
