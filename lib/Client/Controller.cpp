//===- Controller.cpp - compiles segments and drives the workers ---------===//
#include "Controller.h"

#include "SegmentKey.h"
#include "SegmentText.h"
#include "TensorData.h"
#include "dtorch/Compiler.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <pthread.h>
#include <string_view>

namespace dtorch::client {
namespace {

/// Random kernels were compiled with their seed slot as `seed` (the segment
/// text numbers them): they read their seed from the run instead.
void markSeedSlots(wire::Program &program) {
  for (wire::Instruction &inst : *program.mutable_instructions()) {
    if (inst.op() != "random")
      continue;
    auto &attrs = *inst.mutable_attrs();
    auto it = attrs.find("seed");
    if (it == attrs.end())
      continue;
    attrs["seed_slot"].set_i(it->second.i());
    attrs.erase("seed");
  }
}

} // namespace

// Also read by ControllerSpeculation.cpp.
std::atomic<uint64_t> hashMask{~0ULL};

namespace {

/// Program ids start at 1: a run under 0 runs nothing (a lost mesh's).
constexpr uint64_t kNoProgram = 0;

/// A span of the controller thread, recorded only while `trace` records.
std::optional<rt::TraceSpan>
controllerSpan(rt::TraceBuffer *trace, const char *category, const char *name) {
  std::optional<rt::TraceSpan> span;
  if (trace && trace->enabled())
    span.emplace(trace, rt::TraceLane::Controller, category, name);
  return span;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

} // namespace

Controller::Controller(std::unique_ptr<Backend> backend,
                       std::string programCacheDir)
    : backend_(std::move(backend)), disk_(std::move(programCacheDir)),
      thread_([this] { loop(); }) {}

void Controller::setHashMaskForTesting(uint64_t mask) { hashMask = mask; }

ControllerStats Controller::stats() const {
  std::lock_guard<std::mutex> lock(statsMutex_);
  return stats_;
}

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

bool Controller::batchFreesFromEnvironment() {
  const char *value = std::getenv("DTORCH_BATCH_FREES");
  return !(value && std::string_view(value) == "0");
}

bool Controller::inlineRequestsFromEnvironment() {
  const char *value = std::getenv("DTORCH_INLINE_CONTROLLER");
  return !(value && std::string_view(value) == "0");
}

bool Controller::inlineSyncFromEnvironment() {
  const char *value = std::getenv("DTORCH_INLINE_SYNC");
  return !(value && std::string_view(value) == "0");
}

bool Controller::recycleNodesFromEnvironment() {
  const char *value = std::getenv("DTORCH_RECYCLE_NODES");
  return !(value && std::string_view(value) == "0");
}

void Controller::takeSpareNodes(std::vector<Node> &spare) {
  if (!recycleNodes_)
    return;
  std::lock_guard<std::mutex> lock(spareMutex_);
  if (!spareReady_)
    return;
  spare = std::move(spareNodes_);
  spareNodes_ = {};
  spareReady_ = false;
}

void Controller::enqueue(std::function<void()> task) {
  enqueueMayInline(false, std::move(task));
}

void Controller::enqueueMayInline(bool mayInline, std::function<void()> task) {
  if (mayInline && inlineRequests_ && beginInline()) {
    struct End {
      Controller *controller;
      ~End() { controller->endInline(); }
    } end{this};
    runInline(task);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_)
      throw DTorchError("dtorch has been shut down");
    // The frees made before this request go first.
    if (!pendingFrees_.empty())
      queuePendingFreesLocked();
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

bool Controller::beginInline() {
  // An automatic restart (which waits for the workers) stays on the
  // controller thread.
  if (autoRestart_ && backend_->hasDeadWorker())
    return false;
  std::vector<std::pair<int, Handle>> frees;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_)
      throw DTorchError("dtorch has been shut down");
    if (busy_ || !queue_.empty())
      return false;
    busy_ = true;
    frees.swap(pendingFrees_);
  }
  if (!frees.empty()) {
    try {
      runInline([&] { guarded([&] { freeNow(frees); }); });
    } catch (...) {
      endInline();
      throw;
    }
  }
  return true;
}

void Controller::endInline() {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    busy_ = false;
    wake = stop_ || !queue_.empty();
  }
  // Another thread queued a request meanwhile: the controller thread,
  // which waited for this one, takes it.
  if (wake)
    cv_.notify_one();
}

void Controller::runInline(const std::function<void()> &task) {
  handleRequest(task, /*inlined=*/true);
}

void Controller::handleRequest(const std::function<void()> &task,
                               bool inlined) {
  auto start = std::chrono::steady_clock::now();
  autoRestartIfNeeded();
  task();
  double seconds = secondsSince(start);
  std::lock_guard<std::mutex> lock(statsMutex_);
  stats_.busySeconds += seconds;
  ++stats_.requests;
  if (inlined)
    ++stats_.inlineRequests;
}

void Controller::queuePendingFreesLocked() {
  queue_.push_back([this, frees = std::move(pendingFrees_)] {
    guarded([&] { freeNow(frees); });
  });
  pendingFrees_ = {};
}

void Controller::freeNow(const std::vector<std::pair<int, Handle>> &frees) {
  std::optional<rt::TraceSpan> span =
      controllerSpan(trace_, "controller", "free");
  if (span)
    span->setDetail(std::to_string(frees.size()) + " tensor(s)");
  // One Backend::free per mesh (a step's frees are usually all on one),
  // in pieces well under the workers' bound on handles per message.
  constexpr size_t kMaxPerMessage = 1 << 16;
  std::vector<std::pair<int, std::vector<Handle>>> byMesh;
  for (const auto &[meshId, handle] : frees) {
    int id = meshId;
    auto it = std::find_if(byMesh.begin(), byMesh.end(),
                           [id](const auto &m) { return m.first == id; });
    if (it == byMesh.end()) {
      byMesh.emplace_back(id, std::vector<Handle>());
      it = std::prev(byMesh.end());
    }
    it->second.push_back(handle);
  }
  std::exception_ptr firstError;
  for (auto &[meshId, handles] : byMesh) {
    const std::vector<int64_t> &ranks = meshes_.at(meshId).ranks;
    for (size_t start = 0; start < handles.size(); start += kMaxPerMessage) {
      size_t end = std::min(handles.size(), start + kMaxPerMessage);
      try {
        if (start == 0 && end == handles.size())
          backend_->free(ranks, handles);
        else
          backend_->free(ranks, std::vector<Handle>(handles.begin() + start,
                                                    handles.begin() + end));
      } catch (...) {
        // The other meshes' frees still go out; the first error is kept.
        if (!firstError)
          firstError = std::current_exception();
      }
    }
    for (Handle handle : handles) {
      live_.erase(handle);
      lost_.erase(handle);
      failed_.erase(handle);
    }
  }
  liveCount_ = live_.size();
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    ++stats_.freeRequests;
    stats_.frees += frees.size();
  }
  if (firstError)
    std::rethrow_exception(firstError);
}

void Controller::loop() {
  // Named for per-thread CPU accounting (bench/step_thread_cpu.py).
  pthread_setname_np(pthread_self(), "dtorch-ctrl");
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // A caller handling a request inline (beginInline) finishes first.
      cv_.wait(lock, [&] { return !busy_ && (stop_ || !queue_.empty()); });
      if (queue_.empty())
        return; // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    handleRequest(task, /*inlined=*/false);
    std::lock_guard<std::mutex> lock(mutex_);
    busy_ = false;
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
  enqueue([this, mesh] {
    meshes_[mesh.id] = mesh;
    meshKeys_[mesh.id] = meshHash(mesh);
  });
}

void Controller::submit(Segment segment) {
  // A segment that runs from the cache as it is costs one lookup and one
  // message: handled on the calling thread when the controller thread is
  // idle (a compile or an upload stays on the controller thread, so the
  // client records on meanwhile).
  if (inlineRequests_ && beginInline()) {
    struct End {
      Controller *controller;
      ~End() { controller->endInline(); }
    } end{this};
    if (runsFromCache(segment)) {
      runInline([&] { handleSubmit(segment); });
      return;
    }
  }
  enqueue([this, seg = std::move(segment)]() mutable { handleSubmit(seg); });
}

void Controller::handleSubmit(Segment &seg) {
  guarded([&] {
    try {
      runSegment(seg);
    } catch (...) {
      markFailed(seg, std::current_exception());
      throw;
    }
  });
}

bool Controller::runsFromCache(const Segment &seg) {
  auto meshIt = meshes_.find(seg.meshId);
  auto keyIt = meshKeys_.find(seg.meshId);
  if (meshIt == meshes_.end() || keyIt == meshKeys_.end())
    return false;
  const Mesh &mesh = meshIt->second;
  auto bucket =
      cache_.find(mixHash(seg.structureHash & hashMask, keyIt->second));
  if (bucket == cache_.end())
    return false;
  // The structure is compared by runSegment (a collision runs on the
  // controller thread at worst, where it compiles).
  for (const auto &entry : bucket->second)
    if ((entry->mesh.id == mesh.id || sameMesh(entry->mesh, mesh)) &&
        entry->structure.structureHash == seg.structureHash &&
        entry->structure.nodes.size() == seg.nodes.size())
      return entry->uploaded &&
             (entry->fused || fusionTierFor(mesh) != FusionTier::FromSecondRun);
  return false;
}

void Controller::markFailed(const Segment &segment, std::exception_ptr error) {
  for (Handle r : segment.results)
    if (!live_.count(r) && !lost_.count(r))
      failed_[r] = error;
}

void Controller::runSegment(Segment &seg) {
  auto start = std::chrono::steady_clock::now();
  std::optional<rt::TraceSpan> segmentSpan =
      controllerSpan(trace_, "segment", "segment");
  std::optional<rt::TraceSpan> lookupSpan =
      controllerSpan(trace_, "controller", "cache lookup");
  const Mesh &mesh = meshes_.at(seg.meshId);
  if (!lost_.empty())
    for (Handle h : seg.args)
      if (auto it = lost_.find(h); it != lost_.end()) {
        // Its results can never exist either.
        LostValue lost = it->second;
        for (Handle r : seg.results)
          lost_[r] = lost;
        throw WorkerError(lost.rank, lost.host, lost.message);
      }
  if (!failed_.empty())
    for (Handle h : seg.args)
      if (auto it = failed_.find(h); it != failed_.end())
        std::rethrow_exception(it->second); // its results fail the same way
  for (Handle h : seg.args)
    if (!live_.count(h))
      throw DTorchError("internal error: a segment reads tensor " +
                        std::to_string(h) + ", which is not on the workers");
  if (speculation_.id && !lost_.empty())
    dropSpeculationNow();
  if (backend_->anyRankLost(mesh.ranks)) {
    // A worker of this mesh is lost: nothing is compiled or uploaded, and
    // the backend marks the results lost (a fetch names the lost worker)
    // instead of running anything (docs/guide/faults.md).
    backend_->run(mesh.ranks, kNoProgram, seg.args, seg.results, seg.seeds);
    for (Handle h : seg.results)
      live_[h] = seg.meshId;
    liveCount_ = live_.size();
    return;
  }
  uint64_t key = mixHash(seg.structureHash & hashMask, meshKeys_.at(mesh.id));
  std::vector<std::unique_ptr<Compiled>> &bucket = cache_[key];
  Compiled *c = nullptr;
  for (const auto &entry : bucket)
    if ((entry->mesh.id == mesh.id || sameMesh(entry->mesh, mesh)) &&
        sameStructure(entry->structure, seg)) {
      c = entry.get();
      break;
    }
  bool hit = c != nullptr;
  lookupSpan.reset();
  if (segmentSpan)
    segmentSpan->setDetail(std::to_string(seg.nodes.size()) + " ops, " +
                           (hit ? "cache hit" : "cache miss"));
  if (!hit) {
    std::optional<rt::TraceSpan> compileSpan =
        controllerSpan(trace_, "controller", "compile");
    bucket.push_back(obtain(seg, mesh));
    c = bucket.back().get();
  } else if (!c->fused && fusionTierFor(mesh) == FusionTier::FromSecondRun) {
    std::optional<rt::TraceSpan> compileSpan =
        controllerSpan(trace_, "controller", "compile with fusion");
    promoteToFused(*c);
  }
  last_ = c;
  // Sends and receives between meshes live in different segments, compiled
  // apart: paired here, in run order, before anything is sent.
  if (c->movesOf != c->programId) {
    c->moves = MoveLedger::movesOf(c->programs, mesh.ranks,
                                   "program " + std::to_string(c->programId));
    c->movesOf = c->programId;
  }
  moves_.admit(c->moves);
  if (!c->uploaded) {
    std::optional<rt::TraceSpan> uploadSpan =
        controllerSpan(trace_, "controller", "upload");
    if (uploadSpan) {
      int64_t bytes = 0;
      for (const wire::Program &p : c->programs)
        bytes += static_cast<int64_t>(p.ByteSizeLong());
      uploadSpan->setBytes(bytes);
    }
    // One upload per worker process: the class programs and the mesh's
    // ranks; each rank resolves its own program from its coordinates.
    if (mesh.device == "cpu")
      backend_->uploadPrograms(c->programId, c->programs, mesh.ranks);
    else
      backend_->uploadProgramsOnDevice(c->programId, c->programs, mesh.ranks,
                                       mesh.device, mesh.deviceOrdinals);
    c->uploaded = true;
  }
  {
    std::optional<rt::TraceSpan> runSpan =
        controllerSpan(trace_, "controller", "run send");
    if (runSpan)
      runSpan->setDetail("program id " + std::to_string(c->programId) + " on " +
                         std::to_string(mesh.ranks.size()) + " rank(s)");
    uint64_t speculation =
        speculation_.id ? confirmSpeculation(seg, c->programId) : 0;
    if (speculation)
      backend_->runSpeculated(mesh.ranks, c->programId, seg.args, seg.results,
                              seg.seeds, seg.donated, speculation);
    else if (seg.donated.empty())
      backend_->run(mesh.ranks, c->programId, seg.args, seg.results, seg.seeds);
    else
      backend_->runDonating(mesh.ranks, c->programId, seg.args, seg.results,
                            seg.seeds, seg.donated);
  }
  for (Handle h : seg.results)
    live_[h] = seg.meshId;
  liveCount_ = live_.size();
  double seconds = secondsSince(start);
  if (hit && recycleNodes_ && !seg.nodes.empty()) {
    // Once the run is sent: the session records its next segments into
    // these nodes (a miss keeps them in the cache entry instead). Only this
    // thread makes spare nodes ready, so a batch not ready now stays so.
    bool ready;
    {
      std::lock_guard<std::mutex> lock(spareMutex_);
      ready = spareReady_;
    }
    if (!ready) {
      // What the session would otherwise free while it records: the weak
      // references to the results (the last one frees a dropped tensor's
      // block) and the attributes (their vectors keep their capacity).
      for (Node &n : seg.nodes) {
        n.owner.reset();
        n.attrs.clear();
      }
      std::lock_guard<std::mutex> lock(spareMutex_);
      spareNodes_ = std::move(seg.nodes);
      seg.nodes.clear();
      spareReady_ = true;
    }
  }
  std::lock_guard<std::mutex> lock(statsMutex_);
  ++stats_.segments;
  if (hit) {
    ++stats_.memoryHits;
    stats_.hitSeconds += seconds;
    stats_.lastHitSeconds = seconds;
  }
}

std::unique_ptr<Controller::Compiled> Controller::obtain(Segment &seg,
                                                         const Mesh &mesh) {
  auto c = std::make_unique<Compiled>();
  c->programId = nextProgramId_++;
  // The nodes move in once the programs exist (they are not needed to run).
  auto keepNodes = [&] {
    c->structure.nodes = std::move(seg.nodes);
    seg.nodes.clear();
    // A segment recorded into recycled storage may have room for many
    // more nodes than it holds: the entry keeps only what it needs.
    if (c->structure.nodes.capacity() > 2 * c->structure.nodes.size())
      c->structure.nodes.shrink_to_fit();
    for (Node &n : c->structure.nodes)
      n.owner.reset();
  };
  c->structure.meshId = seg.meshId;
  c->structure.args = seg.args;
  c->structure.argMetas = seg.argMetas;
  c->structure.results = seg.results;
  c->structure.resultNodes = seg.resultNodes;
  c->structure.structureHash = seg.structureHash;
  c->mesh = mesh;
  // The first compile generates fused kernels only when asked from the
  // first run; the disk may hold a segment already compiled with them.
  bool fuse = fusionTierFor(mesh) == FusionTier::FromFirstRun;
  uint64_t diskKey = 0;
  std::string structure;
  if (disk_.enabled()) {
    auto start = std::chrono::steady_clock::now();
    structure = structureBytes(seg, mesh);
    std::optional<std::vector<wire::Program>> programs;
    if (fusionTierFor(mesh) != FusionTier::Never) {
      programs = disk_.load(diskKeyOf(seg, mesh, true), structure);
      c->fused = programs && !programs->empty();
    }
    if (!c->fused && !fuse)
      programs = disk_.load(diskKeyOf(seg, mesh, false), structure);
    diskKey = diskKeyOf(seg, mesh, fuse);
    bool found = programs && !programs->empty();
    if (found)
      c->programs = std::move(*programs);
    std::lock_guard<std::mutex> lock(statsMutex_);
    stats_.diskSeconds += secondsSince(start);
    if (found) {
      ++stats_.diskHits;
      keepNodes();
      return c;
    }
  }
  auto start = std::chrono::steady_clock::now();
  ++compiles_;
  compileInto(*c, seg, mesh, false, false, fuse);
  c->fused = fuse;
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    ++stats_.compiles;
    stats_.compileSeconds += secondsSince(start);
  }
  if (disk_.enabled()) {
    auto start = std::chrono::steady_clock::now();
    disk_.store(diskKey, structure, c->programs);
    std::lock_guard<std::mutex> lock(statsMutex_);
    stats_.diskSeconds += secondsSince(start);
  }
  keepNodes();
  return c;
}

Controller::FusionTier Controller::fusionTierFromEnvironment() {
  const char *value = std::getenv("DTORCH_FUSION");
  std::string v = value ? value : "";
  if (v == "0")
    return FusionTier::Never;
  if (v == "1")
    return FusionTier::FromFirstRun;
  return FusionTier::FromSecondRun;
}

uint64_t Controller::diskKeyOf(const Segment &seg, const Mesh &mesh,
                               bool fused) const {
  return mixHash(
      mixHash(mixHash(compilerVersionKey(), seg.structureHash), meshHash(mesh)),
      fused ? 2 : 1);
}

void Controller::promoteToFused(Compiled &c) {
  auto start = std::chrono::steady_clock::now();
  Compiled fresh;
  compileInto(fresh, c.structure, c.mesh, false, false, true);
  c.fused = true;
  bool generated = false;
  for (const wire::Program &p : fresh.programs)
    generated |= p.executables_size() > 0;
  // Nothing fused: the programs uploaded already are the same ones.
  if (generated) {
    // A new id: the workers keep the unfused programs under the old one.
    c.programId = nextProgramId_++;
    c.programs = std::move(fresh.programs);
    c.uploaded = false;
    // The IR stages shown so far were those of the unfused compile.
    c.hasStages = false;
    c.stages.clear();
  }
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    ++stats_.fusedRecompiles;
    stats_.fusedRecompileSeconds += secondsSince(start);
  }
  if (disk_.enabled()) {
    auto diskStart = std::chrono::steady_clock::now();
    disk_.store(diskKeyOf(c.structure, c.mesh, true),
                structureBytes(c.structure, c.mesh), c.programs);
    std::lock_guard<std::mutex> lock(statsMutex_);
    stats_.diskSeconds += secondsSince(diskStart);
  }
}

void Controller::compileInto(Compiled &c, const Segment &seg, const Mesh &mesh,
                             bool withStages, bool withExplanation,
                             bool fused) {
  // The module is built from the segment's description (no text printed or
  // parsed); random ops get their slot number as seed.
  std::vector<int64_t> slots;
  CompileOptions options;
  options.recordStages = withStages;
  options.fuseElementwise = fused;
  // On a CUDA mesh the fused groups are generated as PTX for the GPU.
  if (mesh.device == "cuda")
    options.cudaArch = defaultCudaArch();
  options.explain = withExplanation;
  CompileResult result =
      compileGraph(segmentGraph(seg, mesh, "segment", &slots), options);
  if (!result.ok || result.functions.size() != 1)
    throw DTorchError("internal error: compiling a segment failed:\n" +
                      result.error + "\nsegment:\n" +
                      segmentText(seg, mesh, "segment"));
  c.programs = std::move(result.functions[0].programs);
  for (wire::Program &p : c.programs)
    markSeedSlots(p);
  c.stages = std::move(result.stages);
  c.explanation = std::move(result.explanations);
  c.hasExplanation = withExplanation;
  c.hasStages = withStages;
}

void Controller::ensureIr(Compiled &c, bool stages) {
  if (c.hasExplanation && (c.hasStages || !stages))
    return;
  // Compiled again for what it lacks (the uploaded programs stay): the IR
  // stages are printed only when asked (printing them costs more than the
  // compile on large meshes), the redistributions are explained only when
  // asked (a miss leaves both out), and programs from the disk have neither.
  Compiled fresh;
  compileInto(fresh, c.structure, c.mesh, stages, true, c.fused);
  {
    std::lock_guard<std::mutex> lock(statsMutex_);
    ++stats_.irRecompiles;
  }
  if (stages) {
    c.stages = std::move(fresh.stages);
    c.hasStages = true;
  }
  c.explanation = std::move(fresh.explanation);
  c.hasExplanation = true;
}

void Controller::put(int meshId, Handle handle, rt::Tensor full,
                     Placements placements) {
  // A small put (a batch) is encoded on the calling thread when the
  // controller thread is idle; a large one overlaps the client's work.
  bool small = full.nbytes() <= (size_t(1) << 20);
  enqueueMayInline(
      small, [this, meshId, handle, full = std::move(full), placements] {
        guarded([&] {
          std::optional<rt::TraceSpan> span =
              controllerSpan(trace_, "controller", "put");
          if (span)
            span->setBytes(static_cast<int64_t>(full.nbytes()));
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
  if (!batchFrees_) {
    enqueueMayInline(true, [this, meshId, handle] {
      guarded([&] { freeNow({{meshId, handle}}); });
    });
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (stop_)
    throw DTorchError("dtorch has been shut down");
  pendingFrees_.emplace_back(meshId, handle);
}

std::vector<rt::Tensor> Controller::fetchPieces(int meshId, Handle handle) {
  return fetchPiecesAsync(meshId, handle).get();
}

std::future<std::vector<rt::Tensor>>
Controller::fetchPiecesAsync(int meshId, Handle handle) {
  using PieceFutures = std::vector<std::future<rt::Tensor>>;
  auto promise = std::make_shared<std::promise<PieceFutures>>();
  std::future<PieceFutures> requested = promise->get_future();
  enqueueMayInline(true, [this, meshId, handle, promise] {
    std::optional<rt::TraceSpan> span =
        controllerSpan(trace_, "controller", "fetch request");
    try {
      if (auto lost = lost_.find(handle); lost != lost_.end())
        throw WorkerError(lost->second.rank, lost->second.host,
                          lost->second.message);
      if (auto failed = failed_.find(handle); failed != failed_.end())
        std::rethrow_exception(failed->second);
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
        PieceFutures futures;
        try {
          futures = requested.get();
        } catch (...) {
          // A failure of an earlier request is reported first (once).
          autoRestartBeforeReporting();
          rethrowIfFailed();
          throw;
        }
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
        if (trace_ && trace_->enabled()) {
          // When the last piece reached the waiting thread.
          rt::TraceEvent reply;
          reply.name = "fetch reply";
          reply.category = "fetch";
          reply.lane = rt::TraceLane::Replies;
          reply.startNs = reply.endNs = rt::traceClockNs();
          reply.bytes = 0;
          for (const rt::Tensor &piece : pieces)
            reply.bytes += static_cast<int64_t>(piece.nbytes());
          reply.detail = std::to_string(futures.size()) + " piece(s)" +
                         (firstError ? ", failed" : "");
          trace_->record(std::move(reply));
        }
        if (firstError)
          autoRestartBeforeReporting();
        rethrowIfFailed();
        if (firstError)
          std::rethrow_exception(firstError);
        return pieces;
      },
      std::move(requested));
}

std::future<std::vector<rt::MemoryStats>> Controller::memoryStatsAsync() {
  using StatsFutures = std::vector<std::future<rt::MemoryStats>>;
  auto promise = std::make_shared<std::promise<StatsFutures>>();
  std::future<StatsFutures> requested = promise->get_future();
  enqueueMayInline(true, [this, promise] {
    try {
      StatsFutures futures;
      for (int r = 0; r < backend_->worldSize(); ++r)
        futures.push_back(backend_->memoryStats(r));
      promise->set_value(std::move(futures));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return std::async(
      std::launch::deferred,
      [](std::future<StatsFutures> requested) {
        StatsFutures futures = requested.get();
        std::vector<rt::MemoryStats> stats;
        for (auto &f : futures)
          stats.push_back(f.get());
        return stats;
      },
      std::move(requested));
}

std::future<std::vector<wire::CheckpointReply>>
Controller::checkpointAsync(std::vector<wire::CheckpointRequest> requests,
                            std::vector<std::pair<Handle, int>> created) {
  using ReplyFutures = std::vector<std::future<wire::CheckpointReply>>;
  auto promise = std::make_shared<std::promise<ReplyFutures>>();
  std::future<ReplyFutures> requested = promise->get_future();
  enqueue([this, promise, requests = std::move(requests),
           created = std::move(created)] {
    std::optional<rt::TraceSpan> span =
        controllerSpan(trace_, "controller", "checkpoint");
    try {
      for (const auto &[handle, meshId] : created)
        live_[handle] = meshId;
      liveCount_ = live_.size();
      ReplyFutures futures;
      for (const wire::CheckpointRequest &request : requests)
        futures.push_back(backend_->checkpoint(request));
      promise->set_value(std::move(futures));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return std::async(
      std::launch::deferred,
      [](std::future<ReplyFutures> requested) {
        ReplyFutures futures = requested.get();
        std::vector<wire::CheckpointReply> replies;
        std::exception_ptr firstError;
        for (auto &f : futures) {
          try {
            replies.push_back(f.get());
          } catch (...) {
            if (!firstError)
              firstError = std::current_exception();
          }
        }
        if (firstError)
          std::rethrow_exception(firstError);
        return replies;
      },
      std::move(requested));
}

std::future<std::vector<rt::TraceChunk>>
Controller::traceAsync(rt::TraceAction action, size_t capacity,
                       size_t maxEvents) {
  using ChunkFutures = std::vector<std::future<rt::TraceChunk>>;
  auto promise = std::make_shared<std::promise<ChunkFutures>>();
  std::future<ChunkFutures> requested = promise->get_future();
  enqueue([this, promise, action, capacity, maxEvents] {
    try {
      ChunkFutures futures;
      for (int r = 0; r < backend_->worldSize(); ++r)
        futures.push_back(backend_->trace(r, action, capacity, maxEvents));
      promise->set_value(std::move(futures));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return std::async(
      std::launch::deferred,
      [](std::future<ChunkFutures> requested) {
        ChunkFutures futures = requested.get();
        std::vector<rt::TraceChunk> chunks;
        for (auto &f : futures)
          chunks.push_back(f.get());
        return chunks;
      },
      std::move(requested));
}

void Controller::synchronize() {
  auto syncWorkers = [this] {
    std::optional<rt::TraceSpan> span =
        controllerSpan(trace_, "controller", "synchronize");
    backend_->synchronize();
  };
  try {
    // With nothing queued and the controller thread idle, the caller waits
    // for the workers' replies itself: the thread that reads them wakes it
    // directly, without waking the controller thread on the way in and on
    // the way out (each a wake-up of an idle CPU after a long kernel).
    if (inlineSync_ && beginInline()) {
      struct End {
        Controller *controller;
        ~End() { controller->endInline(); }
      } end{this};
      runInline(syncWorkers);
    } else {
      auto promise = std::make_shared<std::promise<void>>();
      auto done = promise->get_future();
      enqueue([syncWorkers, promise] {
        try {
          syncWorkers();
          promise->set_value();
        } catch (...) {
          promise->set_exception(std::current_exception());
        }
      });
      done.get();
    }
    rethrowIfFailed();
  } catch (...) {
    autoRestartBeforeReporting();
    throw;
  }
}

std::optional<std::vector<RedistributionExplanation>>
Controller::lastExplanation() {
  using Result = std::optional<std::vector<RedistributionExplanation>>;
  auto promise = std::make_shared<std::promise<Result>>();
  auto result = promise->get_future();
  enqueue([this, promise] {
    try {
      if (!last_) {
        promise->set_value(std::nullopt);
        return;
      }
      ensureIr(*last_, false);
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
      if (!last_) {
        promise->set_value({});
        return;
      }
      ensureIr(*last_, true);
      promise->set_value(last_->stages);
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
