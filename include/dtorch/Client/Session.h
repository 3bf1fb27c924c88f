//===- Session.h - the client core: symbolic DTensors and segments -*- C++
//-*-===//
//
// A Tensor on the client is a symbol: global shape, dtype, mesh, placements
// and a handle; it never holds data. Every op call appends one node to the
// pending segment and infers the result's shape, dtype and placements at
// once with the sharding rules of include/dtorch/OpRules.h (the same ones the
// compiler's passes use), so mistakes raise at the call. Segments are cut on
// a fetch, at a size bound, when the mesh changes and on synchronize(), and
// handed to the Controller, which compiles and runs them asynchronously.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/Client/Backend.h"
#include "dtorch/Client/Errors.h"
#include "dtorch/Client/RecordPool.h"
#include "dtorch/Explain.h"
#include "dtorch/Layout.h"
#include "dtorch/ShardingRule.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace dtorch::client {

using Shape = std::vector<int64_t>;

struct Mesh {
  int id = 0;
  Shape shape;
  std::vector<std::string> dimNames;
  std::vector<int64_t> ranks; // global rank of each mesh position, row-major
  std::string device = "cpu";
  // Not "cpu": the device of each position's rank on its worker
  // (rt::assignDeviceOrdinals), sent with every upload.
  std::vector<int32_t> deviceOrdinals;
};

struct TensorMeta {
  Shape shape;
  wire::DType dtype = wire::F32;
  int meshId = 0;
  Placements placements;
};

/// One attribute value of a node.
struct AttrValue {
  enum class Kind { Int, Float, String, Ints } kind = Kind::Int;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
};
using Attrs = std::vector<std::pair<std::string, AttrValue>>;

class Session;
class TensorImpl;
using Tensor = std::shared_ptr<TensorImpl>;

/// The autograd record of an op whose result requires grad (torch's
/// grad_fn): the op, its tensor operands (strong references: what the
/// gradient formulas of the op registry read), its attributes and its
/// scalar operand. The result is the tensor that owns the record, so the
/// record holds no reference to it (no cycle).
struct GradRecord {
  std::string op;
  /// From the record pool, like the record itself (RecordPool.h).
  std::vector<Tensor, PoolAllocator<Tensor>> inputs;
  Attrs attrs;
  int scalarIndex = -1; // position of a Python number among the operands
  double scalarValue = 0;
  /// backward() without retain_graph dropped `inputs`.
  bool released = false;
};

/// Whether ops record GradRecords (torch's grad mode; per thread).
bool gradEnabled();
void setGradEnabled(bool enabled);
/// Drops a record without recursing through a long chain of records.
void releaseGradGraph(std::shared_ptr<GradRecord> record);

/// One value on the workers (or one pending node's result): owns its handle.
/// The handle is freed, after every run that reads it, when the last
/// TensorImpl naming it and the pending segment let go of it. Several
/// TensorImpls share one storage after Session::assign.
struct TensorStorage {
  TensorStorage(Session *session, Handle id, int meshId)
      : session(session), id(id), meshId(meshId) {}
  ~TensorStorage();
  TensorStorage(const TensorStorage &) = delete;
  TensorStorage &operator=(const TensorStorage &) = delete;
  Session *session;
  Handle id;
  int meshId;
  bool materialized = false; // exists on the workers
  /// A meta tensor's storage: metadata only, no value anywhere; reading it
  /// raises (Session::meta).
  bool meta = false;
  /// Its position in the pending segment (Node::operands' encoding), valid
  /// while `segmentEpoch` is the session's current one.
  uint64_t segmentEpoch = 0;
  int32_t segmentPosition = 0;
};
using Storage = std::shared_ptr<TensorStorage>;

/// The client's view of one DTensor; owned by its Python object. It names a
/// storage, which Session::assign may replace (an in-place update).
/// enable_shared_from_this: a tensor made by the session (newTensor,
/// aliasOf) with the record pool on is owned by its shared_ptr directly, and
/// the bindings hand that same owner to C++ on every call instead of making
/// a control block per tensor argument (nanobind's shared_ptr caster looks
/// for it); see makeTensorImpl in Session.cpp.
class TensorImpl : public std::enable_shared_from_this<TensorImpl> {
public:
  TensorImpl(Session *session, Handle id, TensorMeta meta)
      : session_(session),
        storage_(std::make_shared<TensorStorage>(session, id, meta.meshId)),
        meta_(std::move(meta)) {}
  TensorImpl(Session *session, Storage storage, TensorMeta meta)
      : session_(session), storage_(std::move(storage)),
        meta_(std::move(meta)) {}
  /// Another name for the value `other` names (same storage, metadata and
  /// mesh view); nothing else of `other` is copied.
  static std::shared_ptr<TensorImpl> aliasOf(const TensorImpl &other);
  /// Releases the autograd record without recursing through long chains.
  ~TensorImpl();
  Handle id() const { return storage_->id; }
  const TensorMeta &meta() const { return meta_; }
  Session *session() const { return session_; }
  const Storage &storage() const { return storage_; }
  bool requiresGrad = false;
  /// The autograd record of the op that made it (null for a leaf).
  std::shared_ptr<GradRecord> gradFn;
  /// The accumulated gradient (leaves, and tensors that retain_grad()).
  Tensor grad;
  bool retainsGrad = false;
  /// Which view of the mesh (a sub-mesh) the user placed it on; opaque to
  /// C++, propagated to results when every input shares it (-1: whole mesh).
  int view = -1;

private:
  friend class Session;
  Session *session_;
  Storage storage_;
  TensorMeta meta_;
};

/// The tensor operands of one op: a view of tensors the caller holds (a
/// braced list or a vector), valid for the call. A braced list costs no
/// heap allocation, unlike the std::vector it replaces on every op.
class TensorList {
public:
  TensorList() = default;
  TensorList(std::initializer_list<Tensor> list)
      : data_(list.begin()), size_(list.size()) {}
  TensorList(const std::vector<Tensor> &v) : data_(v.data()), size_(v.size()) {}
  const Tensor *begin() const { return data_; }
  const Tensor *end() const { return data_ + size_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const Tensor &operator[](size_t i) const { return data_[i]; }

private:
  const Tensor *data_ = nullptr;
  size_t size_ = 0;
};

/// A Python number used as an operand: `dtensor.full` of the node's shape
/// with these placements, written into the segment text right before the node.
struct ScalarOperand {
  int index = -1; // position among the node's inputs (-1: none)
  double value = 0;
  Placements placements;
};

struct Node {
  std::string op;             // dtensor op mnemonic
  std::vector<Handle> inputs; // the scalar operand's slot holds 0
  Attrs attrs;
  TensorMeta meta;
  Handle id;
  std::weak_ptr<TensorStorage> owner;
  ScalarOperand scalar;
  /// Each input as a position inside the segment: a node index (>= 0), an
  /// argument index a as -1 - a, or kScalarOperand (SegmentKey.h) for the
  /// scalar slot. What the structural key hashes instead of handles.
  std::vector<int32_t> operands;
};

/// A cut of the op stream: nodes in order, the materialized values they read
/// (args) and, once cut, the values still held by the user (results).
struct Segment {
  int meshId = -1;
  std::vector<Node> nodes;
  std::vector<Handle> args;
  std::vector<TensorMeta> argMetas;
  std::vector<Handle> results;
  /// The node index of each result (set by the cut).
  std::vector<int32_t> resultNodes;
  /// The structural hash (SegmentKey.h), built while recording; complete
  /// once the cut added the results.
  uint64_t structureHash = 0;
  /// The seeds of the random nodes in node order: run parameters, one per
  /// seed slot, not part of the structure.
  std::vector<int64_t> seeds;
  /// Arguments whose only holder was the segment when it was cut (no
  /// tensor names them any more, e.g. a parameter an optimizer step
  /// replaced): the run consumes them and an output may take their storage
  /// (Backend::runDonating). Run parameters, not part of the structure.
  /// Empty when DTORCH_DONATION=0.
  std::vector<Handle> donated;
};

/// Whether segments donate the arguments only they hold (Segment::donated):
/// on unless the environment variable DTORCH_DONATION is "0" (read at each
/// segment cut).
bool donationEnabled();

class Controller;
class BackwardCapture;
class SegmentPredictor;
struct BackwardReplayCache;
struct BackwardWalk;
struct ReplayProgram;

/// A value whose pieces on some ranks were lost when dtorch.restart()
/// replaced their worker processes: using it raises WorkerError(rank, host,
/// message), naming the first lost rank.
struct LostValue {
  int rank = -1;
  std::string host;
  std::string message;
};

/// What Session::restart did.
struct RestartInfo {
  /// Global ranks whose worker process was replaced, sorted.
  std::vector<int> replacedRanks;
  /// Values on the workers that had a piece on one of those ranks.
  size_t lostTensors = 0;
  double seconds = 0;
};

/// What the controller did so far and how long it took (its own thread's
/// time, not the workers').
struct ControllerStats {
  uint64_t segments = 0;     // segments run
  uint64_t memoryHits = 0;   // found in the in-memory program cache
  uint64_t diskHits = 0;     // loaded from the on-disk program cache
  uint64_t compiles = 0;     // compiled (misses of both caches)
  double compileSeconds = 0; // segment text + compile, over all compiles
  /// Segments compiled again with fused kernels on their second run (the
  /// first compile leaves fusion out: see Controller's FusionTier).
  uint64_t fusedRecompiles = 0;
  double fusedRecompileSeconds = 0;
  /// Segments compiled again for explain() or the IR stages (a miss
  /// computes neither; once per cached segment and what it lacks).
  uint64_t irRecompiles = 0;
  double diskSeconds = 0;    // on-disk cache lookups, loads and stores
  double hitSeconds = 0;     // lookup + dispatch of the in-memory hits
  double lastHitSeconds = 0; // ... of the last one
  /// Every request handled (runs, frees, puts, fetches, synchronize, which
  /// waits for real workers): the controller thread's busy time.
  double busySeconds = 0;
  uint64_t requests = 0;
  /// Tensors freed, and the free requests that freed them (one per free
  /// with DTORCH_BATCH_FREES=0; else one per batch of the frees made
  /// between two other requests).
  uint64_t frees = 0;
  uint64_t freeRequests = 0;
  /// Restarts (Session::restart and automatic ones) and, of those, the
  /// automatic ones (SessionOptions::autoRestart).
  uint64_t restarts = 0;
  uint64_t autoRestarts = 0;
  /// Speculation (docs/speculation.md): speculative runs started on the
  /// workers, and those that the segment's run confirmed.
  uint64_t speculations = 0;
  uint64_t speculationsConfirmed = 0;
  /// Requests the calling thread handled itself, without waking the
  /// controller thread (nothing was queued; DTORCH_INLINE_CONTROLLER).
  uint64_t inlineRequests = 0;
};

/// A fetch in flight (Session::fetchAsync): the request is queued behind the
/// work submitted before it, and the client goes on recording. `wait()`
/// blocks until every piece has arrived and assembles the global value; it
/// touches no client state, so any thread may call it (once).
class PendingFetch {
public:
  PendingFetch(std::future<std::vector<rt::Tensor>> pieces, TensorMeta meta,
               Shape meshShape)
      : pieces_(std::move(pieces)), meta_(std::move(meta)),
        meshShape_(std::move(meshShape)) {}
  /// The full global value; throws the fetch's error (a WorkerError of the
  /// run that made the value, or of an earlier failed request).
  rt::Tensor wait();
  const TensorMeta &meta() const { return meta_; }

private:
  std::future<std::vector<rt::Tensor>> pieces_;
  TensorMeta meta_;
  Shape meshShape_;
};

/// What the profiler collected (Session::stopTrace): the client process's
/// spans (session and controller lanes) and every rank's chunk, with the
/// offset that puts the rank's times on the client's clock.
struct CollectedTrace {
  std::vector<rt::TraceEvent> client;
  uint64_t clientDropped = 0;
  std::vector<rt::TraceChunk> ranks; // by global rank
  std::string host;                  // the client's host
  int64_t clockNs = 0;               // the client's clock at the collection
};

struct SessionOptions {
  int worldSize = 4;
  int numProcesses = 2;
  std::string backend = "cluster"; // "cluster" or "inprocess"
  std::string workerExecutable;
  std::vector<std::string> workerAddresses;
  std::string token; // shared secret of workers started by hand
  /// Workers that dial in (rt::ClusterOptions::listenAddress): the address
  /// the controller listens on, and how long it waits for the whole world
  /// (0: the default); worldSize 0 takes the first worker's.
  std::string listenAddress;
  int64_t admissionTimeoutMs = 0;
  /// CURVE with workers started by hand (rt::ClusterOptions): this
  /// controller's secret key and the workers' public keys (Z85).
  std::string curveSecretKey;
  std::vector<std::string> curveWorkerPublicKeys;
  /// Fault detection of the cluster backend (ClusterConfig; 0: default).
  int64_t heartbeatIntervalMs = 0;
  int64_t peerTimeoutMs = 0;
  int64_t collectiveTimeoutMs = 0;
  size_t maxSegmentNodes = 2048;
  /// Where compiled programs persist across processes (ProgramDiskCache.h);
  /// empty: no on-disk cache.
  std::string programCacheDir;
  /// Restart automatically (Controller::setAutoRestart) once a worker is
  /// known to be dead: before the controller's next request.
  bool autoRestart = false;
};

class Session {
public:
  explicit Session(const SessionOptions &options);
  ~Session();

  int worldSize() const;
  const Mesh &mesh(int id) const;
  /// Registers a mesh over the given global ranks (row-major positions).
  int addMesh(Shape shape, std::vector<std::string> names,
              std::vector<int64_t> ranks, std::string device);

  // ---- creation ----------------------------------------------------------
  Tensor full(const Shape &shape, double value, wire::DType dtype, int meshId,
              const Placements &placements);
  Tensor random(const Shape &shape, bool normal, wire::DType dtype, int meshId,
                const Placements &placements);
  /// Global data (dense, row-major, `dtype`) placed on the mesh by putting
  /// each rank's piece directly.
  Tensor fromData(const rt::Tensor &data, int meshId,
                  const Placements &placements);
  void manualSeed(uint64_t seed);
  /// A tensor with metadata and no value (torch's "meta" device): ops and
  /// fetches that read it raise ValueError until `assign` gives it a value.
  Tensor meta(const Shape &shape, wire::DType dtype, int meshId,
              const Placements &placements);

  // ---- ops -----------------------------------------------------------------
  Tensor unary(const std::string &op, const Tensor &x);
  Tensor binary(const std::string &op, const Tensor &a, const Tensor &b);
  /// `scalarIsFloat`: a Python float (promotes an integer tensor to float32).
  Tensor binaryScalar(const std::string &op, const Tensor &a, double scalar,
                      bool scalarFirst, bool scalarIsFloat = true);
  /// Element type conversion; the same tensor when the dtype already matches.
  Tensor cast(const Tensor &x, wire::DType dtype);
  Tensor matmul(const Tensor &a, const Tensor &b);
  Tensor reduce(const std::string &op, const Tensor &x,
                std::vector<int64_t> dims, bool keepdim);
  Tensor reshape(const Tensor &x, Shape shape);
  Tensor transpose(const Tensor &x, std::vector<int64_t> perm);
  /// With `placements`, the result gets them (the compiler redistributes
  /// the operand as needed) instead of the rule's choice.
  Tensor broadcastTo(const Tensor &x, const Shape &shape,
                     const Placements *placements = nullptr);
  /// `x` broadcast to `shape` for an elementwise op whose operand `like`
  /// already has that shape: laid out like `like` (its Partial axes read as
  /// Replicate) when no rank sends anything for it (at most a local slice
  /// of x), e.g. a replicated bias joining a sharded activation, so the op
  /// runs in the activation's layout; else as `broadcastTo` chooses. `x`
  /// itself when its shape is `shape`.
  Tensor broadcastLike(const Tensor &x, const Shape &shape, const Tensor &like);
  /// With `regather`, the node carries the `dtorch.regather` attribute: a
  /// second gather of a value whose first gathered copy was released (FSDP's
  /// backward with reshard_after_forward=True), which the compiler keeps
  /// apart from the first one instead of merging the two (CSE).
  Tensor redistribute(const Tensor &x, int meshId, const Placements &placements,
                      bool regather = false);
  /// Point-to-point movement along mesh axis `axis` (dtensor.transfer): x
  /// is Shard(d) on the axis, split evenly and by that axis alone; block
  /// destinations[k] of the result is x's block sources[k], the other
  /// blocks are zero. ValueError (with the numbers) on any other input.
  Tensor transfer(const Tensor &x, int64_t axis,
                  const std::vector<int64_t> &sources,
                  const std::vector<int64_t> &destinations);
  /// Exchange of counted rows along mesh axis `axis` (dtensor.all_to_all_v,
  /// an MoE dispatch or combine): x is [n, n * S * C, ...] and counts
  /// [n, n * S] int64, both Shard(0) on the axis (n its size) with dims 0
  /// and 1 split by no other axis. Block j of the result holds in its
  /// segment (i, s) the first counts[i, j * S + s] rows of x's segment
  /// (j, s) of block i, zeros after them. ValueError (with the numbers) on
  /// any other input; TypeError when counts is not int64.
  Tensor allToAllV(const Tensor &x, const Tensor &counts, int64_t axis);
  /// One Adam or AdamW update of many parameters (dtensor.fused_adam,
  /// SessionOptimizer.cpp): records one op whose results replace, in
  /// place (`assign`), every parameter and its state. `step` (the step
  /// count after this step) and `lr` are 0-d float64 tensors on the
  /// parameters' mesh; parameter i's gradient and state have its shape,
  /// dtype and placements (a Partial gradient must be redistributed
  /// first); `maxExpAvgSqs` is empty unless `hyper.amsgrad`. ValueError
  /// otherwise, before anything is recorded.
  struct AdamHyperParameters {
    double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
    bool decoupled = true, amsgrad = false, maximize = false;
  };
  void fusedAdam(const Tensor &step, const Tensor &lr,
                 const std::vector<Tensor> &params,
                 const std::vector<Tensor> &grads,
                 const std::vector<Tensor> &expAvgs,
                 const std::vector<Tensor> &expAvgSqs,
                 const std::vector<Tensor> &maxExpAvgSqs,
                 const AdamHyperParameters &hyper);
  /// One SGD update of many parameters (dtensor.fused_sgd,
  /// SessionOptimizer.cpp): records one op whose results replace, in
  /// place, every parameter and, with a momentum, its momentum buffer.
  /// `lr` is a 0-d float64 tensor on the parameters' mesh; each gradient
  /// and buffer has its parameter's shape, dtype and placements. With a
  /// momentum and no buffers (the first step) the op starts the buffers
  /// from the gradients: they are returned (new tensors, with their
  /// parameters' layouts); otherwise the given buffers are returned.
  /// ValueError before anything is recorded otherwise.
  struct SgdHyperParameters {
    double momentum = 0, dampening = 0, weightDecay = 0;
    bool nesterov = false, maximize = false;
  };
  std::vector<Tensor> fusedSgd(const Tensor &lr,
                               const std::vector<Tensor> &params,
                               const std::vector<Tensor> &grads,
                               const std::vector<Tensor> &momentumBuffers,
                               const SgdHyperParameters &hyper);
  /// x's value on mesh `meshId` (same shape as x's mesh, other ranks):
  /// every rank of x's mesh sends its piece to the rank at the same
  /// position of the other (dtensor.send on x's mesh, then dtensor.recv on
  /// the other, paired here); placements are kept. The result carries no
  /// autograd history. ValueError when the meshes differ in shape or a
  /// position has the same rank in both.
  Tensor moveToMesh(const Tensor &x, int meshId);
  /// The two halves of moveToMesh, recorded apart: `sendToMesh` records
  /// x's send now (in x's mesh's queue) and returns the send's result, a
  /// token on x's mesh; `receiveFromMesh(token, meshId)` records the
  /// matching receive on mesh `meshId` later, where the receiving side's
  /// schedule needs the value. A receive recorded with its send would sit
  /// in the receiver's in-order queue (and communication stream) ahead of
  /// work recorded after it that does not need it (a pipeline stage's
  /// backward behind the next microbatch's activation). Messages of one
  /// (sender, receiver, tag) channel pair in issue order: receive the
  /// tokens of one tag in the order they were sent. `tag` is added to the
  /// moves' own tag range (0 <= tag < 2^20). The token keeps the sent value
  /// (and its segment's send) alive until the receive is recorded.
  Tensor sendToMesh(const Tensor &x, int meshId, int64_t tag = 0);
  Tensor receiveFromMesh(const Tensor &token, int meshId, int64_t tag = 0);
  /// In-place update: `target` names `value` from now on (its storage, after
  /// redistributing `value` to the target's placements), so every holder of
  /// `target` sees the new value; the old value is freed when unused. Shape,
  /// dtype and mesh must match (ValueError otherwise).
  void assign(const Tensor &target, const Tensor &value);
  /// `target` names `value` with `value`'s layout (mesh, placements, view):
  /// how a parallel style lays a Parameter out anew while the Python object
  /// (which modules and optimizers hold) stays the same. Shape and dtype
  /// must match (ValueError otherwise); autograd fields are kept.
  void rebind(const Tensor &target, const Tensor &value);
  /// A new symbol for x's value without autograd history (no op: an alias
  /// of the same handle).
  Tensor detach(const Tensor &x);

  // ---- comparisons, selection, indexing (SessionOps.cpp) -------------------
  /// eq, ne, lt, le, gt, ge: a bool tensor (broadcasting, type promotion).
  Tensor compare(const std::string &op, const Tensor &a, const Tensor &b);
  /// A Python number as a 0-d tensor of the dtype torch would give it next
  /// to `like` (an integer tensor and a float number give float32).
  Tensor scalarLike(const Tensor &like, double value, bool isFloat);
  Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b);
  /// argmax / argmin along one dim (int64 result).
  Tensor argReduce(const std::string &op, const Tensor &x, int64_t dim,
                   bool keepdim);
  /// Indices of the k largest (or smallest) values along `dim`, in order.
  Tensor topkIndices(const Tensor &x, int64_t k, int64_t dim, bool largest);
  /// A strided box: per dim the first element, the count and the step.
  Tensor slice(const Tensor &x, Shape offsets, Shape sizes, Shape strides);
  Tensor concat(const std::vector<Tensor> &xs, int64_t dim);
  Tensor gather(const Tensor &x, int64_t dim, const Tensor &index);
  Tensor indexSelect(const Tensor &x, int64_t dim, const Tensor &index);
  Tensor scatterAdd(const Tensor &x, int64_t dim, const Tensor &index,
                    const Tensor &src);
  /// tril / triu of the last two dims.
  Tensor triangle(const std::string &op, const Tensor &x, int64_t diagonal);
  /// start + step * i along `dim`.
  Tensor iota(const Shape &shape, int64_t dim, double start, double step,
              wire::DType dtype, int meshId, const Placements &placements);

  // ---- values --------------------------------------------------------------
  /// The full global value (waits). Only a value of the pending segment cuts
  /// it; a value already submitted is fetched behind the work submitted
  /// before it, while the ops recorded since stay pending.
  rt::Tensor fetch(const Tensor &x);
  /// The same fetch without waiting: cuts the segment like fetch() and
  /// returns at once; PendingFetch::wait() gives the value.
  std::shared_ptr<PendingFetch> fetchAsync(const Tensor &x);
  /// Hands the pending segment to the controller without waiting (a step
  /// boundary of a training loop: optimizer.step() ends its segment, so
  /// every step records the same segment and hits the program cache).
  void cutSegment() { flush(); }
  /// Each rank's local piece, by global rank (waits).
  std::map<int, rt::Tensor> fetchLocal(const Tensor &x);
  void synchronize();
  /// Every global rank's buffer table (rt::MemoryStats, by rank): the
  /// pending segment is submitted first and the request is queued behind
  /// all work before it, so it reflects every run and free so far (waits).
  std::vector<rt::MemoryStats> memoryStats();
  /// The profiler (rt::TraceBuffer, Trace.h): the pending segment is
  /// submitted, then the client, the controller and every rank record (at
  /// most `capacityPerRank` events per rank and as many in the client);
  /// waits until every rank records.
  void startTrace(size_t capacityPerRank);
  /// Stops recording everywhere and collects every event: the pending
  /// segment is submitted and the collection is queued behind all work, so
  /// every run submitted while recording is in it (waits). Times of a rank
  /// on another host get the offset measured by the collection's round
  /// trip; ranks on the client's host share its CLOCK_MONOTONIC (offset 0).
  CollectedTrace stopTrace();
  bool tracing() const { return trace_->enabled(); }
  // ---- checkpoints (SessionCheckpoint.cpp) ---------------------------------
  /// Has the workers write the pieces of `tensors` into `folder` (absolute;
  /// it must exist): each rank appends the distinct pieces it is the lowest
  /// rank to hold (a replicated piece is written once; a Partial tensor is
  /// reduced first) to "shards-rank-<R>.bin" and syncs it. Returns each
  /// tensor's chunks (file names relative to `folder`); waits. Throws
  /// DTorchError naming the rank when a write fails, WorkerError when a
  /// worker died.
  std::vector<wire::CheckpointTensor>
  saveShards(const std::vector<Tensor> &tensors,
             const std::vector<std::string> &keys, const std::string &folder);
  /// New tensors laid out as `targets` (their Partial axes read as
  /// Replicate) whose pieces the workers read from the chunks of `saved` in
  /// `folder`: each rank reads exactly the region of its piece from the
  /// chunks overlapping it. Shape or dtype differing from the saved one is
  /// a ValueError naming the key. Waits; a failed read throws DTorchError.
  std::vector<Tensor>
  loadShards(const std::vector<wire::CheckpointTensor> &saved,
             const std::vector<TensorMeta> &targets, const std::string &folder);
  /// The random number generator's state (seed, ops drawn since).
  std::pair<uint64_t, uint64_t> rngState() const {
    return {seed_, seedCounter_};
  }
  void setRngState(uint64_t seed, uint64_t counter) {
    seed_ = seed;
    seedCounter_ = counter;
  }
  /// The worker host serving `rank`.
  std::string hostOf(int rank) const;
  /// IR of the last compiled segment at "input", "sharded", "redistributed"
  /// or "rank".
  std::string lastIr(const std::string &stage);
  /// Why the last segment run communicates: its redistributions after
  /// sharding propagation (pending ops are submitted first); nullopt before
  /// the first segment.
  std::optional<std::vector<RedistributionExplanation>> explain();
  /// The dtensor-dialect text of a function computing `outputs` from `inputs`
  /// (the pending ops that lead to them).
  std::string graphText(const std::vector<Tensor> &inputs,
                        const std::vector<Tensor> &outputs,
                        const std::string &name);

  uint64_t messagesSent() const;
  uint64_t roundTrips() const;
  /// Tensors the controller holds on the workers (after synchronize()).
  size_t liveTensors() const;
  /// Segments compiled so far (cache misses of the controller).
  size_t compiles() const;
  /// The controller's counters and times (Controller::stats()).
  ControllerStats controllerStats() const;
  size_t pendingNodes() const { return segment_.nodes.size(); }
  /// The pending segment's structural hash so far (SegmentKey.h): equal
  /// for two recordings of the same ops on the same operand positions.
  uint64_t pendingStructureHash() const { return segment_.structureHash; }

  // ---- backward replay (BackwardReplay.cpp) --------------------------------
  /// What startBackward did: replayed the recorded backward (the gradients
  /// are in place and, unless the graph is retained, the records released),
  /// started capturing the walk python/dtorch/autograd.py is about to make
  /// (end it with endBackwardCapture), or neither (walk without capture).
  enum class BackwardStart { Replayed, Capturing, Walk };
  /// A backward from `roots` with gradients `rootGrads` (one each; grad
  /// mode off, every leaf or retaining tensor accumulates): when a backward
  /// of the same structure was captured before, records its ops again (the
  /// same ops in the same order, so the same segment) without evaluating
  /// any formula, and assigns the same .grad values.
  BackwardStart startBackward(const std::vector<Tensor> &roots,
                              const std::vector<Tensor> &rootGrads,
                              bool releaseGraph);
  /// Ends the capture startBackward began: `completed` (the walk returned)
  /// keeps what it recorded for the next backward of that structure.
  void endBackwardCapture(bool completed);
  struct BackwardReplayStats {
    uint64_t replays = 0;       // backwards replayed
    uint64_t captures = 0;      // captures kept as replayable
    uint64_t notReplayable = 0; // walks of a structure known not replayable
    uint64_t walks = 0;         // backwards whose walk could not be replayed
    size_t entries = 0;         // structures cached
    std::string lastReason;     // why the last unreplayable backward was
  };
  BackwardReplayStats backwardReplayStats() const;
  void shutdown();
  /// Recovery after a WorkerError (Backend::restart): replaces the lost
  /// worker processes (and survivors not idle within `idleBound`), resets
  /// the survivors' communicators and drops the errors queued so far.
  /// Every value with a piece on a replaced rank is lost from then on:
  /// recording an op on it, fetching it or assigning it raises WorkerError
  /// naming the rank; the other values, the pending ops and the random
  /// seed state are kept. Waits until the workers are ready.
  RestartInfo restart(std::chrono::milliseconds idleBound);
  /// Restarts so far, automatic ones included (cheap: caches of values on
  /// the workers compare it to know when to drop them).
  uint64_t restartCount() const;

  // Called by ~TensorStorage.
  void release(const TensorStorage &s);

private:
  /// ValueError unless x may move to mesh `meshId` (same shape, no rank at
  /// the same position of both).
  void checkMovable(const Tensor &x, int meshId) const;
  Tensor addNode(std::string op, TensorList inputs, Attrs attrs,
                 TensorMeta meta, ScalarOperand scalar = {});
  Handle useValue(const Tensor &t);
  /// Throws the WorkerError of a value lost by restart() or an automatic
  /// restart.
  void checkNotLost(const TensorStorage &s);
  /// The backward's ops again, from a captured program (BackwardReplay.cpp).
  void replayBackward(const ReplayProgram &program, BackwardWalk &walk,
                      bool releaseGraph);
  /// The autograd hook of addNode: records a GradRecord on `result` when
  /// grad mode is on and a differentiable operand requires grad.
  void recordGrad(const Tensor &result, const std::string &op,
                  TensorList inputs, const Attrs &attrs,
                  const ScalarOperand &scalar);
  void flush();
  void checkSameMesh(const Tensor &a, const Tensor &b, const char *op) const;
  Tensor newTensor(TensorMeta meta);
  /// Result placements from the op's sharding rule (chooseStrategy with no
  /// required result), memoized: an op seen before with the same operand
  /// shapes and placements costs a lookup. `tag` names the op and its
  /// attributes; `makeRule` runs only on a miss.
  Placements inferPlacements(const std::string &tag,
                             const std::vector<Shape> &shapes,
                             const std::vector<Placements> &placements,
                             const Shape &resultShape, int meshId,
                             wire::DType dtype,
                             const std::function<ShardingRule()> &makeRule);
  /// The memo key of inferPlacements (in keyBuffer_, valid until the next
  /// call): the tag, operand shapes and placements, result shape, mesh and
  /// element size.
  const std::string &strategyKey(const std::string &tag,
                                 const std::vector<Shape> &shapes,
                                 const std::vector<Placements> &placements,
                                 const Shape &resultShape, int meshId,
                                 wire::DType dtype);
  Placements inferPlacements(const std::string &tag,
                             const std::vector<Tensor> &operands,
                             const Shape &resultShape,
                             const std::function<ShardingRule()> &makeRule);

  SessionOptions options_;
  std::vector<Mesh> meshes_;
  /// The client's and the controller's profiler spans; outlives controller_.
  std::unique_ptr<rt::TraceBuffer> trace_ = std::make_unique<rt::TraceBuffer>();
  std::unique_ptr<Controller> controller_;
  Segment segment_;
  /// The pending segment's arguments stay alive until it is submitted, so a
  /// free of a dropped tensor always follows the run that reads it.
  std::vector<Storage> argRefs_;
  /// Nodes of segments run before (Controller::takeSpareNodes), reused by
  /// addNode from the back.
  std::vector<Node> spareNodes_;
  /// Numbers the pending segment (TensorStorage::segmentEpoch).
  uint64_t segmentEpoch_ = 1;
  std::unordered_map<std::string, Placements> strategyCache_;
  /// broadcastLike: whether broadcasting to the other operand's placements
  /// sends nothing, by strategyKey.
  std::unordered_map<std::string, bool> freeBroadcastCache_;
  std::string keyBuffer_;
  Handle nextHandle_ = 1;
  uint64_t seed_ = 0, seedCounter_ = 0;
  bool shutDown_ = false;
  /// Set while a multi-result op records its result nodes: the segment is
  /// not cut between them (addNode's size limit waits).
  bool recordingResults_ = false;
  /// Records the multi-tensor optimizer update `op` (fused_adam,
  /// fused_sgd): the 0-d float64 `scalars`, then the tensors of `groups`
  /// (parameters first, each group one tensor per parameter, with its
  /// parameter's shape, dtype and placements), giving `resultGroups`
  /// groups of results; result group g re-points the tensors of
  /// `targets[g]` (or, when it is empty, fills it with the results).
  /// ValueError before anything is recorded.
  void
  recordOptimizerUpdate(const char *op, const std::vector<Tensor> &scalars,
                        const std::vector<const std::vector<Tensor> *> &groups,
                        size_t resultGroups, Attrs attrs,
                        const std::vector<std::vector<Tensor> *> &targets);
  /// The capture of the backward in progress (null: none) and the
  /// programs captured so far (BackwardReplay.cpp).
  std::unique_ptr<BackwardCapture> capture_;
  /// Speculation (lib/Client/Speculation.h): predicts the segment being
  /// recorded from earlier ones; null with DTORCH_SPECULATE=0.
  std::unique_ptr<SegmentPredictor> predictor_;
  std::unique_ptr<BackwardReplayCache> replayCache_;
  /// Values lost by restart(), until their storage is released.
  std::unordered_map<Handle, LostValue> lost_;
  /// Automatic restarts whose lost values lost_ holds.
  uint64_t seenAutoRestarts_ = 0;
};

/// For tests: ANDed into every segment's structural hash before the
/// program cache lookup; 0 makes all segments collide, so the structural
/// comparison alone tells them apart. ~0 restores the default.
void setSegmentHashMaskForTesting(uint64_t mask);

/// The dtypes the runtime has a CPU kernel for (the coverage test checks the
/// op registry against them).
std::vector<wire::DType> kernelDtypes(const std::string &kernel);

/// Global shape inference helpers, exposed for tests.
Shape broadcastShapes(const Shape &a, const Shape &b);
/// torch's type promotion of two tensor dtypes (bool < integers < floats,
/// the wider within a kind).
wire::DType promoteTypes(wire::DType a, wire::DType b);
const char *dtypeName(wire::DType dtype);

} // namespace dtorch::client
