//===- Controller.h - compiles segments and drives the workers ----*- C++
//-*-===//
//
// Runs on its own thread: every request of the client is queued and handled
// in order, so the client never waits except for a fetch or synchronize.
// Compiled programs are cached by the segment's text (its structure: ops,
// shapes, dtypes, placements, mesh); a cache hit costs a lookup and one "run"
// message per rank.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/Client/Session.h"
#include "dtorch/Compiler.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

namespace dtorch::client {

class Controller {
public:
  explicit Controller(std::unique_ptr<Backend> backend);
  ~Controller();

  void addMesh(const Mesh &mesh);
  void submit(Segment segment);
  void put(int meshId, Handle handle, rt::Tensor full, Placements placements);
  void free(int meshId, Handle handle);
  /// Every mesh position's piece of `handle` (waits).
  std::vector<rt::Tensor> fetchPieces(int meshId, Handle handle);
  /// The same fetch, queued behind every request before it, without
  /// waiting: get() on the result waits for the pieces (from any thread) and
  /// throws the fetch's error, or an earlier request's failure not yet
  /// reported.
  std::future<std::vector<rt::Tensor>> fetchPiecesAsync(int meshId,
                                                        Handle handle);
  void synchronize();
  std::string lastIr(const std::string &stage);
  /// The redistributions of the last segment run (compiled or taken from the
  /// cache), once every request queued before has been handled; nullopt
  /// before the first segment.
  std::optional<std::vector<RedistributionExplanation>> lastExplanation();
  int worldSize() const { return backend_->worldSize(); }
  uint64_t messagesSent() const { return backend_->messagesSent(); }
  uint64_t roundTrips() const { return backend_->roundTrips(); }
  /// Tensors that exist on the workers (as of the last handled request).
  size_t liveTensors() const { return liveCount_; }
  /// Segments compiled so far (program cache misses).
  size_t compiles() const { return compiles_; }
  void shutdown();

private:
  struct Compiled {
    uint64_t programId;
    std::vector<wire::Program> programs; // one per local-shape class
    bool uploaded = false;
    std::vector<int64_t> seeds; // the random seeds the uploaded programs carry
    /// Made on the first explain() after a run of this program.
    std::optional<std::vector<RedistributionExplanation>> explanation;
  };

  void enqueue(std::function<void()> task);
  void loop();
  void runSegment(const Segment &segment);
  /// Compiles the last segment run again with `options` (for last_ir and
  /// explain); controller thread only.
  CompileResult recompileLast(const CompileOptions &options);
  void rethrowIfFailed();
  /// Runs `fn` and, on failure, remembers the first error for later fetches.
  void guarded(const std::function<void()> &fn);

  std::unique_ptr<Backend> backend_;
  std::unordered_map<int, Mesh> meshes_;            // controller thread only
  std::unordered_map<std::string, Compiled> cache_; // controller thread only
  std::unordered_map<Handle, int>
      live_; // handle -> mesh; controller thread only
  std::atomic<size_t> liveCount_{0};
  std::atomic<size_t> compiles_{0};
  uint64_t nextProgramId_ = 1;
  Compiled *last_ = nullptr;
  Segment lastSegment_; // the segment last_ was run for
  /// lastSegment_'s IR stages, once last_ir asked for them.
  std::vector<std::pair<std::string, std::string>> lastStages_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

} // namespace dtorch::client
