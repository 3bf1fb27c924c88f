//===- ReplaceableCommunicator.h - a rank's communicator across resets --*-===//
//
// A worker's rank keeps one Communicator for its whole life (its RankState
// and executor hold a plain pointer to it), while the transports behind it
// (in-process shared memory, host shared memory, Gloo) are rebuilt by a
// restart of the cluster with a new rendezvous generation. This forwards
// every call to the transport of the current generation; `replace` switches
// generations and must only be called while the rank runs nothing (its
// thread and its executor's communication thread are idle).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/runtime/Collectives.h"

namespace dtorch::rt {

class ReplaceableCommunicator final : public Communicator {
public:
  explicit ReplaceableCommunicator(int rank) : rank_(rank) {}

  /// The transport every later call goes to (not owned; must stay alive
  /// until the next replace).
  void replace(Communicator *current) { current_ = current; }

  int rank() const override { return rank_; }
  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override {
    target().all_reduce(x, out, group, op);
  }
  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override {
    target().all_gather(x, out, group, dim, sizes);
  }
  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override {
    target().reduce_scatter(x, out, group, op, dim, sizes);
  }
  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override {
    target().all_to_all(x, out, group, splitDim, splitSizes, concatDim,
                        concatSizes);
  }
  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override {
    target().broadcast(x, out, group, root);
  }
  void send(const Tensor &x, int64_t peer, int64_t tag) override {
    target().send(x, peer, tag);
  }
  void recv(Tensor &out, int64_t peer, int64_t tag) override {
    target().recv(out, peer, tag);
  }

private:
  Communicator &target() {
    if (!current_)
      throw RuntimeError("rank " + std::to_string(rank_) +
                         ": no communicator (the worker is being reset)");
    return *current_;
  }

  int rank_;
  Communicator *current_ = nullptr;
};

} // namespace dtorch::rt
