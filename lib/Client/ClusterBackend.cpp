//===- ClusterBackend.cpp - worker processes through rt::Cluster ---------===//
//
// Forwards every request to rt::Cluster and turns its rt::WorkerError into
// the client's WorkerError (Errors.h), keeping the rank and host, so nothing
// above the backend sees a runtime exception type.
//
//===----------------------------------------------------------------------===//
#include "dtorch/Client/Backend.h"
#include "dtorch/Client/Errors.h"
#include "dtorch/runtime/Cluster.h"

namespace dtorch::client {
namespace {

/// Runs `fn`, rethrowing an rt::WorkerError as a client::WorkerError.
template <class Fn> auto translated(Fn &&fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const rt::WorkerError &e) {
    throw WorkerError(e.rank(), e.host(), e.what());
  }
}

class ClusterBackend : public Backend {
public:
  explicit ClusterBackend(const rt::ClusterOptions &o)
      : cluster_(translated([&] { return std::make_unique<rt::Cluster>(o); })) {
  }
  int worldSize() const override { return cluster_->worldSize(); }
  std::string hostOf(int rank) const override { return cluster_->hostOf(rank); }
  int cudaDevicesOf(int rank, std::string &whyNone) const override {
    return cluster_->cudaDevicesOf(rank, whyNone);
  }
  void uploadPrograms(uint64_t id, const std::vector<wire::Program> &programs,
                      const std::vector<int64_t> &meshRanks) override {
    std::vector<const wire::Program *> classes;
    for (const wire::Program &p : programs)
      classes.push_back(&p);
    translated([&] { cluster_->uploadPrograms(id, classes, meshRanks); });
  }
  void uploadProgramsOnDevice(
      uint64_t id, const std::vector<wire::Program> &programs,
      const std::vector<int64_t> &meshRanks, const std::string &deviceType,
      const std::vector<int32_t> &deviceOrdinals) override {
    std::vector<const wire::Program *> classes;
    for (const wire::Program &p : programs)
      classes.push_back(&p);
    translated([&] {
      cluster_->uploadPrograms(id, classes, meshRanks, deviceType,
                               deviceOrdinals);
    });
  }
  using Backend::free;
  using Backend::run;
  void run(const std::vector<int64_t> &ranks, uint64_t id,
           const std::vector<Handle> &in, const std::vector<Handle> &out,
           const std::vector<int64_t> &seeds) override {
    translated([&] { cluster_->run(ranks, id, in, out, seeds); });
  }
  void runDonating(const std::vector<int64_t> &ranks, uint64_t id,
                   const std::vector<Handle> &in,
                   const std::vector<Handle> &out,
                   const std::vector<int64_t> &seeds,
                   const std::vector<Handle> &donated) override {
    translated([&] { cluster_->run(ranks, id, in, out, seeds, donated); });
  }
  void speculate(const std::vector<int64_t> &ranks, uint64_t speculationId,
                 uint64_t programId, const std::vector<Handle> &inputs,
                 bool extend, bool drop) override {
    translated([&] {
      cluster_->speculate(ranks, speculationId, programId, inputs, extend,
                          drop);
    });
  }
  void runSpeculated(const std::vector<int64_t> &ranks, uint64_t id,
                     const std::vector<Handle> &in,
                     const std::vector<Handle> &out,
                     const std::vector<int64_t> &seeds,
                     const std::vector<Handle> &donated,
                     uint64_t speculationId) override {
    translated([&] {
      cluster_->run(ranks, id, in, out, seeds, donated, speculationId);
    });
  }
  void put(int rank, Handle h, const rt::Tensor &v) override {
    translated([&] { cluster_->put(rank, h, v); });
  }
  std::future<rt::Tensor> fetch(int rank, Handle h) override {
    std::future<rt::Tensor> reply =
        translated([&] { return cluster_->fetch(rank, h); });
    // Deferred: the translation runs in the thread that waits for the value.
    return std::async(std::launch::deferred,
                      [reply = std::move(reply)]() mutable {
                        return translated([&] { return reply.get(); });
                      });
  }
  std::future<rt::MemoryStats> memoryStats(int rank) override {
    std::future<rt::MemoryStats> reply =
        translated([&] { return cluster_->memoryStats(rank); });
    return std::async(std::launch::deferred,
                      [reply = std::move(reply)]() mutable {
                        return translated([&] { return reply.get(); });
                      });
  }
  std::future<rt::TraceChunk> trace(int rank, rt::TraceAction action,
                                    size_t capacity,
                                    size_t maxEvents) override {
    std::future<rt::TraceChunk> reply = translated(
        [&] { return cluster_->trace(rank, action, capacity, maxEvents); });
    return std::async(std::launch::deferred,
                      [reply = std::move(reply)]() mutable {
                        return translated([&] { return reply.get(); });
                      });
  }
  std::future<wire::CheckpointReply>
  checkpoint(const wire::CheckpointRequest &request) override {
    std::future<wire::CheckpointReply> reply =
        translated([&] { return cluster_->checkpoint(request); });
    return std::async(std::launch::deferred,
                      [reply = std::move(reply)]() mutable {
                        return translated([&] { return reply.get(); });
                      });
  }
  void free(const std::vector<int64_t> &ranks,
            const std::vector<Handle> &hs) override {
    translated([&] { cluster_->free(ranks, hs); });
  }
  void synchronize() override {
    translated([&] { cluster_->synchronize(); });
  }
  bool anyRankLost(const std::vector<int64_t> &ranks) const override {
    return cluster_->anyRankLost(ranks);
  }
  void shutdown() override {
    translated([&] { cluster_->shutdown(); });
  }
  std::vector<int> restart(std::chrono::milliseconds idleBound) override {
    return translated(
        [&] { return cluster_->restart(idleBound).replacedRanks; });
  }
  bool hasDeadWorker() const override { return cluster_->hasDeadWorker(); }
  uint64_t messagesSent() const override { return cluster_->messagesSent(); }
  uint64_t roundTrips() const override { return cluster_->roundTrips(); }

private:
  std::unique_ptr<rt::Cluster> cluster_;
};

} // namespace

std::unique_ptr<Backend> makeClusterBackend(const ClusterConfig &c) {
  rt::ClusterOptions o;
  o.worldSize = c.worldSize;
  o.numProcesses = c.numProcesses;
  o.workerExecutable = c.workerExecutable;
  o.workerAddresses = c.workerAddresses;
  o.listenAddress = c.listenAddress;
  if (c.admissionTimeoutMs > 0)
    o.admissionTimeout = std::chrono::milliseconds(c.admissionTimeoutMs);
  o.token = c.token;
  o.curveSecretKey = c.curveSecretKey;
  o.curveWorkerPublicKeys = c.curveWorkerPublicKeys;
  if (c.heartbeatIntervalMs > 0)
    o.heartbeatInterval = std::chrono::milliseconds(c.heartbeatIntervalMs);
  if (c.peerTimeoutMs > 0)
    o.peerTimeout = std::chrono::milliseconds(c.peerTimeoutMs);
  if (c.collectiveTimeoutMs > 0)
    o.collectiveTimeout = std::chrono::milliseconds(c.collectiveTimeoutMs);
  return std::make_unique<ClusterBackend>(o);
}

} // namespace dtorch::client
