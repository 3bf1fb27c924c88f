// Cross-process collectives on Gloo (TCP). Each rank owns one Gloo context
// over the whole world, connected at construction through a key-value store
// (the worker implements it by asking the controller). The collectives are
// written on Gloo's point-to-point unbound buffers so that reductions combine
// members in group order (the same bits on every member and as the other
// backends), uneven and empty pieces work, and a peer that does not arrive
// by the deadline is reported by rank.
#pragma once

#include "dtorch/runtime/Collectives.h"
#include "dtorch/runtime/PeerHealth.h"

#include <chrono>
#include <memory>
#include <string>

namespace dtorch::rt {

// The rendezvous store. Thread-safe.
class KeyValueStore {
public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string &key, const std::string &value) = 0;
  // Blocks until `key` exists; throws RuntimeError after `timeout`.
  virtual std::string get(const std::string &key,
                          std::chrono::milliseconds timeout) = 0;
};

struct GlooOptions {
  // Address the TCP device listens on (loopback unless configured).
  std::string hostname = "127.0.0.1";
  // Deadline of every blocking call, connecting included.
  std::chrono::milliseconds deadline{30000};
  // Prefix of this world's keys in the store.
  std::string prefix = "gloo";
  // Secret that every member of the world holds (the worker gets it from
  // the controller's authenticated store). Non-empty: after connecting,
  // every pair proves with it that its other end is a member (a
  // challenge-response, GlooPairAuthentication.h), so a process that
  // connects to the collective port in a peer's place is refused. Empty: no
  // check (tests with an in-process store).
  std::string pairSecret;
  // Ranks the controller declared dead (null: none are ever declared): a
  // collective or receive waiting for one of them is interrupted at once.
  std::shared_ptr<PeerHealth> health;
};

// Connects `rank` of a world of `worldSize` ranks (every rank must call it
// concurrently) and returns its communicator. Throws RuntimeError naming the
// ranks that did not show up by the deadline.
std::unique_ptr<Communicator> connectGloo(int rank, int worldSize,
                                          std::shared_ptr<KeyValueStore> store,
                                          const GlooOptions &options = {});

} // namespace dtorch::rt
