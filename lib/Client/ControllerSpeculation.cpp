//===- ControllerSpeculation.cpp - starting a cached program early
//---------===//
//
// The controller's side of speculation (docs/speculation.md): the session
// says, at checkpoints of its recording, that the segment so far matches an
// earlier one; when that segment's program is cached and uploaded, the ranks
// of its mesh start running it on the arguments known so far (and bind more
// of them at later checkpoints). The segment's own submit then confirms the
// speculation when it runs that very program with those leading arguments
// (Controller::runSegment), and drops it otherwise.
//
// Correctness does not rest on the prediction: a rank drops a paused run by
// itself before any other run and before a put into one of its inputs
// (rt::RankState), and the confirmation names the speculation, the program
// and the arguments, which the rank compares with what it holds.
//
//===----------------------------------------------------------------------===//
#include "Controller.h"

#include "SegmentKey.h"

#include <algorithm>
#include <atomic>

namespace dtorch::client {

extern std::atomic<uint64_t> hashMask; // Controller.cpp

void Controller::speculate(int meshId, uint64_t predictedHash,
                           std::vector<Handle> args, bool extend) {
  enqueueMayInline(true, [this, meshId, predictedHash, args = std::move(args),
                          extend] {
    // A request that cannot be sent is not an error of the session: the
    // segment's own run reports a dead worker.
    try {
      if (extend) {
        if (!speculation_.id || speculation_.meshId != meshId)
          return;
        for (Handle h : args)
          if (!live_.count(h) || failed_.count(h) || lost_.count(h))
            return; // the confirming run binds them
        const Mesh &mesh = meshes_.at(meshId);
        backend_->speculate(mesh.ranks, speculation_.id, speculation_.programId,
                            args, /*extend=*/true, /*drop=*/false);
        speculation_.args.insert(speculation_.args.end(), args.begin(),
                                 args.end());
        return;
      }
      if (speculation_.id)
        dropSpeculationNow();
      auto meshIt = meshes_.find(meshId);
      if (meshIt == meshes_.end() || !lost_.empty())
        return;
      const Mesh &mesh = meshIt->second;
      if (backend_->anyRankLost(mesh.ranks))
        return;
      for (Handle h : args)
        if (!live_.count(h) || failed_.count(h))
          return;
      auto bucket =
          cache_.find(mixHash(predictedHash & hashMask, meshKeys_.at(meshId)));
      if (bucket == cache_.end())
        return;
      Compiled *found = nullptr;
      for (const auto &entry : bucket->second)
        if (entry->structure.structureHash == predictedHash &&
            (entry->mesh.id == meshId || sameMesh(entry->mesh, mesh))) {
          found = entry.get();
          break;
        }
      // Not a program the segment's run would use as it is: not uploaded,
      // about to be compiled again with fusion, or moving values between
      // meshes (paired at the run).
      if (!found || !found->uploaded || !found->moves.empty() ||
          (!found->fused && fusionTierFor(mesh) == FusionTier::FromSecondRun))
        return;
      if (found->speculatable < 0) {
        // Ranks refuse programs with collectives: not sent at all.
        bool collectives = false;
        for (const wire::Program &program : found->programs)
          for (const wire::Instruction &inst : program.instructions())
            collectives |= inst.stream() != wire::COMPUTE;
        found->speculatable = collectives ? 0 : 1;
      }
      if (found->speculatable == 0)
        return;
      speculation_.id = nextSpeculationId_++;
      speculation_.programId = found->programId;
      speculation_.meshId = meshId;
      speculation_.args = args;
      backend_->speculate(mesh.ranks, speculation_.id, found->programId, args,
                          /*extend=*/false, /*drop=*/false);
      std::lock_guard<std::mutex> lock(statsMutex_);
      ++stats_.speculations;
    } catch (...) {
      speculation_ = PendingSpeculation();
    }
  });
}

uint64_t Controller::confirmSpeculation(const Segment &seg,
                                        uint64_t programId) {
  bool confirmed = speculation_.programId == programId &&
                   speculation_.meshId == seg.meshId &&
                   seg.args.size() >= speculation_.args.size() &&
                   std::equal(speculation_.args.begin(),
                              speculation_.args.end(), seg.args.begin());
  if (!confirmed) {
    dropSpeculationNow();
    return 0;
  }
  uint64_t id = speculation_.id;
  speculation_ = PendingSpeculation();
  std::lock_guard<std::mutex> lock(statsMutex_);
  ++stats_.speculationsConfirmed;
  return id;
}

void Controller::dropSpeculationNow() {
  PendingSpeculation dropped = std::move(speculation_);
  speculation_ = PendingSpeculation();
  auto mesh = meshes_.find(dropped.meshId);
  try {
    if (dropped.id && mesh != meshes_.end() &&
        !backend_->anyRankLost(mesh->second.ranks))
      backend_->speculate(mesh->second.ranks, dropped.id, dropped.programId, {},
                          /*extend=*/false, /*drop=*/true);
  } catch (...) {
    // A rank drops it by itself before the next run it gets.
  }
}

} // namespace dtorch::client
