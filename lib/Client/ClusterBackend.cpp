//===- ClusterBackend.cpp - worker processes through rt::Cluster ---------===//
#include "dtorch/Client/Backend.h"
#include "dtorch/runtime/Cluster.h"

namespace dtorch::client {
namespace {

class ClusterBackend : public Backend {
public:
  explicit ClusterBackend(const rt::ClusterOptions &o) : cluster_(o) {}
  int worldSize() const override { return cluster_.worldSize(); }
  std::string hostOf(int rank) const override { return cluster_.hostOf(rank); }
  void uploadProgram(int rank, uint64_t id, const wire::Program &p) override {
    cluster_.uploadProgram(rank, id, p);
  }
  void run(int rank, uint64_t id, const std::vector<Handle> &in,
           const std::vector<Handle> &out) override {
    cluster_.run(rank, id, in, out);
  }
  void put(int rank, Handle h, const rt::Tensor &v) override {
    cluster_.put(rank, h, v);
  }
  std::future<rt::Tensor> fetch(int rank, Handle h) override {
    return cluster_.fetch(rank, h);
  }
  void free(int rank, const std::vector<Handle> &hs) override {
    cluster_.free(rank, hs);
  }
  void synchronize() override { cluster_.synchronize(); }
  void shutdown() override { cluster_.shutdown(); }
  uint64_t messagesSent() const override { return cluster_.messagesSent(); }
  uint64_t roundTrips() const override { return cluster_.roundTrips(); }

private:
  rt::Cluster cluster_;
};

} // namespace

std::unique_ptr<Backend> makeClusterBackend(const ClusterConfig &c) {
  rt::ClusterOptions o;
  o.worldSize = c.worldSize;
  o.numProcesses = c.numProcesses;
  o.workerExecutable = c.workerExecutable;
  o.workerAddresses = c.workerAddresses;
  o.token = c.token;
  return std::make_unique<ClusterBackend>(o);
}

} // namespace dtorch::client
