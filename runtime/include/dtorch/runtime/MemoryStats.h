// What one rank holds: its buffer table as the controller reads it
// (RankState::memoryStats, the MemoryStats request of the worker protocol,
// Backend::memoryStats, dtorch.memory_stats()). MLIR-free.
#pragma once

#include "dtorch/runtime/Tensor.h"

#include <cstdint>
#include <map>
#include <vector>

namespace dtorch::rt {

/// One live tensor of a rank's table.
struct HeldTensor {
  uint64_t handle = 0;
  DType dtype = ::dtorch::wire::DTYPE_INVALID;
  uint64_t bytes = 0; // the tensor's own size (nbytes)
};

struct MemoryStats {
  int rank = -1;
  /// False when the backend cannot tell (the simulated one): every count
  /// below is then zero.
  bool known = true;
  /// Live tensors (poisoned handles hold nothing and are not counted).
  uint64_t tensors = 0;
  /// Bytes of the distinct storages behind them: two handles sharing one
  /// storage count it once.
  uint64_t bytes = 0;
  /// The same bytes by element type (distinct storages).
  std::map<DType, uint64_t> bytesByDtype;
  /// Every live tensor, by increasing handle.
  std::vector<HeldTensor> held;

  /// Buffer planning: the arena the rank keeps between runs for the planned
  /// temporaries of its programs (the largest arena_bytes it has run).
  uint64_t arenaBytes = 0;
  /// The arena_bytes of the last program run: the peak bytes of its planned
  /// temporaries (0 when it was not planned).
  uint64_t lastRunArenaBytes = 0;
  /// The rank's memory during its last run: its table before the run, plus
  /// the arena, plus every buffer the run gave its own storage (outputs;
  /// all temporaries without planning). A buffer lives until the run ends.
  uint64_t lastRunPeakBytes = 0;
  /// The high-water mark of the rank's memory: the largest lastRunPeakBytes
  /// so far, or table plus arena at any statistics request, if larger.
  uint64_t peakBytes = 0;

  /// Speculation (RankState::speculate): runs started, confirmed and
  /// dropped, and the instructions confirmed runs ran while paused.
  uint64_t speculationsStarted = 0;
  uint64_t speculationsConfirmed = 0;
  uint64_t speculationsDropped = 0;
  uint64_t speculativeInstructions = 0;
};

} // namespace dtorch::rt
