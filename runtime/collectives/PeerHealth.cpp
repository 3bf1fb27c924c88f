#include "dtorch/runtime/PeerHealth.h"

namespace dtorch::rt {

void PeerHealth::declareDead(const std::vector<int64_t> &ranks,
                             const std::string &reason) {
  std::set<int64_t> added;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int64_t rank : ranks)
      if (dead_.emplace(rank, reason).second)
        added.insert(rank);
    if (added.empty())
      return;
    generation_.fetch_add(1);
  }
  // Held while the listeners run, so that unsubscribe() waits for a call in
  // progress (a listener's owner may be going away).
  std::lock_guard<std::mutex> lock(listenersMutex_);
  for (const auto &[id, listener] : listeners_)
    listener(added, reason);
}

void PeerHealth::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  dead_.clear();
  cleared_.store(generation_.load());
}

std::string PeerHealth::deadAmong(const std::vector<int64_t> &ranks) const {
  if (!anyDead())
    return "";
  std::lock_guard<std::mutex> lock(mutex_);
  for (int64_t rank : ranks) {
    auto it = dead_.find(rank);
    if (it != dead_.end())
      return "rank " + std::to_string(rank) + ": " + it->second;
  }
  return "";
}

bool PeerHealth::isDead(int64_t rank) const {
  if (!anyDead())
    return false;
  std::lock_guard<std::mutex> lock(mutex_);
  return dead_.count(rank) != 0;
}

int PeerHealth::subscribe(Listener listener) {
  std::lock_guard<std::mutex> lock(listenersMutex_);
  int id = nextListener_++;
  listeners_.emplace(id, std::move(listener));
  return id;
}

void PeerHealth::unsubscribe(int id) {
  std::lock_guard<std::mutex> lock(listenersMutex_);
  listeners_.erase(id);
}

} // namespace dtorch::rt
