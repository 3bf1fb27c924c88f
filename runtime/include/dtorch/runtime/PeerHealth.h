//===- PeerHealth.h - ranks the controller declared dead ----------*- C++
//-*-===//
//
// What a worker process knows about the health of the other ranks: the
// controller tells every surviving worker which ranks it saw die or go
// silent (the PeersLost message), and the worker records them here. The
// communicators of the worker's ranks consult it while they wait, so a
// collective, a receive or a segment attach that waits for a dead rank gives
// up within a few milliseconds instead of at its deadline (a peer that never
// attached has no pid to watch, and a stopped or remote peer keeps its
// sockets open). Waits that cannot poll (a Gloo transfer) subscribe and are
// interrupted when new ranks are declared dead.
//
// Thread-safe. MLIR-free.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace dtorch::rt {

class PeerHealth {
public:
  /// Called with the ranks newly declared dead and the reason.
  using Listener =
      std::function<void(const std::set<int64_t> &, const std::string &)>;

  /// Records `ranks` as dead for `reason` and calls every listener with
  /// those not already dead.
  void declareDead(const std::vector<int64_t> &ranks,
                   const std::string &reason);
  /// Forgets every dead rank (the lost workers were replaced).
  void clear();
  /// Why the first dead member of `ranks` died ("rank R: reason"), or ""
  /// when all of them are alive. Cheap while no rank is dead.
  std::string deadAmong(const std::vector<int64_t> &ranks) const;
  bool isDead(int64_t rank) const;
  bool anyDead() const { return generation_.load() != cleared_.load(); }

  /// Registers `listener`; returns the id to unsubscribe with. A listener
  /// may call the queries above but not subscribe or unsubscribe.
  int subscribe(Listener listener);
  void unsubscribe(int id);

private:
  mutable std::mutex mutex_;
  std::map<int64_t, std::string> dead_;
  std::mutex listenersMutex_; // guards the two members below
  std::map<int, Listener> listeners_;
  int nextListener_ = 1;
  // Bumped by every declaration that adds a rank and by clear(): both equal
  // means nothing is dead, so the common check takes no lock.
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> cleared_{0};
};

} // namespace dtorch::rt
