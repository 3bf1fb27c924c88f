// Collectives between ranks that are threads of one process, without copies
// through sockets: members publish pointers to their tensors and each member
// reads the others' memory directly (an all_reduce is a reduce-scatter over
// the members' inputs followed by an all-gather of the reduced chunks, so
// every member touches each byte a constant number of times).
//
// Reductions combine members in group order, so every member gets the same
// bits as the Gloo backend and FakeCollectiveHub.
#pragma once

#include "dtorch/runtime/Collectives.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>

namespace dtorch::rt {

class SharedMemoryHub {
public:
  // `localRanks`: the global ranks hosted by this process; `worldSize` the
  // size of the whole world (for checking peer ranks).
  SharedMemoryHub(
      std::set<int64_t> localRanks, int worldSize,
      std::chrono::milliseconds deadline = std::chrono::seconds(30));
  ~SharedMemoryHub();
  SharedMemoryHub(const SharedMemoryHub &) = delete;
  SharedMemoryHub &operator=(const SharedMemoryHub &) = delete;

  const std::set<int64_t> &localRanks() const;
  // True when every member of `group` is hosted here.
  bool hostsAll(const Group &group) const;
  std::chrono::milliseconds deadline() const;

  // A communicator for a local rank. The hub must outlive it. Every group it
  // is used with must lie entirely in localRanks().
  std::unique_ptr<Communicator> communicator(int rank);

  struct State;

private:
  std::shared_ptr<State> state_;
};

// Routes each call to `local` when the group (or the peer) lies entirely in
// `localRanks`; otherwise to the host transport when one is set and
// `onHost(group)` holds (every member on this host: shared memory between
// processes), else to the communicator `remote()` returns (called on first
// use; it may block, e.g. while a Gloo mesh connects, and may throw).
class RoutingCommunicator final : public Communicator {
public:
  RoutingCommunicator(int rank, std::set<int64_t> localRanks,
                      std::unique_ptr<Communicator> local,
                      std::function<Communicator *()> remote);

  // `host` must outlive this communicator; `onHost` is asked once per group
  // (the answer is kept).
  void setHostTransport(Communicator *host,
                        std::function<bool(const Group &)> onHost);

  // Which transport served how many calls.
  struct Routes {
    uint64_t local = 0, host = 0, remote = 0;
  };
  Routes routes() const;

  int rank() const override { return rank_; }
  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override;
  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override;
  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override;
  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override;
  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override;
  void send(const Tensor &x, int64_t peer, int64_t tag) override;
  void recv(Tensor &out, int64_t peer, int64_t tag) override;

private:
  Communicator &pick(const Group &group);
  Communicator &pickPeer(int64_t peer);

  int rank_;
  std::set<int64_t> localRanks_;
  std::unique_ptr<Communicator> local_;
  std::function<Communicator *()> remoteFactory_;
  Communicator *remote_ = nullptr;
  Communicator *host_ = nullptr;
  std::function<bool(const Group &)> onHost_;
  std::map<Group, bool> hostGroups_;
  std::atomic<uint64_t> localCalls_{0}, hostCalls_{0}, remoteCalls_{0};
};

} // namespace dtorch::rt
