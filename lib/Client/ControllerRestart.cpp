//===- ControllerRestart.cpp - recovery after a worker failed ------------===//
//
// Controller::restart: the backend replaces the lost worker processes; the
// controller then knows which values lost a piece (a value lives on every
// rank of its mesh), and that every compiled program must be uploaded again
// (a new process holds none; a survivor replaces its copy under the same
// id).
//
//===----------------------------------------------------------------------===//
#include "Controller.h"

#include <set>

namespace dtorch::client {

namespace {

/// "2, 3" of the ranks of `mesh` in `gone`.
std::vector<int64_t> ranksIn(const Mesh &mesh, const std::set<int> &gone) {
  std::vector<int64_t> ranks;
  for (int64_t r : mesh.ranks)
    if (gone.count(static_cast<int>(r)))
      ranks.push_back(r);
  return ranks;
}

std::string joinRanks(const std::vector<int64_t> &ranks) {
  std::string text;
  for (int64_t r : ranks)
    text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

} // namespace

Controller::RestartOutcome
Controller::restartNow(std::chrono::milliseconds idleBound) {
  RestartOutcome outcome;
  speculation_ = PendingSpeculation(); // the workers' state goes with them
  outcome.replacedRanks = backend_->restart(idleBound);
  moves_.clear(); // messages in flight went with the old transports
  ++restartCount_;
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    ++stats_.restarts;
  }
  std::set<int> gone(outcome.replacedRanks.begin(),
                     outcome.replacedRanks.end());
  if (!gone.empty()) {
    for (auto it = live_.begin(); it != live_.end();) {
      std::vector<int64_t> ranks = ranksIn(meshes_.at(it->second), gone);
      if (ranks.empty()) {
        ++it;
        continue;
      }
      LostValue lost;
      lost.rank = static_cast<int>(ranks.front());
      lost.host = backend_->hostOf(lost.rank);
      lost.message = "rank " + std::to_string(lost.rank) + " (host " +
                     lost.host + "): tensor lost: its piece(s) on rank(s) " +
                     joinRanks(ranks) +
                     " were held by worker processes that dtorch.restart() "
                     "replaced; create it again (e.g. load it from a "
                     "checkpoint)";
      lost_[it->first] = lost;
      outcome.lost.emplace(it->first, std::move(lost));
      it = live_.erase(it);
    }
    liveCount_ = live_.size();
    for (auto &[key, bucket] : cache_)
      for (auto &compiled : bucket)
        compiled->uploaded = false;
  }
  return outcome;
}

Controller::RestartOutcome
Controller::restart(std::chrono::milliseconds idleBound) {
  auto promise = std::make_shared<std::promise<RestartOutcome>>();
  auto result = promise->get_future();
  enqueue([this, promise, idleBound] {
    try {
      RestartOutcome outcome = restartNow(idleBound);
      {
        // A failure of the work before the restart is not reported later.
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = nullptr;
      }
      promise->set_value(std::move(outcome));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return result.get();
}

void Controller::autoRestartIfNeeded() {
  if (!autoRestart_ || !backend_->hasDeadWorker())
    return;
  try {
    RestartOutcome outcome = restartNow(std::chrono::milliseconds(2000));
    {
      std::lock_guard<std::mutex> lock(autoLostMutex_);
      for (auto &[handle, lost] : outcome.lost)
        autoLost_[handle] = std::move(lost);
    }
    ++autoRestartEpoch_;
    std::lock_guard<std::mutex> lock(statsMutex_);
    ++stats_.autoRestarts;
  } catch (...) {
    autoRestart_ = false; // not again at every request
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
}

std::unordered_map<Handle, LostValue> Controller::takeAutoLost() {
  std::lock_guard<std::mutex> lock(autoLostMutex_);
  std::unordered_map<Handle, LostValue> taken;
  taken.swap(autoLost_);
  return taken;
}

void Controller::autoRestartBeforeReporting() {
  if (!autoRestart_ || !backend_->hasDeadWorker())
    return;
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> restarted = done->get_future();
  try {
    enqueue([this, done] {
      autoRestartIfNeeded();
      done->set_value();
    });
  } catch (...) {
    return; // shutting down
  }
  restarted.wait();
}

} // namespace dtorch::client
