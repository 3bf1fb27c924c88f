//===- Session.cpp - the client core: symbolic DTensors and segments -----===//
#include "dtorch/Client/Session.h"

#include "BackwardReplay.h"
#include "Controller.h"
#include "SegmentKey.h"
#include "SegmentText.h"
#include "SessionSupport.h"
#include "Speculation.h"
#include "TensorData.h"
#include "dtorch/Client/RecordPool.h"
#include "dtorch/OpRules.h"
#include "dtorch/Redistribute.h"
#include "dtorch/runtime/DevicePlacement.h"
#include "dtorch/runtime/Transport.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <string_view>
#include <unordered_map>

namespace dtorch::client {

const char *dtypeName(wire::DType dt) { return rt::dtypeName(dt); }

wire::DType promoteTypes(wire::DType a, wire::DType b) {
  if (a == b)
    return a;
  auto kind = [](wire::DType t) {
    return t == wire::BOOL ? 0 : isFloat(t) ? 2 : 1;
  };
  if (kind(a) != kind(b))
    return kind(a) > kind(b) ? a : b;
  return rt::dtypeSize(a) >= rt::dtypeSize(b) ? a : b;
}

Shape broadcastShapes(const Shape &a, const Shape &b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1)
      throw ValueError("shapes " + shapeStr(a) + " and " + shapeStr(b) +
                       " cannot be broadcast together");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

TensorStorage::~TensorStorage() {
  if (session)
    session->release(*this);
}

namespace {

/// With DTORCH_RECORD_POOL=0: a TensorImpl inside a block the shared_ptr
/// aliases, so that its enable_shared_from_this is not bound to it (as
/// before it had one): a binding that receives the tensor makes a control
/// block that holds the Python object, and C++ holders keep that object
/// (and its Python attributes) alive.
struct UnboundTensorImpl {
  template <typename... Args>
  explicit UnboundTensorImpl(Args &&...args)
      : impl(std::forward<Args>(args)...) {}
  TensorImpl impl;
};

/// A TensorImpl from the record pool (RecordPool.h), owned by its
/// shared_ptr directly: the bindings reuse that owner for every tensor
/// argument (weak_from_this), and a C++ holder keeps the C++ object alive,
/// not its Python object (whose attributes go with it, as for the
/// intermediates the one-call functional recordings make).
template <typename... Args> Tensor makeTensorImpl(Args &&...args) {
  if (recordPoolEnabled())
    return std::allocate_shared<TensorImpl>(PoolAllocator<TensorImpl>(),
                                            std::forward<Args>(args)...);
  auto block = std::make_shared<UnboundTensorImpl>(std::forward<Args>(args)...);
  return Tensor(block, &block->impl);
}

} // namespace

std::shared_ptr<TensorImpl> TensorImpl::aliasOf(const TensorImpl &other) {
  auto t = makeTensorImpl(other.session_, other.storage_, other.meta_);
  t->view = other.view;
  return t;
}

TensorImpl::~TensorImpl() { releaseGradGraph(std::move(gradFn)); }

Session::Session(const SessionOptions &options) : options_(options) {
  if (options.backend != "inprocess" && options.backend != "cluster" &&
      options.backend != "simulated")
    throw ValueError("unknown backend '" + options.backend +
                     "' (expected cluster, inprocess or simulated)");
  ClusterConfig cfg;
  cfg.worldSize = options.worldSize;
  cfg.numProcesses = options.numProcesses;
  cfg.workerExecutable = options.workerExecutable;
  cfg.workerAddresses = options.workerAddresses;
  cfg.listenAddress = options.listenAddress;
  cfg.admissionTimeoutMs = options.admissionTimeoutMs;
  cfg.token = options.token;
  cfg.curveSecretKey = options.curveSecretKey;
  cfg.curveWorkerPublicKeys = options.curveWorkerPublicKeys;
  cfg.heartbeatIntervalMs = options.heartbeatIntervalMs;
  cfg.peerTimeoutMs = options.peerTimeoutMs;
  cfg.collectiveTimeoutMs = options.collectiveTimeoutMs;
  std::unique_ptr<Backend> backend = makeBackend(options.backend, cfg);
  controller_ =
      std::make_unique<Controller>(std::move(backend), options.programCacheDir);
  controller_->setTrace(trace_.get());
  controller_->setAutoRestart(options.autoRestart);
  if (speculationEnabled())
    predictor_ = std::make_unique<SegmentPredictor>();
}

Session::~Session() { shutdown(); }

void Session::shutdown() {
  if (shutDown_)
    return;
  shutDown_ = true;
  if (controller_)
    controller_->shutdown();
}

int Session::worldSize() const { return controller_->worldSize(); }

const Mesh &Session::mesh(int id) const { return meshes_.at(id); }

int Session::addMesh(Shape shape, std::vector<std::string> names,
                     std::vector<int64_t> ranks, std::string device) {
  if (shape.empty())
    throw ValueError("a device mesh needs at least one dim");
  for (int64_t s : shape)
    if (s <= 0)
      throw ValueError("mesh dims must be positive, got " + shapeStr(shape));
  int64_t n = meshSize(shape);
  if (ranks.empty()) {
    ranks.resize(n);
    std::iota(ranks.begin(), ranks.end(), 0);
  }
  if ((int64_t)ranks.size() != n)
    throw ValueError("mesh of shape " + shapeStr(shape) + " needs " +
                     std::to_string(n) + " ranks, got " +
                     std::to_string(ranks.size()));
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= worldSize())
      throw ValueError("mesh rank " + std::to_string(ranks[i]) +
                       " is outside the world of " +
                       std::to_string(worldSize()) + " ranks");
    for (size_t j = 0; j < i; ++j)
      if (ranks[i] == ranks[j])
        throw ValueError("mesh rank " + std::to_string(ranks[i]) +
                         " appears twice");
  }
  if (!names.empty() && names.size() != shape.size())
    throw ValueError("mesh has " + std::to_string(shape.size()) + " dims but " +
                     std::to_string(names.size()) + " dim names");
  std::vector<int32_t> deviceOrdinals;
  if (device == "cuda") {
    // Every rank's worker must have a GPU: the error names each one that
    // has none. Each rank's GPU is its index on its host modulo the host's
    // GPU count.
    try {
      deviceOrdinals = rt::assignDeviceOrdinals(
          ranks, worldSize(),
          [&](int rank) { return controller_->hostOf(rank); },
          [&](int rank, std::string &why) {
            return controller_->cudaDevicesOf(rank, why);
          });
    } catch (const rt::RuntimeError &e) {
      throw DTorchError(std::string("init_device_mesh('cuda'): ") + e.what());
    }
  } else if (device != "cpu")
    throw ValueError("device type '" + device +
                     "' is not available (workers run on cpu or cuda)");
  Mesh m{static_cast<int>(meshes_.size()),
         std::move(shape),
         std::move(names),
         std::move(ranks),
         std::move(device),
         std::move(deviceOrdinals)};
  meshes_.push_back(m);
  controller_->addMesh(m);
  return m.id;
}

// ---- segments ---------------------------------------------------------------

Tensor Session::newTensor(TensorMeta meta) {
  // Both from the record pool (RecordPool.h): a step frees hundreds at once.
  int meshId = meta.meshId;
  return makeTensorImpl(
      this,
      std::allocate_shared<TensorStorage>(PoolAllocator<TensorStorage>(), this,
                                          nextHandle_++, meshId),
      std::move(meta));
}

static const char *const kMetaMessage =
    "a meta tensor has no value: give it one first (module.to_empty() then "
    "reset_parameters(), load_state_dict(), or _assign())";

void Session::checkNotLost(const TensorStorage &s) {
  uint64_t autoRestarts = controller_->autoRestartEpoch();
  if (autoRestarts != seenAutoRestarts_) {
    seenAutoRestarts_ = autoRestarts;
    for (auto &[handle, lost] : controller_->takeAutoLost())
      lost_[handle] = std::move(lost);
  }
  if (lost_.empty())
    return;
  auto it = lost_.find(s.id);
  if (it != lost_.end())
    throw WorkerError(it->second.rank, it->second.host, it->second.message);
}

RestartInfo Session::restart(std::chrono::milliseconds idleBound) {
  if (shutDown_)
    throw DTorchError("dtorch has been shut down");
  auto start = std::chrono::steady_clock::now();
  Controller::RestartOutcome outcome = controller_->restart(idleBound);
  RestartInfo info;
  info.replacedRanks = std::move(outcome.replacedRanks);
  info.lostTensors = outcome.lost.size();
  for (auto &[handle, lost] : outcome.lost)
    lost_[handle] = std::move(lost);
  info.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return info;
}

uint64_t Session::restartCount() const { return controller_->restartCount(); }

Handle Session::useValue(const Tensor &t) {
  if (t->session_ != this)
    throw ValueError("tensor belongs to another dtorch session");
  TensorStorage &s = *t->storage_;
  if (s.meta)
    throw ValueError(kMetaMessage);
  if (s.segmentEpoch != segmentEpoch_) {
    checkNotLost(s);
    if (!s.materialized)
      throw DTorchError("internal error: tensor " + std::to_string(s.id) +
                        " is neither on the workers nor pending");
    s.segmentEpoch = segmentEpoch_;
    s.segmentPosition = -1 - static_cast<int32_t>(segment_.args.size());
    segment_.args.push_back(s.id);
    segment_.argMetas.push_back(t->meta_);
    segment_.structureHash =
        hashArgument(segment_.structureHash, segment_.argMetas.back());
    argRefs_.push_back(t->storage_);
  }
  return s.id;
}

Tensor Session::addNode(std::string op, TensorList inputs, Attrs attrs,
                        TensorMeta meta, ScalarOperand scalar) {
  if (shutDown_)
    throw DTorchError("dtorch has been shut down");
  std::optional<rt::TraceSpan> span;
  if (trace_->enabled()) {
    // The result's global bytes.
    int64_t bytes = static_cast<int64_t>(rt::dtypeSize(meta.dtype));
    for (int64_t extent : meta.shape)
      bytes *= extent;
    span.emplace(trace_.get(), rt::TraceLane::Client, "op", op, std::string(),
                 bytes);
  }
  if (capture_)
    capture_->beforeNode();
  if (segment_.meshId != -1 && segment_.meshId != meta.meshId)
    flush();
  if (segment_.nodes.size() >= options_.maxSegmentNodes && !recordingResults_)
    flush();
  segment_.meshId = meta.meshId;
  // A node of a segment run before, when the controller handed one back:
  // its vectors keep their capacity, so recording allocates less, and the
  // controller thread frees nothing. Every field is assigned below.
  Node n;
  if (!spareNodes_.empty()) {
    n = std::move(spareNodes_.back());
    spareNodes_.pop_back();
    n.inputs.clear();
    n.operands.clear();
  }
  n.op = std::move(op);
  n.inputs.reserve(inputs.size() + (scalar.index >= 0));
  n.operands.reserve(inputs.size() + (scalar.index >= 0));
  for (const Tensor &t : inputs) {
    n.inputs.push_back(useValue(t));
    n.operands.push_back(t->storage_->segmentPosition);
  }
  if (scalar.index >= 0) {
    n.inputs.insert(n.inputs.begin() + scalar.index, 0);
    n.operands.insert(n.operands.begin() + scalar.index, kScalarOperand);
  }
  // Assigned element by element: a recycled node's vectors keep their
  // storage (a move assignment would free it here).
  n.scalar.index = scalar.index;
  n.scalar.value = scalar.value;
  n.scalar.placements.assign(scalar.placements.begin(),
                             scalar.placements.end());
  n.attrs.assign(std::make_move_iterator(attrs.begin()),
                 std::make_move_iterator(attrs.end()));
  n.meta = meta;
  Tensor result = newTensor(std::move(meta));
  if (!inputs.empty()) {
    result->view = inputs[0]->view;
    for (const Tensor &t : inputs)
      if (t->view != result->view)
        result->view = -1;
  }
  n.id = result->id();
  n.owner = result->storage_;
  if (!inputs.empty() && gradEnabled())
    recordGrad(result, n.op, inputs, n.attrs, n.scalar);
  if (n.op == "random")
    for (const auto &[name, v] : n.attrs)
      if (name == "seed")
        segment_.seeds.push_back(v.i); // seed slot = order among random ops
  segment_.structureHash = hashNode(segment_.structureHash, n);
  if (capture_)
    capture_->afterNode(n, inputs, result, recordingResults_);
  result->storage_->segmentEpoch = segmentEpoch_;
  result->storage_->segmentPosition =
      static_cast<int32_t>(segment_.nodes.size());
  segment_.nodes.push_back(std::move(n));
  if (predictor_)
    predictor_->afterNode(segment_, *controller_);
  return result;
}

void Session::flush() {
  if (capture_)
    capture_->noteCut();
  ++segmentEpoch_; // every position of the pending segment is stale now
  if (segment_.nodes.empty()) {
    if (predictor_)
      predictor_->onFlush(segment_);
    segment_ = Segment();
    argRefs_.clear();
    return;
  }
  for (size_t i = 0; i < segment_.nodes.size(); ++i) {
    Node &n = segment_.nodes[i];
    if (Storage s = n.owner.lock()) {
      segment_.results.push_back(n.id);
      segment_.resultNodes.push_back(static_cast<int32_t>(i));
      s->materialized = true;
    }
  }
  segment_.structureHash =
      hashResults(segment_.structureHash, segment_.resultNodes);
  if (predictor_)
    predictor_->onFlush(segment_);
  // Arguments no tensor names any more: argRefs_ holds their last
  // reference, so nothing can read them after this segment's run.
  if (donationEnabled())
    for (size_t i = 0; i < argRefs_.size(); ++i)
      if (argRefs_[i].use_count() == 1)
        segment_.donated.push_back(argRefs_[i]->id);
  if (trace_->enabled()) {
    rt::TraceEvent cut;
    cut.name = "segment cut";
    cut.category = "segment";
    cut.detail = std::to_string(segment_.nodes.size()) + " ops, " +
                 std::to_string(segment_.results.size()) + " results";
    cut.lane = rt::TraceLane::Client;
    cut.startNs = cut.endNs = rt::traceClockNs();
    trace_->record(std::move(cut));
  }
  Segment seg = std::move(segment_);
  segment_ = Segment();
  if (!seg.results.empty())
    controller_->submit(std::move(seg));
  argRefs_.clear(); // frees of dropped arguments now follow the run
  // An emptied batch of spare nodes keeps its capacity: the next segment
  // grows into it instead of reallocating (and moving) its nodes as it
  // grows. Then the nodes of a segment the controller ran from its cache,
  // for the next segment to record into (the ones left of the last such
  // batch go).
  if (spareNodes_.empty() && spareNodes_.capacity() > 0)
    segment_.nodes = std::move(spareNodes_);
  controller_->takeSpareNodes(spareNodes_);
}

bool donationEnabled() {
  const char *value = std::getenv("DTORCH_DONATION");
  return !(value && std::string_view(value) == "0");
}

void Session::release(const TensorStorage &s) {
  if (!s.materialized || shutDown_)
    return;
  if (!lost_.empty())
    lost_.erase(s.id);
  try {
    controller_->free(s.meshId, s.id);
  } catch (...) {
    // Shutting down: the workers free everything anyway.
  }
}

void Session::checkSameMesh(const Tensor &a, const Tensor &b,
                            const char *op) const {
  if (a->meta_.meshId != b->meta_.meshId)
    throw ValueError(std::string(op) +
                     ": tensors are on different device meshes");
}

// ---- creation
// -----------------------------------------------------------------

static void checkPlacements(const Shape &shape, const Mesh &mesh,
                            const Placements &p) {
  std::string err = validatePlacements(shape.size(), mesh.shape.size(), p);
  if (!err.empty())
    throw ValueError(err);
}

Tensor Session::full(const Shape &shape, double value, wire::DType dtype,
                     int meshId, const Placements &placements) {
  for (int64_t s : shape)
    if (s < 0)
      throw ValueError("negative dimension in shape " + shapeStr(shape));
  checkPlacements(shape, mesh(meshId), placements);
  AttrValue v;
  v.kind = AttrValue::Kind::Float;
  v.f = value;
  return addNode("full", {}, {{"value", v}},
                 {shape, dtype, meshId, placements});
}

Tensor Session::random(const Shape &shape, bool normal, wire::DType dtype,
                       int meshId, const Placements &placements) {
  for (int64_t s : shape)
    if (s < 0)
      throw ValueError("negative dimension in shape " + shapeStr(shape));
  if (!isFloat(dtype))
    throw TypeError(std::string("random values need a float dtype, got ") +
                    dtypeName(dtype));
  checkPlacements(shape, mesh(meshId), placements);
  AttrValue seed, dist;
  seed.i = static_cast<int64_t>((seed_ * 1000003ULL + seedCounter_++) &
                                0x7fffffffffffffffULL);
  dist.kind = AttrValue::Kind::String;
  dist.s = normal ? "normal" : "uniform";
  return addNode("random", {}, {{"seed", seed}, {"distribution", dist}},
                 {shape, dtype, meshId, placements});
}

Tensor Session::meta(const Shape &shape, wire::DType dtype, int meshId,
                     const Placements &placements) {
  for (int64_t s : shape)
    if (s < 0)
      throw ValueError("negative dimension in shape " + shapeStr(shape));
  checkPlacements(shape, mesh(meshId), placements);
  Tensor t = newTensor({shape, dtype, meshId, placements});
  t->storage_->meta = true;
  return t;
}

void Session::manualSeed(uint64_t seed) {
  seed_ = seed;
  seedCounter_ = 0;
}

Tensor Session::fromData(const rt::Tensor &data, int meshId,
                         const Placements &placements) {
  checkPlacements(data.shape(), mesh(meshId), placements);
  if (shutDown_)
    throw DTorchError("dtorch has been shut down");
  Tensor t = newTensor({data.shape(), data.dtype(), meshId, placements});
  t->storage_->materialized = true;
  controller_->put(meshId, t->id(), data, placements);
  return t;
}

// ---- ops
// -----------------------------------------------------------------------

Placements Session::inferPlacements(
    const std::string &tag, const std::vector<Shape> &shapes,
    const std::vector<Placements> &placements, const Shape &resultShape,
    int meshId, wire::DType dtype,
    const std::function<ShardingRule()> &makeRule) {
  const std::string &key =
      strategyKey(tag, shapes, placements, resultShape, meshId, dtype);
  auto it = strategyCache_.find(key);
  if (it != strategyCache_.end())
    return it->second;
  Placements result =
      chooseStrategy(makeRule(), shapes, placements, resultShape,
                     elementBytes(dtype), mesh(meshId).shape, nullptr)
          .result;
  strategyCache_.emplace(key, result);
  return result;
}

// The parts of inferPlacements' memo key: per operand its shape and
// placements, then the result shape, mesh and element size.
static void appendOperandKey(std::string &key, const Shape &shape,
                             const Placements &placements) {
  for (int64_t d : shape)
    key.append(std::to_string(d)).push_back(',');
  key.push_back('|');
  for (const Placement &p : placements) {
    key.push_back(static_cast<char>('0' + static_cast<int>(p.kind)));
    key.append(
        std::to_string(p.isShard() ? p.dim : static_cast<int64_t>(p.op)));
  }
  key.push_back('|');
}

static void appendResultKey(std::string &key, const Shape &resultShape,
                            int meshId, wire::DType dtype) {
  for (int64_t d : resultShape)
    key.append(std::to_string(d)).push_back(',');
  key.push_back('|');
  key.append(std::to_string(meshId)).push_back(':');
  key.append(std::to_string(elementBytes(dtype)));
}

const std::string &
Session::strategyKey(const std::string &tag, const std::vector<Shape> &shapes,
                     const std::vector<Placements> &placements,
                     const Shape &resultShape, int meshId, wire::DType dtype) {
  std::string &key = keyBuffer_;
  key.assign(tag);
  for (size_t k = 0; k < shapes.size(); ++k)
    appendOperandKey(key, shapes[k], placements[k]);
  appendResultKey(key, resultShape, meshId, dtype);
  return key;
}

Placements Session::inferPlacements(
    const std::string &tag, const std::vector<Tensor> &operands,
    const Shape &resultShape, const std::function<ShardingRule()> &makeRule) {
  const TensorMeta &m = operands[0]->meta();
  // A memo hit needs only the key, made from the operands' metadata in
  // place (strategyKey's format) rather than from copies of it.
  std::string &key = keyBuffer_;
  key.assign(tag);
  for (const Tensor &t : operands)
    appendOperandKey(key, t->meta().shape, t->meta().placements);
  appendResultKey(key, resultShape, m.meshId, m.dtype);
  auto it = strategyCache_.find(key);
  if (it != strategyCache_.end())
    return it->second;
  std::vector<Shape> shapes;
  std::vector<Placements> placements;
  for (const Tensor &t : operands) {
    shapes.push_back(t->meta().shape);
    placements.push_back(t->meta().placements);
  }
  return inferPlacements(tag, shapes, placements, resultShape, m.meshId,
                         m.dtype, makeRule);
}

Tensor Session::unary(const std::string &op, const Tensor &x) {
  const rules::ElementwiseTraits *traits = rules::elementwiseTraits(op, 1);
  if (!traits)
    throw ValueError("unknown elementwise op '" + op + "'");
  if (traits->floatOnly && !isFloat(x->meta().dtype))
    return unary(op, cast(x, wire::F32)); // as torch: exp(int) is float32
  const TensorMeta &m = x->meta();
  Placements result = m.placements;
  if (hasPartial(result))
    result = inferPlacements(op, {x}, m.shape, [&] {
      return rules::elementwise(m.shape, 1, *traits);
    });
  return addNode(op, {x}, {}, {m.shape, m.dtype, m.meshId, std::move(result)});
}

Tensor Session::binary(const std::string &op, const Tensor &a0,
                       const Tensor &b0) {
  const rules::ElementwiseTraits *traits = rules::elementwiseTraits(op, 2);
  if (!traits)
    throw ValueError("unknown elementwise op '" + op + "'");
  checkSameMesh(a0, b0, op.c_str());
  // torch's type promotion; true division of integers gives float32.
  wire::DType dtype = promoteTypes(a0->meta().dtype, b0->meta().dtype);
  if (op == "div" && !isFloat(dtype))
    dtype = wire::F32;
  if (a0->meta().dtype != dtype || b0->meta().dtype != dtype)
    return binary(op, cast(a0, dtype), cast(b0, dtype));
  Shape shape;
  try {
    shape = broadcastShapes(a0->meta().shape, b0->meta().shape);
  } catch (const ValueError &e) {
    throw ValueError(op + ": " + e.what());
  }
  Tensor a = broadcastLike(a0, shape, b0);
  Tensor b = broadcastLike(b0, shape, a0);
  const TensorMeta &m = a->meta();
  Placements result;
  const Placements &pa = m.placements;
  bool same = pa == b->meta().placements;
  if (same && !hasPartial(pa))
    result = pa; // every shard maps dim to dim: already a local strategy
  else
    result = inferPlacements(op, {a, b}, shape, [&] {
      return rules::elementwise(shape, 2, *traits);
    });
  return addNode(op, {a, b}, {},
                 {std::move(shape), m.dtype, m.meshId, std::move(result)});
}

Tensor Session::binaryScalar(const std::string &op, const Tensor &a0,
                             double value, bool scalarFirst,
                             bool scalarIsFloat) {
  const rules::ElementwiseTraits *traits = rules::elementwiseTraits(op, 2);
  if (!traits)
    throw ValueError("unknown elementwise op '" + op + "'");
  wire::DType dtype = a0->meta().dtype;
  if ((scalarIsFloat || op == "div") && !isFloat(dtype))
    dtype = wire::F32;
  Tensor a = cast(a0, dtype);
  const TensorMeta &m = a->meta();
  ScalarOperand scalar;
  scalar.index = scalarFirst ? 0 : 1;
  scalar.value = value;
  scalar.placements = m.placements;
  Placements result = m.placements;
  if (hasPartial(m.placements)) {
    for (Placement &q : scalar.placements)
      if (q.isPartial())
        q = Placement::replicate();
    std::vector<Placements> ps = {m.placements, scalar.placements};
    if (scalarFirst)
      std::swap(ps[0], ps[1]);
    result = inferPlacements(
        op, {m.shape, m.shape}, ps, m.shape, m.meshId, m.dtype,
        [&] { return rules::elementwise(m.shape, 2, *traits); });
  }
  return addNode(op, {a}, {}, {m.shape, m.dtype, m.meshId, std::move(result)},
                 std::move(scalar));
}

Tensor Session::cast(const Tensor &x, wire::DType dtype) {
  const TensorMeta &m = x->meta();
  if (m.dtype == dtype)
    return x;
  if (rt::dtypeName(dtype) == std::string("invalid"))
    throw TypeError("cannot convert to an invalid dtype");
  Placements result = m.placements;
  if (hasPartial(result))
    result = inferPlacements("cast", {x}, m.shape, [&] {
      return rules::elementwise(m.shape, 1,
                                *rules::elementwiseTraits("cast", 1));
    });
  return addNode("cast", {x}, {},
                 {m.shape, dtype, m.meshId, std::move(result)});
}

Tensor Session::broadcastTo(const Tensor &x, const Shape &shape,
                            const Placements *placements) {
  const TensorMeta &m = x->meta();
  Shape b;
  try {
    b = broadcastShapes(m.shape, shape);
  } catch (const ValueError &) {
    b.clear();
  }
  if (b != shape || m.shape.size() > shape.size())
    throw ValueError("cannot broadcast " + shapeStr(m.shape) + " to " +
                     shapeStr(shape));
  if (placements) { // declared: the compiler brings the operand to it
    checkPlacements(shape, mesh(m.meshId), *placements);
    return addNode("broadcast_to", {x}, {},
                   {shape, m.dtype, m.meshId, *placements});
  }
  Placements result = inferPlacements("broadcast_to", {x}, shape, [&] {
    return rules::broadcastTo(m.shape, shape);
  });
  return addNode("broadcast_to", {x}, {}, {shape, m.dtype, m.meshId, result});
}

Tensor Session::broadcastLike(const Tensor &x, const Shape &shape,
                              const Tensor &like) {
  const TensorMeta &m = x->meta();
  if (m.shape == shape)
    return x;
  if (like->meta().shape == shape && like->meta().meshId == m.meshId) {
    Placements target = like->meta().placements;
    for (Placement &p : target)
      if (p.isPartial())
        p = Placement::replicate();
    // Free when no rank sends anything (at most a local slice of x);
    // memoized like inferPlacements (a strategy search per call costs more
    // than recording the op).
    const std::string &key =
        strategyKey("broadcast_like", {m.shape, shape}, {m.placements, target},
                    shape, m.meshId, m.dtype);
    auto it = freeBroadcastCache_.find(key);
    if (it == freeBroadcastCache_.end()) {
      ShardingStrategy s = chooseStrategy(
          rules::broadcastTo(m.shape, shape), {m.shape}, {m.placements}, shape,
          elementBytes(m.dtype), mesh(m.meshId).shape, &target);
      it = freeBroadcastCache_.emplace(key, s.cost == 0).first;
    }
    if (it->second)
      return broadcastTo(x, shape, &target);
  }
  return broadcastTo(x, shape);
}

Tensor Session::matmul(const Tensor &a, const Tensor &b) {
  checkSameMesh(a, b, "matmul");
  if (a->meta().dtype != b->meta().dtype) {
    wire::DType dtype = promoteTypes(a->meta().dtype, b->meta().dtype);
    return matmul(cast(a, dtype), cast(b, dtype));
  }
  const TensorMeta &ma = a->meta(), &mb = b->meta();
  if (ma.dtype == wire::BOOL)
    throw TypeError("matmul: not defined for bool tensors");
  size_t ra = ma.shape.size(), rb = mb.shape.size();
  if (ra == 2 && rb == 2) {
    if (ma.shape[1] != mb.shape[0])
      throw ValueError("matmul: shapes " + shapeStr(ma.shape) + " and " +
                       shapeStr(mb.shape) + " cannot be multiplied (" +
                       std::to_string(ma.shape[1]) +
                       " != " + std::to_string(mb.shape[0]) + ")");
    Shape out = {ma.shape[0], mb.shape[1]};
    Placements p = inferPlacements("matmul", {a, b}, out, [&] {
      return rules::matmul(ma.shape, mb.shape);
    });
    return addNode("matmul", {a, b}, {}, {out, ma.dtype, ma.meshId, p});
  }
  // Equal batch dims (one or more): one bmm, each batch dim keeping its
  // own sharding (merging them could need a redistribution).
  if (ra >= 3 && rb == ra &&
      std::equal(ma.shape.begin(), ma.shape.end() - 2, mb.shape.begin())) {
    if (ma.shape[ra - 1] != mb.shape[ra - 2])
      throw ValueError("bmm: shapes " + shapeStr(ma.shape) + " and " +
                       shapeStr(mb.shape) + " cannot be multiplied");
    Shape out(ma.shape.begin(), ma.shape.end() - 1);
    out.push_back(mb.shape[ra - 1]);
    Placements p = inferPlacements(
        "bmm", {a, b}, out, [&] { return rules::bmm(ma.shape, mb.shape); });
    return addNode("bmm", {a, b}, {}, {out, ma.dtype, ma.meshId, p});
  }
  if (ra > 2 && rb == 2) {
    // [..., M, K] @ [K, N]: flatten the leading dims, multiply, restore them.
    Shape lead(ma.shape.begin(), ma.shape.end() - 1);
    int64_t rows = 1;
    for (int64_t d : lead)
      rows *= d;
    Tensor flat = reshape(a, {rows, ma.shape.back()});
    Tensor y = matmul(flat, b);
    lead.push_back(mb.shape[1]);
    return reshape(y, lead);
  }
  // torch.matmul's other cases: vectors become matrices and lose the dim
  // again; batch dims broadcast and are merged into one for bmm.
  if (ra == 0 || rb == 0)
    throw ValueError("matmul: both arguments need at least 1 dim, got " +
                     std::to_string(ra) + " and " + std::to_string(rb));
  if (ra == 1 || rb == 1) {
    Shape sa = ma.shape, sb = mb.shape;
    if (ra == 1)
      sa.insert(sa.begin(), 1);
    if (rb == 1)
      sb.push_back(1);
    Tensor y = matmul(reshape(a, sa), reshape(b, sb));
    Shape out = y->meta().shape;
    if (rb == 1)
      out.pop_back();
    if (ra == 1)
      out.erase(out.end() - (rb == 1 ? 1 : 2));
    return reshape(y, out);
  }
  if (ma.shape[ra - 1] != mb.shape[rb - 2])
    throw ValueError("matmul: shapes " + shapeStr(ma.shape) + " and " +
                     shapeStr(mb.shape) + " cannot be multiplied (" +
                     std::to_string(ma.shape[ra - 1]) +
                     " != " + std::to_string(mb.shape[rb - 2]) + ")");
  Shape batchA(ma.shape.begin(), ma.shape.end() - 2);
  Shape batchB(mb.shape.begin(), mb.shape.end() - 2);
  Shape batch;
  try {
    batch = broadcastShapes(batchA, batchB);
  } catch (const ValueError &e) {
    throw ValueError(std::string("matmul: batch dims ") + e.what());
  }
  int64_t m = ma.shape[ra - 2], k = ma.shape[ra - 1], n = mb.shape[rb - 1];
  Shape fullA = batch, fullB = batch;
  fullA.insert(fullA.end(), {m, k});
  fullB.insert(fullB.end(), {k, n});
  Tensor ba = ma.shape == fullA ? a : broadcastTo(a, fullA);
  Tensor bb = mb.shape == fullB ? b : broadcastTo(b, fullB);
  int64_t count = 1;
  for (int64_t d : batch)
    count *= d;
  Tensor y = matmul(reshape(ba, {count, m, k}), reshape(bb, {count, k, n}));
  Shape out = batch;
  out.insert(out.end(), {m, n});
  return reshape(y, out);
}

Tensor Session::reduce(const std::string &op, const Tensor &x,
                       std::vector<int64_t> dims, bool keepdim) {
  const TensorMeta &m = x->meta();
  int64_t rank = m.shape.size();
  if (dims.empty())
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(d);
  for (int64_t &d : dims)
    d = normalizeDim(d, rank, op.c_str());
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end())
    throw ValueError(op + ": a dim appears more than once");
  if (rank == 0)
    dims.clear();
  if (op == "mean" && !isFloat(m.dtype))
    throw TypeError(std::string("mean: needs a float tensor, got ") +
                    dtypeName(m.dtype));
  Shape out;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = std::binary_search(dims.begin(), dims.end(), d);
    if (!reduced)
      out.push_back(m.shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  std::string tag = op + (keepdim ? "k" : "");
  for (int64_t d : dims)
    tag += "," + std::to_string(d);
  Placements p = inferPlacements(tag, {x}, out, [&] {
    return rules::reduction(m.shape, dims, keepdim, op == "max");
  });
  AttrValue dv, kv;
  dv.kind = AttrValue::Kind::Ints;
  dv.ints = dims;
  kv.i = keepdim;
  return addNode(op, {x}, {{"dims", dv}, {"keepdim", kv}},
                 {out, m.dtype, m.meshId, p});
}

Tensor Session::reshape(const Tensor &x, Shape shape) {
  const TensorMeta &m = x->meta();
  int64_t numel = 1;
  for (int64_t s : m.shape)
    numel *= s;
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0)
        throw ValueError("reshape: only one dimension can be -1");
      inferred = i;
    } else if (shape[i] < 0) {
      throw ValueError("reshape: invalid dimension " +
                       std::to_string(shape[i]));
    } else {
      known *= shape[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0)
      throw ValueError("reshape: shape " + shapeStr(shape) +
                       " is invalid for input of size " +
                       std::to_string(numel));
    shape[inferred] = numel / known;
  } else if (known != numel) {
    throw ValueError("reshape: shape " + shapeStr(shape) +
                     " is invalid for input of size " + std::to_string(numel));
  }
  if (shape == m.shape)
    return x;
  Placements p = inferPlacements(
      "reshape", {x}, shape, [&] { return rules::reshape(m.shape, shape); });
  return addNode("reshape", {x}, {}, {shape, m.dtype, m.meshId, p});
}

Tensor Session::transpose(const Tensor &x, std::vector<int64_t> perm) {
  const TensorMeta &m = x->meta();
  int64_t rank = m.shape.size();
  if ((int64_t)perm.size() != rank)
    throw ValueError("permute: expected " + std::to_string(rank) +
                     " dims, got " + std::to_string(perm.size()));
  std::vector<bool> seen(rank, false);
  for (int64_t &d : perm) {
    d = normalizeDim(d, rank, "permute");
    if (seen[d])
      throw ValueError("permute: dims must be a permutation");
    seen[d] = true;
  }
  Shape out(rank);
  for (int64_t i = 0; i < rank; ++i)
    out[i] = m.shape[perm[i]];
  std::string tag = "transpose";
  for (int64_t d : perm)
    tag += "," + std::to_string(d);
  Placements p = inferPlacements(
      tag, {x}, out, [&] { return rules::transpose(m.shape, perm); });
  AttrValue pv;
  pv.kind = AttrValue::Kind::Ints;
  pv.ints = perm;
  return addNode("transpose", {x}, {{"perm", pv}}, {out, m.dtype, m.meshId, p});
}

Tensor Session::redistribute(const Tensor &x, int meshId,
                             const Placements &placements, bool regather) {
  const TensorMeta &m = x->meta();
  if (meshId != m.meshId)
    throw ValueError(
        "redistribute: moving a tensor to another mesh is not supported");
  checkPlacements(m.shape, mesh(meshId), placements);
  if (placements == m.placements)
    return x;
  if (x->storage_->meta) // a meta tensor moves by metadata alone
    return meta(m.shape, m.dtype, meshId, placements);
  Attrs attrs;
  if (regather) {
    AttrValue one;
    one.i = 1;
    attrs.emplace_back("dtorch.regather", one);
  }
  return addNode("redistribute", {x}, attrs,
                 {m.shape, m.dtype, meshId, placements});
}

Tensor Session::transfer(const Tensor &x, int64_t axis,
                         const std::vector<int64_t> &sources,
                         const std::vector<int64_t> &destinations) {
  const TensorMeta &m = x->meta();
  const Shape &meshShape = mesh(m.meshId).shape;
  int64_t axes = static_cast<int64_t>(meshShape.size());
  std::string where = "transfer: ";
  if (axis < 0 || axis >= axes)
    throw ValueError(where + "mesh dim " + std::to_string(axis) +
                     " is out of range for a mesh of " + std::to_string(axes) +
                     " dims");
  int64_t n = meshShape[axis];
  const Placement &p = m.placements[axis];
  if (!p.isShard())
    throw ValueError(where + "the tensor must be Shard(d) on mesh dim " +
                     std::to_string(axis) + " (one block per position)");
  int64_t dim = p.dim;
  for (int64_t a = 0; a < axes; ++a)
    if (a != axis && m.placements[a].isShard(dim))
      throw ValueError(where + "tensor dim " + std::to_string(dim) +
                       " is also sharded by mesh dim " + std::to_string(a));
  if (m.shape[dim] % n != 0)
    throw ValueError(where + "tensor dim " + std::to_string(dim) + " of size " +
                     std::to_string(m.shape[dim]) +
                     " does not split evenly over " + std::to_string(n) +
                     " positions");
  if (sources.size() != destinations.size() || sources.empty())
    throw ValueError(where + "needs as many sources as destinations, at " +
                     "least one (got " + std::to_string(sources.size()) +
                     " and " + std::to_string(destinations.size()) + ")");
  std::vector<bool> usedSrc(n, false), usedDst(n, false);
  for (size_t k = 0; k < sources.size(); ++k) {
    for (int64_t c : {sources[k], destinations[k]})
      if (c < 0 || c >= n)
        throw ValueError(where + "position " + std::to_string(c) +
                         " is out of range for mesh dim " +
                         std::to_string(axis) + " of size " +
                         std::to_string(n));
    if (sources[k] == destinations[k])
      throw ValueError(where + "pair " + std::to_string(k) + " moves block " +
                       std::to_string(sources[k]) + " onto itself");
    if (usedSrc[sources[k]] || usedDst[destinations[k]])
      throw ValueError(
          where + "position " +
          std::to_string(usedSrc[sources[k]] ? sources[k] : destinations[k]) +
          " appears twice among the " +
          (usedSrc[sources[k]] ? "sources" : "destinations"));
    usedSrc[sources[k]] = usedDst[destinations[k]] = true;
  }
  Attrs attrs;
  AttrValue a;
  a.i = axis;
  attrs.emplace_back("axis", a);
  AttrValue s;
  s.kind = AttrValue::Kind::Ints;
  s.ints = sources;
  attrs.emplace_back("sources", s);
  AttrValue d;
  d.kind = AttrValue::Kind::Ints;
  d.ints = destinations;
  attrs.emplace_back("destinations", d);
  if (x->storage_->meta)
    return meta(m.shape, m.dtype, m.meshId, m.placements);
  return addNode("transfer", {x}, attrs, m);
}

namespace {

// Messages between two ranks are matched in issue order; moves use tags of
// their own, apart from the transfers inside one mesh.
constexpr int64_t kMoveTag = int64_t(1) << 20;

Attrs moveAttrs(const std::vector<int64_t> &peers, int64_t tag) {
  Attrs attrs;
  AttrValue p;
  p.kind = AttrValue::Kind::Ints;
  p.ints = peers;
  attrs.emplace_back("peers", p);
  AttrValue t;
  t.i = kMoveTag + tag;
  attrs.emplace_back("tag", t);
  return attrs;
}

void checkMoveTag(int64_t tag) {
  if (tag < 0 || tag >= kMoveTag)
    throw ValueError("move to another mesh: tag " + std::to_string(tag) +
                     " is outside [0, " + std::to_string(kMoveTag) + ")");
}

} // namespace

void Session::checkMovable(const Tensor &x, int meshId) const {
  const TensorMeta &m = x->meta();
  const Mesh &from = mesh(m.meshId), &to = mesh(meshId);
  if (from.shape != to.shape)
    throw ValueError("move to another mesh: the meshes differ in shape (" +
                     shapeStr(from.shape) + " and " + shapeStr(to.shape) + ")");
  for (size_t p = 0; p < from.ranks.size(); ++p)
    if (from.ranks[p] == to.ranks[p])
      throw ValueError("move to another mesh: rank " +
                       std::to_string(from.ranks[p]) + " is at mesh position " +
                       std::to_string(p) + " of both meshes");
}

Tensor Session::sendToMesh(const Tensor &x, int meshId, int64_t tag) {
  checkMoveTag(tag);
  checkMovable(x, meshId);
  const TensorMeta &m = x->meta();
  if (x->storage_->meta)
    return meta(m.shape, m.dtype, m.meshId, m.placements);
  // The result (the token) is a result of the sender's segment while it is
  // held: the segment, with its send, runs even when nothing else of it is
  // kept, and its value stays until the receive ran.
  return addNode("send", {x}, moveAttrs(mesh(meshId).ranks, tag), m);
}

Tensor Session::receiveFromMesh(const Tensor &token, int meshId, int64_t tag) {
  checkMoveTag(tag);
  checkMovable(token, meshId);
  const TensorMeta &m = token->meta();
  TensorMeta moved{m.shape, m.dtype, meshId, m.placements};
  if (token->storage_->meta)
    return meta(moved.shape, moved.dtype, meshId, moved.placements);
  // Recording it cuts the sender's segment (another mesh) if still pending,
  // so the send is submitted before its receive (the controller's
  // MoveLedger pairs them in that order).
  return addNode("recv", {}, moveAttrs(mesh(m.meshId).ranks, tag), moved);
}

Tensor Session::moveToMesh(const Tensor &x, int meshId) {
  Tensor token = sendToMesh(x, meshId);
  return receiveFromMesh(token, meshId);
}

void Session::assign(const Tensor &target, const Tensor &value) {
  if (target->session_ != this || value->session_ != this)
    throw ValueError("_assign: tensor belongs to another dtorch session");
  const TensorMeta &t = target->meta_, &v = value->meta_;
  if (t.meshId != v.meshId)
    throw ValueError("_assign: the value is on another device mesh than the "
                     "target");
  if (t.shape != v.shape)
    throw ValueError("_assign: the value's shape " + shapeStr(v.shape) +
                     " differs from the target's " + shapeStr(t.shape));
  if (t.dtype != v.dtype)
    throw ValueError(std::string("_assign: the value's dtype ") +
                     dtypeName(v.dtype) + " differs from the target's " +
                     dtypeName(t.dtype));
  if (target->storage_ == value->storage_)
    return;
  Tensor laid = redistribute(value, t.meshId, t.placements);
  // The old storage stays alive while the pending segment reads it
  // (argRefs_), so its free follows that run.
  target->storage_ = laid->storage_;
}

void Session::rebind(const Tensor &target, const Tensor &value) {
  if (target->session_ != this || value->session_ != this)
    throw ValueError("rebind: tensor belongs to another dtorch session");
  const TensorMeta &t = target->meta_, &v = value->meta_;
  if (t.shape != v.shape)
    throw ValueError("rebind: the value's shape " + shapeStr(v.shape) +
                     " differs from the target's " + shapeStr(t.shape));
  if (t.dtype != v.dtype)
    throw ValueError(std::string("rebind: the value's dtype ") +
                     dtypeName(v.dtype) + " differs from the target's " +
                     dtypeName(t.dtype));
  target->storage_ = value->storage_;
  target->meta_ = value->meta_;
  target->view = value->view;
}

// ---- values
// -----------------------------------------------------------------------

std::map<int, rt::Tensor> Session::fetchLocal(const Tensor &x) {
  if (x->storage_->meta)
    throw ValueError(kMetaMessage);
  checkNotLost(*x->storage_);
  if (capture_)
    capture_->invalidate("a value was fetched during the backward");
  if (!x->storage_->materialized)
    flush();
  std::vector<rt::Tensor> pieces =
      controller_->fetchPieces(x->meta().meshId, x->id());
  std::map<int, rt::Tensor> out;
  const Mesh &m = mesh(x->meta().meshId);
  for (size_t p = 0; p < pieces.size(); ++p)
    out[static_cast<int>(m.ranks[p])] = pieces[p];
  return out;
}

rt::Tensor Session::fetch(const Tensor &x) {
  std::optional<rt::TraceSpan> span;
  if (trace_->enabled())
    span.emplace(trace_.get(), rt::TraceLane::Client, "fetch", "fetch");
  rt::Tensor value = fetchAsync(x)->wait();
  if (span)
    span->setBytes(static_cast<int64_t>(value.nbytes()));
  return value;
}

std::shared_ptr<PendingFetch> Session::fetchAsync(const Tensor &x) {
  if (x->storage_->meta)
    throw ValueError(kMetaMessage);
  checkNotLost(*x->storage_);
  if (shutDown_)
    throw DTorchError("dtorch has been shut down");
  if (capture_)
    capture_->invalidate("a value was fetched during the backward");
  // Only a value the pending segment makes needs it cut; an earlier value
  // is fetched behind what was submitted before, and the ops recorded since
  // stay pending (the fetch waits only for what it needs).
  if (!x->storage_->materialized)
    flush();
  const TensorMeta &meta = x->meta();
  if (trace_->enabled()) {
    rt::TraceEvent request;
    request.name = "fetch request";
    request.category = "fetch";
    request.lane = rt::TraceLane::Client;
    request.startNs = request.endNs = rt::traceClockNs();
    trace_->record(std::move(request));
  }
  return std::make_shared<PendingFetch>(
      controller_->fetchPiecesAsync(meta.meshId, x->id()), meta,
      mesh(meta.meshId).shape);
}

rt::Tensor PendingFetch::wait() {
  if (!pieces_.valid())
    throw DTorchError("this fetch was already waited for");
  std::vector<rt::Tensor> pieces = pieces_.get();
  return assemblePieces(pieces, meta_.shape, meta_.dtype, meshShape_,
                        meta_.placements);
}

void Session::synchronize() {
  flush();
  controller_->synchronize();
}

std::vector<rt::MemoryStats> Session::memoryStats() {
  if (shutDown_)
    throw DTorchError("dtorch has been shut down");
  flush();
  return controller_->memoryStatsAsync().get();
}

void Session::startTrace(size_t capacityPerRank) {
  if (shutDown_)
    throw DTorchError("dtorch has been shut down");
  if (capacityPerRank == 0)
    throw ValueError("the profiler needs room for at least one event");
  flush();
  trace_->start(capacityPerRank);
  controller_->traceAsync(rt::TraceAction::Start, capacityPerRank, 0).get();
}

CollectedTrace Session::stopTrace() {
  if (shutDown_)
    throw DTorchError("dtorch has been shut down");
  flush();
  CollectedTrace out;
  out.host = rt::localHostName();
  // Each Drain hands over a bounded chunk per rank; the first one also
  // stops the ranks recording and dates the ranks' clocks.
  bool first = true;
  while (true) {
    int64_t sent = rt::traceClockNs();
    std::vector<rt::TraceChunk> chunks =
        controller_
            ->traceAsync(rt::TraceAction::Drain, 0,
                         rt::TraceBuffer::kMaxDrainEvents)
            .get();
    int64_t answered = rt::traceClockNs();
    bool more = false;
    if (first) {
      out.ranks.resize(chunks.size());
      for (size_t r = 0; r < chunks.size(); ++r) {
        rt::TraceChunk &chunk = chunks[r];
        chunk.offsetNs = chunk.host == out.host || !chunk.supported
                             ? 0
                             : sent + (answered - sent) / 2 - chunk.clockNs;
        out.ranks[r] = std::move(chunk);
        more |= out.ranks[r].remaining > 0;
      }
      first = false;
    } else {
      for (size_t r = 0; r < chunks.size() && r < out.ranks.size(); ++r) {
        std::vector<rt::TraceEvent> &events = out.ranks[r].events;
        for (rt::TraceEvent &e : chunks[r].events)
          events.push_back(std::move(e));
        out.ranks[r].remaining = chunks[r].remaining;
        more |= chunks[r].remaining > 0;
      }
    }
    if (!more)
      break;
  }
  trace_->stop();
  rt::TraceChunk client;
  do {
    trace_->drain(rt::TraceBuffer::kMaxDrainEvents, client);
  } while (client.remaining > 0);
  out.client = std::move(client.events);
  out.clientDropped = client.dropped;
  out.clockNs = rt::traceClockNs();
  return out;
}

std::string Session::hostOf(int rank) const {
  return controller_->hostOf(rank);
}

std::string Session::lastIr(const std::string &stage) {
  synchronize();
  return controller_->lastIr(stage);
}

std::optional<std::vector<RedistributionExplanation>> Session::explain() {
  flush();
  return controller_->lastExplanation();
}

std::string Session::graphText(const std::vector<Tensor> &inputs,
                               const std::vector<Tensor> &outputs,
                               const std::string &name) {
  // Keep only the nodes that lead to the outputs; inputs become arguments.
  Segment g;
  g.meshId = outputs.empty() ? 0 : outputs[0]->meta().meshId;
  std::map<Handle, bool> isInput;
  for (const Tensor &t : inputs) {
    g.args.push_back(t->id());
    g.argMetas.push_back(t->meta());
    isInput[t->id()] = true;
  }
  std::unordered_map<Handle, size_t> nodeOf;
  for (size_t i = 0; i < segment_.nodes.size(); ++i)
    nodeOf[segment_.nodes[i].id] = i;
  std::vector<bool> needed(segment_.nodes.size(), false);
  std::vector<Handle> stack;
  for (const Tensor &t : outputs)
    stack.push_back(t->id());
  while (!stack.empty()) {
    Handle h = stack.back();
    stack.pop_back();
    if (h == 0 || isInput.count(h))
      continue; // 0: a scalar operand
    auto it = nodeOf.find(h);
    if (it == nodeOf.end())
      throw ValueError("save_graph: an output depends on a tensor that is not "
                       "among the inputs");
    if (needed[it->second])
      continue;
    needed[it->second] = true;
    for (Handle in : segment_.nodes[it->second].inputs)
      stack.push_back(in);
  }
  for (size_t i = 0; i < segment_.nodes.size(); ++i)
    if (needed[i])
      g.nodes.push_back(segment_.nodes[i]);
  for (const Tensor &t : outputs)
    g.results.push_back(t->id());
  return segmentText(g, mesh(g.meshId), name);
}

uint64_t Session::messagesSent() const { return controller_->messagesSent(); }
uint64_t Session::roundTrips() const { return controller_->roundTrips(); }
size_t Session::liveTensors() const { return controller_->liveTensors(); }
size_t Session::compiles() const { return controller_->compiles(); }

void setSegmentHashMaskForTesting(uint64_t mask) {
  Controller::setHashMaskForTesting(mask);
}

ControllerStats Session::controllerStats() const {
  return controller_->stats();
}

} // namespace dtorch::client
