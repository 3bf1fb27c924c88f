//===- Controller.h - compiles segments and drives the workers ----*- C++
//-*-===//
//
// Runs on its own thread: every request of the client is queued and handled
// in order, so the client never waits except for a fetch or synchronize.
// Compiled programs are cached by the segment's structural hash (built by
// the Session while recording, SegmentKey.h) and the mesh; a hit compares
// the structure (no text), and costs one "run" per worker process carrying
// the step's random seeds: nothing is patched or uploaded again. Misses look
// in the on-disk cache (ProgramDiskCache.h) before compiling.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "MoveLedger.h"
#include "ProgramDiskCache.h"
#include "dtorch/Client/Session.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

namespace dtorch::client {

class Controller {
public:
  /// `programCacheDir`: the on-disk program cache; empty: none.
  explicit Controller(std::unique_ptr<Backend> backend,
                      std::string programCacheDir = "");
  ~Controller();

  void addMesh(const Mesh &mesh);
  void submit(Segment segment);
  void put(int meshId, Handle handle, rt::Tensor full, Placements placements);
  /// Frees `handle` on the workers after every request queued before.
  /// Batched (unless DTORCH_BATCH_FREES=0): the handle joins a pending
  /// list, with no queued task and no wake-up of the controller thread, and
  /// every request queued later (a run, a fetch, a synchronize, ...) is
  /// preceded by one task that frees the whole list with one message per
  /// worker process. Every request thus sees every free made before it, as
  /// with a task per free, and the workers free a value before the next
  /// run they get (no run can need its memory earlier).
  void free(int meshId, Handle handle);
  /// Every mesh position's piece of `handle` (waits).
  std::vector<rt::Tensor> fetchPieces(int meshId, Handle handle);
  /// The same fetch, queued behind every request before it, without
  /// waiting: get() on the result waits for the pieces (from any thread) and
  /// throws the fetch's error, or an earlier request's failure not yet
  /// reported.
  std::future<std::vector<rt::Tensor>> fetchPiecesAsync(int meshId,
                                                        Handle handle);
  /// Waits until the workers have run every request before it; raises the
  /// first error of one. Handled on the calling thread when the controller
  /// is idle (beginInline), so that the I/O thread wakes the caller
  /// itself when the replies come.
  void synchronize();
  /// Speculation (docs/speculation.md, ControllerSpeculation.cpp), queued
  /// like any request: the segment being recorded on mesh `meshId` has so
  /// far matched the one whose structural hash is `predictedHash`; when that
  /// segment's program is cached and uploaded, every rank of the mesh starts
  /// running it on `args` (the recording's arguments so far, in order), or
  /// with `extend`, binds `args` as the next arguments of the speculation
  /// started. The submit of the segment confirms it when it runs that
  /// program with those leading arguments; anything else discards it.
  void speculate(int meshId, uint64_t predictedHash, std::vector<Handle> args,
                 bool extend);
  /// When a segment run from the program cache has left its nodes (they are
  /// not needed once the structure compared equal): moves them into
  /// `spare` (replacing what it held) for the session to record into, so
  /// that neither thread frees and allocates every node of every step. Any
  /// thread; DTORCH_RECYCLE_NODES=0: never.
  void takeSpareNodes(std::vector<Node> &spare);
  struct RestartOutcome {
    std::vector<int> replacedRanks;
    /// The values that had a piece on a replaced rank, now lost.
    std::unordered_map<Handle, LostValue> lost;
  };
  /// Backend::restart, queued behind every request before it (waits). The
  /// values with a piece on a replaced rank become lost (their fetches and
  /// the segments reading them fail with a WorkerError naming the rank,
  /// and so do those segments' results); every compiled program is uploaded
  /// again before its next run (a new process holds none); the error of a
  /// request before is dropped.
  RestartOutcome restart(std::chrono::milliseconds idleBound);
  /// With `on`, the controller restarts by itself (idle bound 2 s) before
  /// handling a request when the backend knows of a dead worker; the values
  /// lost become lost as above (their fetches and the segments reading them
  /// fail). The failure itself is still reported as usual (a fetch of the
  /// failed run's result raises WorkerError or LostTensorError). An
  /// automatic restart that fails is reported at the next fetch or
  /// synchronize and turns automatic restarts off. Set before any request.
  void setAutoRestart(bool on) { autoRestart_ = on; }
  /// With automatic restarts, a failure reaches the user only once the
  /// session is whole again: the fetch or synchronize about to raise it
  /// waits for this restart first (any thread; no-op without a dead worker).
  void autoRestartBeforeReporting();
  /// Restarts so far (explicit and automatic).
  uint64_t restartCount() const { return restartCount_; }
  /// Automatic restarts whose lost values are ready for takeAutoLost().
  uint64_t autoRestartEpoch() const { return autoRestartEpoch_; }
  /// The values lost by automatic restarts since the last call (any
  /// thread): the session raises at an op on them, as after restart().
  std::unordered_map<Handle, LostValue> takeAutoLost();
  /// Every global rank's buffer table (rt::MemoryStats), by rank, queued
  /// behind every request before it (so it reflects all work submitted so
  /// far); get() waits (from any thread) and throws a WorkerError.
  std::future<std::vector<rt::MemoryStats>> memoryStatsAsync();
  /// Checkpoint requests (rt::serveCheckpointRequest), each queued behind
  /// every request before it; the replies in request order. `created`:
  /// the handles (with their mesh) that the requests' reads create, kept
  /// live like a put's. get() waits (from any thread) and throws a
  /// WorkerError of a dead worker; a failed write or read is a reply with
  /// ok = false.
  std::future<std::vector<wire::CheckpointReply>>
  checkpointAsync(std::vector<wire::CheckpointRequest> requests,
                  std::vector<std::pair<Handle, int>> created);
  /// The profiler request (rt::RankState::trace) on every global rank, by
  /// rank, queued behind every request before it: a Drain holds every run
  /// submitted so far. get() waits (from any thread).
  std::future<std::vector<rt::TraceChunk>>
  traceAsync(rt::TraceAction action, size_t capacity, size_t maxEvents);
  /// Where the controller thread records its spans (compile, cache lookup,
  /// upload, run, put, free, fetch, synchronize) while `trace` records;
  /// nullptr: nowhere. Not owned; set before the first request.
  void setTrace(rt::TraceBuffer *trace) { trace_ = trace; }
  std::string lastIr(const std::string &stage);
  /// The redistributions of the last segment run (compiled or taken from the
  /// cache), once every request queued before has been handled; nullopt
  /// before the first segment.
  std::optional<std::vector<RedistributionExplanation>> lastExplanation();
  int worldSize() const { return backend_->worldSize(); }
  std::string hostOf(int rank) const { return backend_->hostOf(rank); }
  int cudaDevicesOf(int rank, std::string &whyNone) const {
    return backend_->cudaDevicesOf(rank, whyNone);
  }
  uint64_t messagesSent() const { return backend_->messagesSent(); }
  uint64_t roundTrips() const { return backend_->roundTrips(); }
  /// Tensors that exist on the workers (as of the last handled request).
  size_t liveTensors() const { return liveCount_; }
  /// Segments compiled so far (program cache misses).
  size_t compiles() const { return compiles_; }
  ControllerStats stats() const;
  /// For tests: ANDed into every segment's structural hash before the cache
  /// lookup (0 makes every segment collide, so only the structural
  /// comparison tells them apart). ~0 (the default): no effect.
  static void setHashMaskForTesting(uint64_t mask);
  void shutdown();

private:
  /// When a segment's elementwise chains become generated kernels: code
  /// generation costs far more than the rest of a compile, so by default a
  /// segment's first compile leaves fusion out (a segment that never repeats
  /// stays cheap) and its second run compiles it again with fusion, which
  /// every later run uses. DTORCH_FUSION=0: never; DTORCH_FUSION=1: from
  /// the first compile.
  enum class FusionTier { Never, FromFirstRun, FromSecondRun };
  static FusionTier fusionTierFromEnvironment();

  struct Compiled {
    uint64_t programId;
    bool fused = false; // the programs were compiled with fusion
    Segment structure;  // what the hit compares (and recompiles IR from)
    Mesh mesh;
    std::vector<wire::Program> programs; // one per local-shape class
    bool uploaded = false;
    /// Whether ranks may speculate its programs (none has collectives):
    /// -1 not known yet (ControllerSpeculation.cpp).
    int8_t speculatable = -1;
    /// The programs' moves between meshes (MoveLedger::movesOf), found at
    /// the first run of `programId`.
    std::vector<MoveLedger::Move> moves;
    uint64_t movesOf = 0; // the programId `moves` was found for; 0: none yet
    /// Whether the explanation and the IR stages are known: a miss compiles
    /// without either, the disk gives neither; ensureIr compiles again from
    /// `structure` for what is asked.
    bool hasExplanation = false;
    bool hasStages = false;
    std::vector<std::pair<std::string, std::string>> stages;
    std::vector<RedistributionExplanation> explanation;
  };

  /// The speculation sent and not yet confirmed or dropped (id 0: none).
  struct PendingSpeculation {
    uint64_t id = 0;
    uint64_t programId = 0;
    int meshId = -1;
    std::vector<Handle> args;
  };
  PendingSpeculation speculation_;
  uint64_t nextSpeculationId_ = 1;
  /// Controller thread: the speculation id that the run of program
  /// `programId` on `seg` confirms (0: none); any other pending
  /// speculation is dropped on its ranks.
  uint64_t confirmSpeculation(const Segment &seg, uint64_t programId);
  void dropSpeculationNow();

  /// Queues `task` for the controller thread (enqueue: always). With
  /// `mayInline` (a request that does not compile), the calling
  /// thread handles it itself when nothing is queued and the controller
  /// thread is idle, preceded by the pending frees: the same order, without
  /// waking the controller thread (DTORCH_INLINE_CONTROLLER=0: always
  /// queued).
  void enqueueMayInline(bool mayInline, std::function<void()> task);
  void enqueue(std::function<void()> task);
  /// Makes the calling thread the one that handles requests when nothing is
  /// queued and no thread handles one (true; the pending frees are handled
  /// first); the caller then runs requests with runInline and ends with
  /// endInline. False (nothing taken): queue the request.
  bool beginInline();
  void endInline();
  /// Runs one request on the calling thread as the controller thread would
  /// (automatic restart first, the busy time counted).
  void runInline(const std::function<void()> &task);
  /// One request on this thread: automatic restart first, then the task,
  /// its busy time and count in the stats (`inlined`: by the caller's
  /// thread).
  void handleRequest(const std::function<void()> &task, bool inlined);
  /// Whether `segment` would run from the program cache as it is: a hit
  /// that is uploaded and compiled in its final tier (no compile, no
  /// upload). The caller handles requests (controller thread or inline).
  bool runsFromCache(const Segment &segment);
  /// The task that handles `segment`'s submit.
  void handleSubmit(Segment &segment);
  /// Caller holds mutex_: queues the task that frees the pending frees.
  void queuePendingFreesLocked();
  /// Frees `frees` (mesh id, handle) with one Backend::free per mesh
  /// (controller thread).
  void freeNow(const std::vector<std::pair<int, Handle>> &frees);
  void loop();
  /// Runs `segment`; on a miss its nodes move into the cache entry.
  void runSegment(Segment &segment);
  /// A cache entry for `segment` from the disk or the compiler; takes the
  /// segment's nodes (the entry keeps them to compare later segments with).
  std::unique_ptr<Compiled> obtain(Segment &segment, const Mesh &mesh);
  /// A cached segment's second run: compiled again with fusion, under a new
  /// program id (uploaded by the caller), and stored on disk.
  void promoteToFused(Compiled &c);
  /// The on-disk cache's key of `segment` compiled with or without fusion.
  uint64_t diskKeyOf(const Segment &segment, const Mesh &mesh,
                     bool fused) const;
  /// Compiles `segment`; fills programs, the IR stages `withStages` and the
  /// explanation `withExplanation`; generates fused kernels when `fused`.
  void compileInto(Compiled &c, const Segment &segment, const Mesh &mesh,
                   bool withStages, bool withExplanation, bool fused);
  /// Makes sure c's explanation (and its IR stages with `stages`) are known
  /// (controller thread).
  void ensureIr(Compiled &c, bool stages);
  void rethrowIfFailed();
  /// restart()'s work on the controller thread.
  RestartOutcome restartNow(std::chrono::milliseconds idleBound);
  /// The automatic restart (controller thread): when on and a worker is
  /// known dead; a failure is kept for the next fetch and turns it off.
  void autoRestartIfNeeded();
  /// Runs `fn` and, on failure, remembers the first error for later fetches.
  void guarded(const std::function<void()> &fn);

  std::unique_ptr<Backend> backend_;
  rt::TraceBuffer *trace_ = nullptr;
  std::unordered_map<int, Mesh> meshes_; // controller thread only
  // Controller thread only: the program cache, by the segment's structural
  // hash mixed with its mesh's; a bucket holds the entries that collide.
  std::unordered_map<uint64_t, std::vector<std::unique_ptr<Compiled>>> cache_;
  std::unordered_map<int, uint64_t> meshKeys_;
  std::unordered_map<Handle, int>
      live_; // handle -> mesh; controller thread only
  /// Values lost by a restart, until freed; controller thread only.
  std::unordered_map<Handle, LostValue> lost_;
  /// The results of segments that did not run (refused or failed before
  /// their run was sent), with the error that stopped them, until freed:
  /// fetching one, or running a segment that reads one, raises that error
  /// again. Controller thread only.
  std::unordered_map<Handle, std::exception_ptr> failed_;
  /// Records `error` for every result of `segment` that is not on the
  /// workers.
  void markFailed(const Segment &segment, std::exception_ptr error);
  /// The moves between meshes sent and not yet received, by channel: a
  /// segment whose receive has no matching message is refused
  /// (MoveLedger.h). Controller thread only.
  MoveLedger moves_;
  std::atomic<bool> autoRestart_{false};
  std::mutex autoLostMutex_;
  std::unordered_map<Handle, LostValue> autoLost_; // guarded by autoLostMutex_
  std::atomic<uint64_t> autoRestartEpoch_{0};
  std::atomic<uint64_t> restartCount_{0};
  std::atomic<size_t> liveCount_{0};
  std::atomic<size_t> compiles_{0};
  uint64_t nextProgramId_ = 1;
  FusionTier fusionTier_ = fusionTierFromEnvironment();
  // Fused kernels are generated as host code for "cpu" meshes and as PTX
  // for "cuda" meshes (GpuKernelCodegen); any other device runs the kernel
  // registry's kernels, never fused ones.
  FusionTier fusionTierFor(const Mesh &mesh) const {
    return mesh.device == "cpu" || mesh.device == "cuda" ? fusionTier_
                                                         : FusionTier::Never;
  }
  Compiled *last_ = nullptr;
  ProgramDiskCache disk_;
  mutable std::mutex statsMutex_;
  ControllerStats stats_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  /// A thread handles a request (guarded by mutex_): the controller thread,
  /// or a caller inline (beginInline); the other waits or queues.
  bool busy_ = false;
  const bool inlineRequests_ = inlineRequestsFromEnvironment();
  static bool inlineRequestsFromEnvironment();
  /// synchronize() is among them (DTORCH_INLINE_SYNC=0: it is always
  /// queued, for comparison; bench/handoff_switch_ab.py).
  const bool inlineSync_ = inlineRequests_ && inlineSyncFromEnvironment();
  static bool inlineSyncFromEnvironment();
  /// The nodes of the last hit, for takeSpareNodes (guarded by
  /// spareMutex_); their owners and attributes are cleared.
  std::mutex spareMutex_;
  std::vector<Node> spareNodes_;
  bool spareReady_ = false; // guarded by spareMutex_
  const bool recycleNodes_ = recycleNodesFromEnvironment();
  static bool recycleNodesFromEnvironment();
  /// Frees not yet queued (guarded by mutex_): DTORCH_BATCH_FREES.
  std::vector<std::pair<int, Handle>> pendingFrees_;
  const bool batchFrees_ = batchFreesFromEnvironment();
  static bool batchFreesFromEnvironment();
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

} // namespace dtorch::client
