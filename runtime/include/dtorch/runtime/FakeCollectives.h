// In-process collectives: the ranks are threads of one process sharing a hub.
// Each call is a rendezvous of the group's members, keyed by (group, the
// caller's per-group call number); every member deposits a copy of its input,
// waits for the others, then computes its own result from their copies.
#pragma once

#include "dtorch/runtime/Collectives.h"

#include <chrono>
#include <memory>

namespace dtorch::rt {

class FakeCollectiveHub {
public:
  explicit FakeCollectiveHub(int worldSize, std::chrono::milliseconds deadline =
                                                std::chrono::seconds(10));
  ~FakeCollectiveHub();
  FakeCollectiveHub(const FakeCollectiveHub &) = delete;
  FakeCollectiveHub &operator=(const FakeCollectiveHub &) = delete;

  int worldSize() const;
  std::chrono::milliseconds deadline() const;

  // A communicator for `rank` in [0, worldSize). The hub must outlive it.
  std::unique_ptr<Communicator> communicator(int rank);

  struct State; // implementation detail (FakeCollectives.cpp)

private:
  std::shared_ptr<State> state_;
};

} // namespace dtorch::rt
