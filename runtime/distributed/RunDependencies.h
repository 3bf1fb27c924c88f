//===- RunDependencies.h - which ranks each value needs -----------*- C++
//-*-===//
//
// The controller's record of which ranks each tensor handle's value needs,
// for failing fast: when a worker dies or goes silent, every fetch of a
// value whose run (or any run before it in its data flow) needed one of its
// ranks fails at once, even while a surviving rank is still busy in a kernel
// that no message can interrupt; and work that would need a lost rank is not
// sent at all: its outputs are poisoned here, so that fetching one fails at
// once naming the lost worker. Values that need no lost rank (a mesh of
// survivors) stay usable.
//
// Not thread-safe: Cluster::Impl guards it with its mutex. MLIR-free.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch_program.pb.h"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace dtorch::rt::detail {

/// Why a handle has no value: the rank and host to name, and the message.
struct LostValue {
  int rank = -1;
  std::string host;
  std::string message;
};

class RunDependencies {
public:
  /// A sorted rank list, shared by every value that needs those ranks.
  using Ranks = std::shared_ptr<const std::vector<int64_t>>;

  /// The ranks a program may communicate with: its mesh's ranks and the
  /// ranks its collectives name explicitly (`group`, `peer`, `root`).
  void
  setProgramRanks(uint64_t programId,
                  const std::vector<const ::dtorch::wire::Program *> &programs,
                  const std::vector<int64_t> &meshRanks);
  /// Every rank a run of `programId` on `ranks` needs, sorted.
  std::vector<int64_t> involved(uint64_t programId,
                                const std::vector<int64_t> &ranks) const;
  /// The same as one shared list, kept per program: every run of a program
  /// on the ranks of its last run gets the same list (one comparison of
  /// the rank vectors, no sort, no allocation), and programs that involve
  /// the same ranks get the same list.
  Ranks involvedRanks(uint64_t programId, const std::vector<int64_t> &ranks);
  /// Records a run that needs `involved` and reads `inputs`: its outputs
  /// need those ranks and whatever the inputs needed. An input made by a
  /// run with the same shared list is recognized by pointer, without
  /// comparing ranks.
  void recordRunShared(const Ranks &involved,
                       const std::vector<uint64_t> &inputs,
                       const std::vector<uint64_t> &outputs);
  void recordRun(const std::vector<int64_t> &involved,
                 const std::vector<uint64_t> &inputs,
                 const std::vector<uint64_t> &outputs);
  /// The rank list `handle` needs (nullptr when unknown), for tests.
  const std::vector<int64_t> *neededList(uint64_t handle) const;
  /// The first rank in `lost` (indexed by rank) that the value of `handle`
  /// needs; -1 when none does (or the handle is unknown: a put value).
  int64_t needs(uint64_t handle, const std::vector<bool> &lost) const;

  /// Handles whose value was never made because their run needed a lost
  /// rank (kept until freed).
  void poison(uint64_t handle, const LostValue &why);
  /// Poisons every handle whose value needs a rank in `lost`, with
  /// `why(rank)` for the first such rank: those values stay lost when the
  /// lost workers are replaced. Returns how many.
  size_t poisonNeeding(const std::vector<bool> &lost,
                       const std::function<LostValue(int64_t)> &why);
  const LostValue *poisoned(uint64_t handle) const;
  /// The handle was freed (or put again).
  void forget(uint64_t handle);
  size_t handlesTracked() const { return needs_.size(); }

private:
  // Sorted rank lists, shared by every output of a run (and by later runs
  // that need the same ranks), so a training loop holds one per mesh.
  std::unordered_map<uint64_t, Ranks> needs_;
  std::map<uint64_t, std::vector<int64_t>> programRanks_;
  // Per program: the ranks of its last run and that run's shared list.
  struct InvolvedCache {
    std::vector<int64_t> ranks;
    Ranks involved;
  };
  std::unordered_map<uint64_t, InvolvedCache> involvedCache_;
  // Every distinct list involvedRanks made, by a hash of its ranks: programs
  // on the same ranks share one list (a handful per session: one per mesh).
  std::unordered_map<uint64_t, std::vector<Ranks>> interned_;
  std::map<uint64_t, LostValue> poisoned_;
};

} // namespace dtorch::rt::detail
