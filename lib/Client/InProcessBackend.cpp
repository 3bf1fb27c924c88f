//===- InProcessBackend.cpp - ranks as threads of this process -----------===//
//
// The fake backend of the controller: every rank is a thread with its own
// task queue and rt::RankState (the tensors, programs and poisons a worker
// keeps per rank, RankState.h); collectives go through the runtime's
// in-process hub. Used by tests and `dtorch.init(backend="inprocess")`; it
// runs the same programs, and fails the same way, as the worker processes.
//
//===----------------------------------------------------------------------===//
#include "dtorch/Client/Backend.h"
#include "dtorch/Client/Errors.h"
#include "dtorch/runtime/Blas.h"
#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/RankState.h"
#include "dtorch/runtime/Transport.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace dtorch::client {
namespace {

class RankThread {
public:
  RankThread(int rank, rt::FakeCollectiveHub &hub)
      : comm_(hub.communicator(rank)), state_(rank, comm_.get()),
        thread_([this] { loop(); }) {}
  ~RankThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
      ++pending_;
    }
    cv_.notify_all();
  }
  void waitIdle() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return pending_ == 0; });
  }

  /// Touch only from tasks posted to this rank.
  rt::RankState &state() { return state_; }

private:
  void loop() {
    while (true) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty())
          return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      try {
        task();
      } catch (...) {
        // Tasks report their own errors; never let one end the rank thread.
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --pending_;
      }
      idle_.notify_all();
    }
  }
  std::unique_ptr<rt::Communicator> comm_;
  rt::RankState state_;
  std::mutex mutex_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> tasks_;
  size_t pending_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

class InProcessBackend : public Backend {
public:
  explicit InProcessBackend(int worldSize)
      : hub_(worldSize, std::chrono::seconds(30)) {
    // Every rank is a thread of this process: each gets its share of the
    // cores for its GEMMs (or DTORCH_BLAS_THREADS).
    rt::blas::configureForHost(worldSize);
    for (int r = 0; r < worldSize; ++r)
      ranks_.push_back(std::make_unique<RankThread>(r, hub_));
  }
  ~InProcessBackend() override { shutdown(); }

  int worldSize() const override { return static_cast<int>(hub_.worldSize()); }
  std::string hostOf(int) const override { return "in-process"; }

  void uploadPrograms(uint64_t id, const std::vector<wire::Program> &programs,
                      const std::vector<int64_t> &meshRanks) override {
    auto shared = std::make_shared<const std::vector<wire::Program>>(programs);
    std::vector<int64_t> meshShape;
    if (!programs.empty())
      meshShape.assign(programs[0].mesh_shape().begin(),
                       programs[0].mesh_shape().end());
    // Checked once, shared by every rank's context.
    auto mesh = std::make_shared<const rt::MeshRanks>(meshShape, meshRanks);
    // What needs no rank to prepare is prepared once for all ranks.
    auto preparation = std::make_shared<rt::SharedPreparation>(shared);
    for (int64_t rank : meshRanks) {
      RankThread &t = at(static_cast<int>(rank));
      rt::RankContext context = rt::RankContext::of(mesh, rank);
      t.post([&t, id, shared, preparation, context] {
        std::vector<const wire::Program *> classes;
        for (const wire::Program &p : *shared)
          classes.push_back(&p);
        t.state().upload(id, classes, context, preparation.get());
      });
    }
  }

  using Backend::free;
  using Backend::run;
  void run(const std::vector<int64_t> &ranks, uint64_t id,
           const std::vector<Handle> &inputs,
           const std::vector<Handle> &outputs,
           const std::vector<int64_t> &seeds) override {
    runDonating(ranks, id, inputs, outputs, seeds, {});
  }
  void runDonating(const std::vector<int64_t> &ranks, uint64_t id,
                   const std::vector<Handle> &inputs,
                   const std::vector<Handle> &outputs,
                   const std::vector<int64_t> &seeds,
                   const std::vector<Handle> &donated) override {
    for (int64_t rank : ranks) {
      RankThread &t = at(static_cast<int>(rank));
      // A failure poisons the outputs; it surfaces when one is fetched.
      t.post([&t, id, inputs, outputs, seeds, donated] {
        t.state().run(id, inputs, outputs, seeds, donated);
      });
    }
  }

  void speculate(const std::vector<int64_t> &ranks, uint64_t speculationId,
                 uint64_t programId, const std::vector<Handle> &inputs,
                 bool extend, bool drop) override {
    for (int64_t rank : ranks) {
      RankThread &t = at(static_cast<int>(rank));
      t.post([&t, speculationId, programId, inputs, extend, drop] {
        if (drop)
          t.state().dropSpeculation(speculationId);
        else if (extend)
          t.state().extendSpeculation(speculationId, inputs);
        else
          t.state().speculate(speculationId, programId, inputs);
      });
    }
  }
  void runSpeculated(const std::vector<int64_t> &ranks, uint64_t id,
                     const std::vector<Handle> &inputs,
                     const std::vector<Handle> &outputs,
                     const std::vector<int64_t> &seeds,
                     const std::vector<Handle> &donated,
                     uint64_t speculationId) override {
    for (int64_t rank : ranks) {
      RankThread &t = at(static_cast<int>(rank));
      t.post([&t, id, inputs, outputs, seeds, donated, speculationId] {
        t.state().run(id, inputs, outputs, seeds, donated, speculationId);
      });
    }
  }

  void put(int rank, Handle h, const rt::Tensor &value) override {
    RankThread &t = at(rank);
    t.post([&t, h, value] { t.state().put(h, value); });
  }

  std::future<rt::Tensor> fetch(int rank, Handle h) override {
    ++roundTrips_;
    auto promise = std::make_shared<std::promise<rt::Tensor>>();
    RankThread &t = at(rank);
    t.post([&t, rank, h, promise] {
      try {
        promise->set_value(t.state().fetch(h).clone());
      } catch (const std::exception &e) {
        promise->set_exception(
            std::make_exception_ptr(WorkerError(rank, "in-process", e.what())));
      }
    });
    return promise->get_future();
  }

  std::future<rt::MemoryStats> memoryStats(int rank) override {
    ++roundTrips_;
    auto promise = std::make_shared<std::promise<rt::MemoryStats>>();
    RankThread &t = at(rank);
    // Behind the rank's earlier tasks, as a worker answers it.
    t.post([&t, promise] {
      try {
        promise->set_value(t.state().memoryStats());
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    });
    return promise->get_future();
  }

  std::future<rt::TraceChunk> trace(int rank, rt::TraceAction action,
                                    size_t capacity,
                                    size_t maxEvents) override {
    ++roundTrips_;
    auto promise = std::make_shared<std::promise<rt::TraceChunk>>();
    RankThread &t = at(rank);
    t.post([&t, promise, action, capacity, maxEvents] {
      try {
        rt::TraceChunk chunk = t.state().trace(action, capacity, maxEvents);
        chunk.host = rt::localHostName();
        promise->set_value(std::move(chunk));
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    });
    return promise->get_future();
  }

  std::future<wire::CheckpointReply>
  checkpoint(const wire::CheckpointRequest &request) override {
    ++roundTrips_;
    auto promise = std::make_shared<std::promise<wire::CheckpointReply>>();
    RankThread &t = at(request.rank());
    t.post([&t, promise, request] {
      promise->set_value(rt::serveCheckpointRequest(t.state(), request));
    });
    return promise->get_future();
  }

  void free(const std::vector<int64_t> &ranks,
            const std::vector<Handle> &handles) override {
    for (int64_t rank : ranks) {
      RankThread &t = at(static_cast<int>(rank));
      t.post([&t, handles] { t.state().free(handles); });
    }
  }

  void synchronize() override {
    ++roundTrips_;
    for (auto &t : ranks_)
      t->waitIdle();
  }
  void shutdown() override { ranks_.clear(); }
  uint64_t messagesSent() const override { return 0; }
  uint64_t roundTrips() const override { return roundTrips_; }

private:
  RankThread &at(int rank) {
    if (rank < 0 || rank >= (int)ranks_.size())
      throw rt::RuntimeError("no rank " + std::to_string(rank));
    return *ranks_[rank];
  }
  rt::FakeCollectiveHub hub_;
  std::vector<std::unique_ptr<RankThread>> ranks_;
  std::atomic<uint64_t> roundTrips_{0};
};

} // namespace

std::future<wire::CheckpointReply>
Backend::checkpoint(const wire::CheckpointRequest &) {
  throw DTorchError("this backend keeps no tensor values: checkpoints need "
                    "the cluster or in-process backend");
}

void Backend::uploadProgramsOnDevice(uint64_t,
                                     const std::vector<wire::Program> &,
                                     const std::vector<int64_t> &,
                                     const std::string &deviceType,
                                     const std::vector<int32_t> &) {
  throw DTorchError("this backend runs its ranks in the client process, on "
                    "the CPU: no '" +
                    deviceType + "' device");
}

std::unique_ptr<Backend> makeInProcessBackend(int worldSize) {
  return std::make_unique<InProcessBackend>(worldSize);
}

std::unique_ptr<Backend> makeBackend(const std::string &kind,
                                     const ClusterConfig &config) {
  if (kind == "inprocess")
    return makeInProcessBackend(config.worldSize);
  if (kind == "cluster")
    return makeClusterBackend(config);
  if (kind == "simulated")
    return makeSimulatedBackend(config.worldSize, config.numProcesses);
  throw std::invalid_argument("unknown backend '" + kind +
                              "' (expected cluster, inprocess or simulated)");
}

} // namespace dtorch::client
