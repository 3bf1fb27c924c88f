//===- ClusterRecovery.cpp - health checks, survivors reset, restart -----===//

#include "ClusterImpl.h"

namespace dtorch::rt {

void Cluster::Impl::checkHealth(Clock::time_point started) {
  std::lock_guard<std::mutex> lock(mutex);
  auto now = Clock::now();
  for (size_t i = 0; i < workers.size(); ++i) {
    WorkerInfo &w = workers[i];
    if (w.dead)
      continue;
    if (w.child > 0) {
      std::string how = detail::pollExit(w.child);
      if (!how.empty()) {
        w.child = -1;
        markDead(i, how);
        if (!ready && startupError.empty()) {
          startupError = workers[i].deathReason;
          startupErrorRank = w.firstRank;
        }
        continue;
      }
    }
    if (w.authenticated && now - w.lastHeard > options.peerTimeout) {
      if (w.child > 0) {
        detail::killAndReap(w.child);
        w.child = -1;
      }
      markDead(i, "is unresponsive: stopped answering (nothing heard for "
                  "more than " +
                      std::to_string(options.peerTimeout.count()) + " ms)");
    }
  }
  if (!ready && startupError.empty() &&
      now - started > std::chrono::seconds(30)) {
    for (auto &w : workers)
      if (!w.authenticated) {
        startupError =
            describe(w) + " did not complete the handshake within 30 s";
        startupErrorRank = std::max(0, w.firstRank);
        break;
      }
    changed.notify_all();
  }
}

void Cluster::Impl::resetSurvivors(std::chrono::milliseconds idleBound) {
  // Each round resets every live worker to a new generation; a worker that
  // does not answer within the bound is killed and the round repeats, so
  // that no key of the final generation comes from a killed process.
  while (true) {
    std::unique_lock<std::mutex> lock(mutex);
    uint64_t round = ++generation;
    resetWaiting.clear();
    resetRequests.clear();
    // The new generation's rendezvous waits for the keys of the dead ranks'
    // replacements instead of failing at once.
    storeLost.clear();
    for (size_t i = 0; i < workers.size(); ++i) {
      const WorkerInfo &w = workers[i];
      if (w.dead || !w.authenticated)
        continue;
      uint64_t id = nextRequest++;
      resetRequests[id] = i;
      resetWaiting.insert(i);
      wire::Envelope e = envelope();
      e.set_request_id(id);
      e.mutable_reset()->set_generation(round);
      post(i, e);
      ++sent;
      ++trips;
    }
    auto deadline = Clock::now() + idleBound;
    changed.wait_until(lock, deadline, [&] {
      for (auto it = resetWaiting.begin(); it != resetWaiting.end();)
        it = workers[*it].dead ? resetWaiting.erase(it) : std::next(it);
      return resetWaiting.empty() || stopping;
    });
    if (stopping)
      throw RuntimeError("restart: the cluster is shutting down");
    if (resetWaiting.empty())
      return;
    // Silent ones (no heartbeat either: stopped, or hung whole) go first: a
    // survivor waiting for them in a collective becomes idle once they are
    // gone, and answers the next round. Busy ones that still beat go only
    // when no silent one is left.
    auto now = Clock::now();
    std::vector<size_t> silent, busy;
    for (size_t index : resetWaiting)
      (now - workers[index].lastHeard > 2 * options.heartbeatInterval ? silent
                                                                      : busy)
          .push_back(index);
    bool stopped = !silent.empty();
    std::string reason = "did not become idle within " +
                         std::to_string(idleBound.count()) +
                         " ms of the restart (" +
                         (stopped ? "silent: stopped or hung"
                                  : "stuck in a collective or a "
                                    "kernel?") +
                         ")";
    for (size_t index : stopped ? silent : busy) {
      WorkerInfo &w = workers[index];
      if (!embedded) {
        markDead(index, reason);
        throw WorkerError(w.firstRank, w.host,
                          "restart: " + w.deathReason +
                              "; a worker started by hand is not replaced: "
                              "start a new session");
      }
      detail::killAndReap(w.child);
      w.child = -1;
      markDead(index, reason + ", killed");
    }
  }
}

std::vector<int>
Cluster::Impl::replaceDeadWorkers(std::vector<std::string> &reasons) {
  std::unique_lock<std::mutex> lock(mutex);
  std::vector<size_t> replaced;
  for (size_t i = 0; i < workers.size(); ++i) {
    WorkerInfo &w = workers[i];
    if (!w.dead)
      continue;
    reasons.push_back(w.deathReason);
    if (w.child > 0)
      detail::killAndReap(w.child);
    w.id.clear();
    w.authenticated = false;
    w.dead = false;
    --deadWorkers;
    w.deathReason.clear();
    w.pid = 0;
    w.child = -1;
    spawnWorker(w);
    replaced.push_back(i);
  }
  std::string failure;
  bool done = changed.wait_for(lock, std::chrono::seconds(30), [&] {
    if (stopping)
      return true;
    for (size_t i : replaced) {
      if (workers[i].dead) {
        failure = workers[i].deathReason;
        return true;
      }
      if (!workers[i].authenticated)
        return false;
    }
    return true;
  });
  if (stopping)
    throw RuntimeError("restart: the cluster is shutting down");
  for (size_t i : replaced) {
    const WorkerInfo &w = workers[i];
    if (!done && !w.authenticated)
      failure = describe(w) + " did not complete the handshake within 30 s";
    if (!failure.empty())
      throw WorkerError(w.firstRank, w.host,
                        "restart: the replacement of " + failure);
  }
  std::vector<int> ranks;
  for (size_t i : replaced)
    for (int r = 0; r < workers[i].numRanks; ++r)
      ranks.push_back(workers[i].firstRank + r);
  std::sort(ranks.begin(), ranks.end());
  // What the dead workers' peers reported is now history.
  errors.clear();
  return ranks;
}

RestartReport Cluster::restart(std::chrono::milliseconds idleBound) {
  Impl &impl = *impl_;
  {
    std::lock_guard<std::mutex> lock(impl.mutex);
    if (impl.stopped || impl.stopping)
      throw RuntimeError("restart: the cluster was shut down");
    for (size_t i = 0; i < impl.workers.size(); ++i) {
      WorkerInfo &w = impl.workers[i];
      if (!w.dead && w.child > 0) {
        std::string how = detail::pollExit(w.child);
        if (!how.empty()) {
          w.child = -1;
          impl.markDead(i, how);
        }
      }
    }
    if (!impl.embedded) {
      // Every gone worker, in one error naming the first.
      std::string gone;
      const WorkerInfo *first = nullptr;
      for (const WorkerInfo &w : impl.workers)
        if (w.dead) {
          first = first ? first : &w;
          gone +=
              (gone.empty() ? "" : "; ") + w.deathReason + " at " + w.address;
        }
      if (first)
        throw WorkerError(
            first->firstRank, first->host,
            "restart: " + gone +
                ": a worker started by hand cannot be replaced by the "
                "controller: start it again (dtorch-worker --listen ADDRESS "
                "...) and start a new session (dtorch.shutdown(), "
                "dtorch.init())");
    }
  }
  // Whatever was sent before reaches the survivors ahead of their reset
  // (the same socket keeps the order), and nothing of it reaches a
  // replacement.
  impl.drainOutbox();
  impl.resetSurvivors(idleBound);
  RestartReport report;
  report.replacedRanks = impl.replaceDeadWorkers(report.reasons);
  std::lock_guard<std::mutex> lock(impl.mutex);
  report.generation = impl.generation;
  return report;
}
} // namespace dtorch::rt
