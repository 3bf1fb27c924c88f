//===- SimulatedBackend.cpp - workers that answer at once -----------------===//
//
// A backend for measuring the controller alone at any world size: nothing
// runs. It keeps what a fetch must answer and nothing per rank that a step
// would touch: per program, its class programs' output buffer specs and the
// mesh's ranks (and why validation refused it); per handle, where its pieces
// come from (a program's output, or put values). So a run costs the same
// whatever the world size (one counted message per simulated process), and a
// fetch returns zeros of the piece's local shape and dtype.
//
//===----------------------------------------------------------------------===//
#include "dtorch/Client/Backend.h"
#include "dtorch/Client/Errors.h"
#include "dtorch/runtime/MeshContext.h"
#include "dtorch/runtime/ProgramValidator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <unordered_map>

namespace dtorch::client {
namespace {

class SimulatedBackend : public Backend {
public:
  SimulatedBackend(int worldSize, int numProcesses)
      : worldSize_(worldSize), processOf_(static_cast<size_t>(worldSize), 0),
        stamp_(static_cast<size_t>(std::max(1, numProcesses)), 0) {
    if (worldSize < 1 || numProcesses < 1 || numProcesses > worldSize)
      throw ValueError("simulated backend: need 1 <= num_processes <= "
                       "world_size");
    // Contiguous rank blocks, as the embedded cluster lays them out.
    int first = 0;
    for (int p = 0; p < numProcesses; ++p) {
      int n = worldSize / numProcesses + (p < worldSize % numProcesses);
      for (int r = 0; r < n; ++r)
        processOf_[static_cast<size_t>(first + r)] = p;
      first += n;
    }
  }

  int worldSize() const override { return worldSize_; }
  std::string hostOf(int) const override { return "simulated"; }

  void uploadPrograms(uint64_t id, const std::vector<wire::Program> &programs,
                      const std::vector<int64_t> &meshRanks) override {
    // One message per process, as the cluster sends them.
    countMessages(meshRanks);
    Program &p = programs_[id];
    p = Program();
    try {
      if (programs.empty())
        throw rt::RuntimeError("an upload without programs");
      std::vector<int64_t> meshShape(programs[0].mesh_shape().begin(),
                                     programs[0].mesh_shape().end());
      p.mesh = std::make_shared<const rt::MeshRanks>(meshShape, meshRanks);
      for (const wire::Program &program : programs) {
        // Where each class runs is all a fetch needs of it (no copy of the
        // instructions).
        wire::Program &where = p.classes.emplace_back();
        *where.mutable_positions() = program.positions();
        std::vector<wire::TensorSpec> specs;
        for (int buffer : program.outputs())
          if (buffer >= 0 && buffer < program.buffers_size())
            specs.push_back(program.buffers(buffer));
        p.outputs.push_back(std::move(specs));
        // A plan check that costs the same at any world size: each class
        // program is resolved and validated for the first rank it runs on.
        if (program.positions_size() == 0)
          throw rt::RuntimeError("a class program that runs nowhere");
        const auto &lo = program.positions(0).lo();
        std::vector<int64_t> coords(lo.begin(), lo.end());
        int64_t position = 0;
        for (size_t a = 0; a < coords.size(); ++a)
          position = position * meshShape[a] + coords[a];
        int64_t rank = p.mesh->rankAt(position);
        rt::RankContext context = rt::RankContext::of(p.mesh, rank);
        if (rt::rankIndependent(program)) {
          // Its own resolution: checked without a copy (as workers do).
          rt::checkClassProgramFor(program, context);
          rt::validateProgram(program, static_cast<int>(rank));
        } else {
          rt::validateProgram(rt::resolveForRank(program, context),
                              static_cast<int>(rank));
        }
      }
    } catch (const std::exception &e) {
      p.invalid = e.what();
    }
  }

  using Backend::free;
  using Backend::run;
  void run(const std::vector<int64_t> &ranks, uint64_t id,
           const std::vector<Handle> &inputs,
           const std::vector<Handle> &outputs,
           const std::vector<int64_t> &) override {
    countMessages(ranks);
    std::string error;
    auto it = programs_.find(id);
    if (it == programs_.end()) {
      error = "unknown program id " + std::to_string(id);
    } else if (!it->second.invalid.empty()) {
      error = it->second.invalid;
    }
    for (Handle in : inputs)
      if (error.empty())
        if (auto v = values_.find(in); v != values_.end() && v->second.poison)
          error = v->second.error; // the root cause travels down the chain
    for (size_t k = 0; k < outputs.size(); ++k) {
      Value &v = values_[outputs[k]];
      v = Value();
      v.programId = id;
      v.output = static_cast<int>(k);
      v.poison = !error.empty();
      v.error = error;
    }
  }

  void put(int rank, Handle handle, const rt::Tensor &value) override {
    check(rank);
    ++sent_;
    Value &v = values_[handle];
    if (v.programId != 0 || v.poison)
      v = Value();
    v.put[rank] = wire::TensorSpec();
    v.put[rank].set_dtype(value.dtype());
    for (int64_t d : value.shape())
      v.put[rank].add_shape(d);
  }

  std::future<rt::Tensor> fetch(int rank, Handle handle) override {
    ++sent_;
    ++roundTrips_;
    std::promise<rt::Tensor> promise;
    try {
      rt::Tensor zeros = rt::Tensor::emptyLike(specOf(rank, handle));
      std::memset(zeros.data(), 0, zeros.nbytes());
      promise.set_value(std::move(zeros));
    } catch (const std::exception &e) {
      promise.set_exception(
          std::make_exception_ptr(WorkerError(rank, "simulated", e.what())));
    }
    return promise.get_future();
  }

  /// Nothing is held anywhere: the table is unknown (`known = false`, zero
  /// counts), answered at once like every request here.
  std::future<rt::MemoryStats> memoryStats(int rank) override {
    check(rank);
    ++sent_;
    ++roundTrips_;
    rt::MemoryStats stats;
    stats.rank = rank;
    stats.known = false;
    std::promise<rt::MemoryStats> promise;
    promise.set_value(std::move(stats));
    return promise.get_future();
  }

  /// Nothing runs here: no rank spans (`supported = false`).
  std::future<rt::TraceChunk> trace(int rank, rt::TraceAction, size_t,
                                    size_t) override {
    check(rank);
    ++sent_;
    ++roundTrips_;
    rt::TraceChunk chunk;
    chunk.rank = rank;
    chunk.supported = false;
    chunk.clockNs = rt::traceClockNs();
    std::promise<rt::TraceChunk> promise;
    promise.set_value(std::move(chunk));
    return promise.get_future();
  }

  void free(const std::vector<int64_t> &ranks,
            const std::vector<Handle> &handles) override {
    countMessages(ranks);
    for (Handle h : handles)
      values_.erase(h); // the controller frees a handle on all its ranks
  }

  void synchronize() override {
    sent_ += stamp_.size();
    ++roundTrips_;
  }
  void shutdown() override {}
  uint64_t messagesSent() const override { return sent_; }
  uint64_t roundTrips() const override { return roundTrips_; }

private:
  struct Program {
    std::shared_ptr<const rt::MeshRanks> mesh;
    std::vector<wire::Program> classes;                 // their positions only
    std::vector<std::vector<wire::TensorSpec>> outputs; // by class
    std::string invalid; // why validation refused the upload
  };
  struct Value {
    uint64_t programId = 0; // 0: put
    int output = 0;
    bool poison = false;
    std::string error;
    std::unordered_map<int, wire::TensorSpec> put; // rank -> spec
  };

  void check(int rank) const {
    if (rank < 0 || rank >= worldSize_)
      throw rt::RuntimeError("no rank " + std::to_string(rank));
  }
  /// One message per distinct process among `ranks`.
  void countMessages(const std::vector<int64_t> &ranks) {
    ++epoch_;
    for (int64_t r : ranks) {
      check(static_cast<int>(r));
      uint64_t &seen = stamp_[static_cast<size_t>(processOf_[r])];
      if (seen != epoch_) {
        seen = epoch_;
        ++sent_;
      }
    }
  }
  const wire::TensorSpec &specOf(int rank, Handle handle) const {
    check(rank);
    auto it = values_.find(handle);
    if (it == values_.end())
      throw rt::RuntimeError("rank " + std::to_string(rank) +
                             ": unknown tensor handle " +
                             std::to_string(handle));
    const Value &v = it->second;
    if (v.poison)
      throw rt::RuntimeError(v.error);
    if (v.programId == 0) {
      auto put = v.put.find(rank);
      if (put == v.put.end())
        throw rt::RuntimeError("rank " + std::to_string(rank) +
                               ": unknown tensor handle " +
                               std::to_string(handle));
      return put->second;
    }
    const Program &program = programs_.at(v.programId);
    int64_t position = program.mesh ? program.mesh->positionOf(rank) : -1;
    int index = -1;
    if (position >= 0) {
      std::vector<const wire::Program *> classes;
      for (const wire::Program &c : program.classes)
        classes.push_back(&c);
      index = rt::programIndexAt(
          classes, rt::positionCoords(program.mesh->shape(), position));
    }
    if (index < 0)
      throw rt::RuntimeError("rank " + std::to_string(rank) + ": program " +
                             std::to_string(v.programId) +
                             " was not uploaded to this rank");
    const auto &outputs = program.outputs[static_cast<size_t>(index)];
    if (static_cast<size_t>(v.output) >= outputs.size())
      throw rt::RuntimeError("rank " + std::to_string(rank) + ": program " +
                             std::to_string(v.programId) +
                             " was not uploaded to this rank");
    return outputs[static_cast<size_t>(v.output)];
  }

  int worldSize_;
  std::vector<int> processOf_;
  std::vector<uint64_t> stamp_;
  uint64_t epoch_ = 0;
  std::unordered_map<uint64_t, Program> programs_;
  std::unordered_map<Handle, Value> values_;
  std::atomic<uint64_t> sent_{0}, roundTrips_{0};
};

} // namespace

std::unique_ptr<Backend> makeSimulatedBackend(int worldSize, int numProcesses) {
  return std::make_unique<SimulatedBackend>(worldSize, numProcesses);
}

} // namespace dtorch::client
