//===- Controller.cpp - compiles segments and drives the workers ---------===//
#include "Controller.h"

#include "SegmentText.h"
#include "TensorData.h"
#include "dtorch/Compiler.h"

#include <future>

namespace dtorch::client {
namespace {

/// The program with this run's seeds: random kernels were compiled with their
/// slot number as seed.
wire::Program withSeeds(const wire::Program &compiled,
                        const std::vector<int64_t> &seeds) {
  wire::Program program = compiled;
  for (wire::Instruction &inst : *program.mutable_instructions()) {
    if (inst.op() != "random")
      continue;
    wire::Attr &seed = (*inst.mutable_attrs())["seed"];
    seed.set_i(seeds.at(static_cast<size_t>(seed.i())));
  }
  return program;
}

} // namespace

Controller::Controller(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)), thread_([this] { loop(); }) {}

Controller::~Controller() { shutdown(); }

void Controller::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_)
      return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
  backend_->shutdown();
}

void Controller::enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_)
      throw DTorchError("dtorch has been shut down");
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void Controller::loop() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty())
        return; // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void Controller::guarded(const std::function<void()> &fn) {
  try {
    fn();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_)
      error_ = std::current_exception();
  }
}

void Controller::rethrowIfFailed() {
  std::exception_ptr e;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(e, error_); // reported once; the session stays usable
  }
  if (e)
    std::rethrow_exception(e);
}

void Controller::addMesh(const Mesh &mesh) {
  enqueue([this, mesh] { meshes_[mesh.id] = mesh; });
}

void Controller::submit(Segment segment) {
  enqueue([this, seg = std::move(segment)]() mutable {
    guarded([&] {
      runSegment(seg);
      // Kept (not copied) for last_ir and explain, which compile it again
      // on demand: the compile of a cache miss records nothing.
      lastSegment_ = std::move(seg);
      lastStages_.clear();
    });
  });
}

void Controller::runSegment(const Segment &seg) {
  const Mesh &mesh = meshes_.at(seg.meshId);
  for (Handle h : seg.args)
    if (!live_.count(h))
      throw DTorchError("internal error: a segment reads tensor " +
                        std::to_string(h) + ", which is not on the workers");
  std::vector<int64_t> seeds;
  std::string text = segmentText(seg, mesh, "segment", &seeds);
  // The text names the mesh's shape, not its ranks; the programs are
  // uploaded with the mesh's ranks, so a mesh of the same shape over other
  // ranks, or in another order, needs its own upload (its own entry). The
  // ranks go into the text as a trailing comment, so the text stays the one
  // cache key (no copy of it on the cached path) and still compiles.
  text += "// ranks:";
  for (int64_t r : mesh.ranks)
    text.append(" ").append(std::to_string(r));
  text += "\n";
  const std::string &key = text;
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    ++compiles_;
    // The module is built from the segment's description (no text printed
    // or parsed), with random seeds as slot numbers, as in the key.
    std::vector<int64_t> slotSeeds;
    CompileResult result =
        compileGraph(segmentGraph(seg, mesh, "segment", &slotSeeds));
    if (!result.ok || result.functions.size() != 1)
      throw DTorchError("internal error: compiling a segment failed:\n" +
                        result.error + "\nsegment:\n" + text);
    Compiled c;
    c.programId = nextProgramId_++;
    c.programs = std::move(result.functions[0].programs);
    it = cache_.emplace(key, std::move(c)).first;
  }
  Compiled &c = it->second;
  if (seeds != c.seeds) {
    // Fresh random numbers: same compiled program, new seeds, uploaded again
    // under the same id (a worker runs its queue in order, so earlier runs
    // keep the seeds they were sent with).
    c.seeds = seeds;
    c.uploaded = false;
  }
  if (!c.uploaded) {
    // One upload per worker process: the class programs and the mesh's
    // ranks; each rank resolves its own program from its coordinates.
    if (seeds.empty()) {
      backend_->uploadPrograms(c.programId, c.programs, mesh.ranks);
    } else {
      std::vector<wire::Program> seeded;
      for (const wire::Program &p : c.programs)
        seeded.push_back(withSeeds(p, seeds));
      backend_->uploadPrograms(c.programId, seeded, mesh.ranks);
    }
    c.uploaded = true;
  }
  for (int64_t rank : mesh.ranks)
    backend_->run(static_cast<int>(rank), c.programId, seg.args, seg.results);
  for (Handle h : seg.results)
    live_[h] = seg.meshId;
  liveCount_ = live_.size();
  last_ = &c; // the submit task keeps `seg` as lastSegment_
}

void Controller::put(int meshId, Handle handle, rt::Tensor full,
                     Placements placements) {
  enqueue([this, meshId, handle, full = std::move(full), placements] {
    guarded([&] {
      const Mesh &mesh = meshes_.at(meshId);
      std::vector<rt::Tensor> pieces =
          scatterPieces(full, mesh.shape, placements);
      for (size_t p = 0; p < pieces.size(); ++p)
        backend_->put(static_cast<int>(mesh.ranks[p]), handle, pieces[p]);
      live_[handle] = meshId;
      liveCount_ = live_.size();
    });
  });
}

void Controller::free(int meshId, Handle handle) {
  enqueue([this, meshId, handle] {
    guarded([&] {
      const Mesh &mesh = meshes_.at(meshId);
      for (int64_t r : mesh.ranks)
        backend_->free(static_cast<int>(r), {handle});
      live_.erase(handle);
      liveCount_ = live_.size();
    });
  });
}

std::vector<rt::Tensor> Controller::fetchPieces(int meshId, Handle handle) {
  return fetchPiecesAsync(meshId, handle).get();
}

std::future<std::vector<rt::Tensor>>
Controller::fetchPiecesAsync(int meshId, Handle handle) {
  using PieceFutures = std::vector<std::future<rt::Tensor>>;
  auto promise = std::make_shared<std::promise<PieceFutures>>();
  std::future<PieceFutures> requested = promise->get_future();
  enqueue([this, meshId, handle, promise] {
    try {
      PieceFutures futures;
      for (int64_t r : meshes_.at(meshId).ranks)
        futures.push_back(backend_->fetch(static_cast<int>(r), handle));
      promise->set_value(std::move(futures));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  // Deferred: the waiting happens in the thread that calls get().
  return std::async(
      std::launch::deferred,
      [this](std::future<PieceFutures> requested) {
        PieceFutures futures = requested.get();
        std::vector<rt::Tensor> pieces;
        std::exception_ptr firstError;
        for (auto &f : futures) {
          try {
            pieces.push_back(f.get());
          } catch (...) {
            if (!firstError)
              firstError = std::current_exception();
          }
        }
        rethrowIfFailed();
        if (firstError)
          std::rethrow_exception(firstError);
        return pieces;
      },
      std::move(requested));
}

void Controller::synchronize() {
  auto promise = std::make_shared<std::promise<void>>();
  auto done = promise->get_future();
  enqueue([this, promise] {
    try {
      backend_->synchronize();
      promise->set_value();
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  done.get();
  rethrowIfFailed();
}

CompileResult Controller::recompileLast(const CompileOptions &options) {
  std::vector<int64_t> slotSeeds;
  CompileResult result =
      compileGraph(segmentGraph(lastSegment_, meshes_.at(lastSegment_.meshId),
                                "segment", &slotSeeds),
                   options);
  if (!result.ok)
    throw DTorchError("internal error: compiling the last segment failed:\n" +
                      result.error);
  return result;
}

std::optional<std::vector<RedistributionExplanation>>
Controller::lastExplanation() {
  using Result = std::optional<std::vector<RedistributionExplanation>>;
  auto promise = std::make_shared<std::promise<Result>>();
  auto result = promise->get_future();
  enqueue([this, promise] {
    try {
      if (!last_)
        return promise->set_value(std::nullopt);
      if (!last_->explanation) {
        // Explained on demand, once per cached program.
        CompileOptions options;
        options.explain = true;
        last_->explanation = recompileLast(options).explanations;
      }
      promise->set_value(last_->explanation);
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return result.get();
}

std::string Controller::lastIr(const std::string &stage) {
  using Stages = std::vector<std::pair<std::string, std::string>>;
  auto promise = std::make_shared<std::promise<Stages>>();
  auto result = promise->get_future();
  enqueue([this, promise] {
    try {
      if (!last_)
        return promise->set_value({});
      if (lastStages_.empty()) {
        // The pipeline runs again with the IR printed at each stage
        // boundary; kept until the next segment runs.
        CompileOptions options;
        options.recordStages = true;
        lastStages_ = recompileLast(options).stages;
      }
      promise->set_value(lastStages_);
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  Stages stages = result.get();
  for (const auto &[name, ir] : stages)
    if (name == stage)
      return ir;
  std::string known;
  for (const auto &[name, ir] : stages)
    known += (known.empty() ? "" : ", ") + name;
  if (stages.empty())
    throw ValueError("no segment has been compiled yet");
  throw ValueError("unknown stage '" + stage + "' (expected one of " + known +
                   ")");
}

} // namespace dtorch::client
