//===- ControllerTestSupport.h - Controller test helpers ---*- C++ -*-===//
//
// The backend the Controller tests wrap (every call handed to an in-process
// backend; a test overrides the calls it logs or changes) and building a
// controller with an environment switch set for its construction.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "Controller.h"
#include "ScopedEnvironment.h"
#include "dtorch/Client/Backend.h"

#include <memory>
#include <string>
#include <vector>

namespace dtorch::client::test {

/// A Backend that hands every call to the in-process backend of
/// `worldSize` ranks and tells `record` of the ones a test follows, in the
/// order the controller makes them: "run", "put H" and "fetch H" (rank 0's),
/// "free H1,H2,... on R ranks", "sync". The calls with a default in Backend
/// (runDonating, speculate, restart, ...) keep it, so that they reach the
/// overrides of a derived test backend as they would reach a real
/// backend's.
class ForwardingBackend : public Backend {
public:
  explicit ForwardingBackend(int worldSize)
      : inner_(makeInProcessBackend(worldSize)) {}

  int worldSize() const override { return inner_->worldSize(); }
  std::string hostOf(int rank) const override { return inner_->hostOf(rank); }
  void uploadPrograms(uint64_t id, const std::vector<wire::Program> &programs,
                      const std::vector<int64_t> &meshRanks) override {
    inner_->uploadPrograms(id, programs, meshRanks);
  }
  using Backend::free;
  using Backend::run;
  void run(const std::vector<int64_t> &ranks, uint64_t id,
           const std::vector<Handle> &in, const std::vector<Handle> &out,
           const std::vector<int64_t> &seeds) override {
    record("run");
    inner_->run(ranks, id, in, out, seeds);
  }
  void put(int rank, Handle h, const rt::Tensor &v) override {
    if (rank == 0)
      record("put " + std::to_string(h));
    inner_->put(rank, h, v);
  }
  std::future<rt::Tensor> fetch(int rank, Handle h) override {
    if (rank == 0)
      record("fetch " + std::to_string(h));
    return inner_->fetch(rank, h);
  }
  std::future<rt::MemoryStats> memoryStats(int rank) override {
    return inner_->memoryStats(rank);
  }
  std::future<rt::TraceChunk> trace(int rank, rt::TraceAction action,
                                    size_t capacity,
                                    size_t maxEvents) override {
    return inner_->trace(rank, action, capacity, maxEvents);
  }
  void free(const std::vector<int64_t> &ranks,
            const std::vector<Handle> &hs) override {
    std::string entry = "free ";
    for (size_t i = 0; i < hs.size(); ++i)
      entry += (i ? "," : "") + std::to_string(hs[i]);
    record(entry + " on " + std::to_string(ranks.size()) + " ranks");
    inner_->free(ranks, hs);
  }
  void synchronize() override {
    record("sync");
    inner_->synchronize();
  }
  void shutdown() override { inner_->shutdown(); }
  uint64_t messagesSent() const override { return inner_->messagesSent(); }
  uint64_t roundTrips() const override { return inner_->roundTrips(); }

protected:
  /// Called (on the calling thread) before the call is handed on.
  virtual void record(std::string entry) { (void)entry; }
  std::unique_ptr<Backend> inner_;
};

/// A controller over `owned`, constructed with the environment variable
/// `name` set to "1" or "0" (`on`) and restored afterwards: the switches
/// the controller reads when it is built. `backend` is set to `owned`.
template <typename BackendT>
std::unique_ptr<Controller> makeControllerWith(const char *name, bool on,
                                               std::unique_ptr<BackendT> owned,
                                               BackendT *&backend) {
  testsupport::ScopedEnvironment scoped(name, on ? "1" : "0");
  backend = owned.get();
  return std::make_unique<Controller>(std::move(owned));
}

} // namespace dtorch::client::test
