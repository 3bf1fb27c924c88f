//===- BackwardReplay.cpp - backward() recorded once, replayed after -----===//
//
// See BackwardReplay.h. The key spells out everything the Python walk of
// python/dtorch/autograd.py reads: per external tensor (each tensor a
// formula may see, numbered in walk order, a repeated tensor by its first
// number) its metadata, view and autograd flags, and per visited record its
// op, attributes, scalar operand and operands. Two walks with equal keys
// make the Python walk record the same ops with the same operands, since a
// formula reads nothing else (a formula that fetches a value, or an op that
// draws random numbers or moves between meshes, makes the capture
// unreplayable).
//
//===----------------------------------------------------------------------===//
#include "BackwardReplay.h"

#include "SegmentKey.h"

#include <cstdlib>
#include <cstring>
#include <string_view>

namespace dtorch::client {
namespace {

// Tags of the key's items.
constexpr uint64_t kRootsTag = 0x526f6f7473000001ULL;
constexpr uint64_t kNewTag = 0x4e65770000000002ULL;
constexpr uint64_t kSameTag = 0x53616d6500000003ULL;
constexpr uint64_t kRecordTag = 0x5265636f72640004ULL;

uint64_t doubleBits(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return bits;
}

void pushString(std::vector<uint64_t> &key, const std::string &s) {
  key.push_back(s.size());
  for (size_t at = 0; at < s.size(); at += 8) {
    uint64_t word = 0;
    std::memcpy(&word, s.data() + at, std::min<size_t>(8, s.size() - at));
    key.push_back(word);
  }
}

void pushMeta(std::vector<uint64_t> &key, const TensorMeta &m) {
  key.push_back((static_cast<uint64_t>(m.dtype) << 32) |
                static_cast<uint32_t>(m.meshId));
  key.push_back(m.shape.size() | (m.placements.size() << 32));
  for (int64_t d : m.shape)
    key.push_back(static_cast<uint64_t>(d));
  for (const Placement &p : m.placements)
    key.push_back((static_cast<uint64_t>(p.kind) << 56) |
                  (static_cast<uint64_t>(p.op) << 48) |
                  (static_cast<uint64_t>(p.dim) & 0xffffffffffffULL));
}

void pushAttrs(std::vector<uint64_t> &key, const Attrs &attrs) {
  key.push_back(attrs.size());
  for (const auto &[name, v] : attrs) {
    pushString(key, name);
    key.push_back(static_cast<uint64_t>(v.kind));
    switch (v.kind) {
    case AttrValue::Kind::Int:
      key.push_back(static_cast<uint64_t>(v.i));
      break;
    case AttrValue::Kind::Float:
      key.push_back(doubleBits(v.f));
      break;
    case AttrValue::Kind::String:
      pushString(key, v.s);
      break;
    case AttrValue::Kind::Ints:
      key.push_back(v.ints.size());
      for (int64_t x : v.ints)
        key.push_back(static_cast<uint64_t>(x));
      break;
    }
  }
}

/// Builds a BackwardWalk; mirrors autograd.py's _topological.
class Walker {
public:
  explicit Walker(BackwardWalk &w) : w_(w) {
    w_.externals.reserve(512);
    w_.roles.reserve(512);
    w_.index.reserve(1024);
    w_.key.reserve(8192);
  }

  /// The external number of `t`, adding it (and its .grad) when new.
  int32_t external(const Tensor &t, uint8_t role) {
    auto [it, fresh] = w_.index.try_emplace(
        t.get(), static_cast<int32_t>(w_.externals.size()));
    int32_t i = it->second;
    if (!fresh) {
      w_.roles[i] |= role;
      w_.key.push_back(kSameTag);
      w_.key.push_back(static_cast<uint64_t>(i));
      return i;
    }
    w_.externals.push_back(t);
    w_.roles.push_back(role);
    w_.key.push_back(kNewTag);
    pushMeta(w_.key, t->meta());
    uint64_t flags = (t->requiresGrad ? 1 : 0) | (t->retainsGrad ? 2 : 0) |
                     (t->gradFn ? 4 : 0) | (t->grad ? 8 : 0);
    w_.key.push_back((flags << 32) | static_cast<uint32_t>(t->view));
    if (t->storage()->meta && !w_.unreplayable)
      w_.unreplayable = "a tensor of the graph has no value (meta)";
    if (t->grad)
      external(t->grad, BackwardWalk::Gradient);
    return i;
  }

  void walk(const std::vector<Tensor> &roots,
            const std::vector<Tensor> &rootGrads) {
    w_.key.push_back(kRootsTag);
    w_.key.push_back(roots.size());
    std::vector<std::pair<int32_t, bool>> stack;
    stack.reserve(256);
    for (size_t k = 0; k < roots.size(); ++k) {
      stack.emplace_back(external(roots[k], BackwardWalk::Root), false);
      external(rootGrads[k], BackwardWalk::RootGrad);
    }
    std::vector<uint8_t> visited;
    while (!stack.empty() && !w_.unreplayable) {
      auto [i, done] = stack.back();
      stack.pop_back();
      if (done) {
        w_.order.push_back(i);
        continue;
      }
      if (visited.size() < w_.externals.size())
        visited.resize(w_.externals.size() + 256, 0);
      if (visited[i])
        continue;
      visited[i] = 1;
      stack.emplace_back(i, true);
      const TensorImpl &t = *w_.externals[i];
      w_.roles[i] |= BackwardWalk::Walked;
      if (!t.gradFn || t.retainsGrad)
        w_.gradTargets.push_back(i);
      const GradRecord *fn = t.gradFn.get();
      if (!fn)
        continue;
      if (fn->released) {
        // autograd.py raises its error for a graph already freed.
        w_.unreplayable = "the graph was freed by an earlier backward";
        return;
      }
      w_.key.push_back(kRecordTag);
      w_.key.push_back(static_cast<uint64_t>(i));
      pushString(w_.key, fn->op);
      pushAttrs(w_.key, fn->attrs);
      w_.key.push_back(static_cast<uint64_t>(fn->scalarIndex));
      w_.key.push_back(fn->scalarIndex >= 0 ? doubleBits(fn->scalarValue) : 0);
      w_.key.push_back(fn->inputs.size());
      for (const Tensor &x : fn->inputs) {
        int32_t j = external(x, BackwardWalk::Operand);
        if (x->requiresGrad &&
            (j >= static_cast<int32_t>(visited.size()) || !visited[j]))
          stack.emplace_back(j, false);
      }
    }
  }

private:
  BackwardWalk &w_;
};

/// Ops whose replay would differ from their first recording: a random
/// draw takes the next seed, moves between meshes pair sends with
/// receives in the controller, multi-result ops record several nodes at
/// once.
bool replayableOp(const std::string &op) {
  return op != "random" && op != "send" && op != "recv" && op != "fused_adam" &&
         op != "fused_sgd";
}

} // namespace

bool backwardReplayEnabled() {
  const char *value = std::getenv("DTORCH_BACKWARD_REPLAY");
  return !(value && std::string_view(value) == "0");
}

void BackwardWalk::clear() {
  externals.clear();
  roles.clear();
  index.clear();
  order.clear();
  gradTargets.clear();
  key.clear();
  hash = 0;
  unreplayable = nullptr;
}

void walkBackward(const std::vector<Tensor> &roots,
                  const std::vector<Tensor> &rootGrads, BackwardWalk &w) {
  w.clear();
  Walker(w).walk(roots, rootGrads);
  uint64_t h = 0x42574b0000000000ULL ^ w.key.size();
  for (uint64_t word : w.key)
    h = mixHash(h, word);
  w.hash = h;
}

BackwardWalk walkBackward(const std::vector<Tensor> &roots,
                          const std::vector<Tensor> &rootGrads) {
  BackwardWalk w;
  walkBackward(roots, rootGrads, w);
  return w;
}

// ---- capture
// ------------------------------------------------------------------

BackwardCapture::BackwardCapture(BackwardWalk walk) : walk_(std::move(walk)) {
  lastGrad_.reserve(walk_.gradTargets.size());
  for (int32_t e : walk_.gradTargets)
    lastGrad_.push_back(walk_.externals[e]->grad.get());
}

ReplayRef BackwardCapture::resolve(const Tensor &t) {
  auto it = resultIndex_.find(t.get());
  if (it != resultIndex_.end() && results_[it->second].lock() == t)
    return it->second;
  auto e = walk_.index.find(t.get());
  if (e != walk_.index.end())
    return externalRef(e->second);
  invalidate("an operand is neither a tensor of the graph nor recorded by the "
             "backward");
  return 0;
}

void BackwardCapture::settle(int32_t position) {
  // The binding of the last op may have set its result's view since.
  if (position > 0)
    if (Tensor last = results_[position - 1].lock())
      program_.nodes[position - 1].view = last->view;
  for (size_t a = 0; a < alive_.size();) {
    int32_t k = alive_[a];
    if (!results_[k].expired()) {
      ++a;
      continue;
    }
    // The value itself lives on under another name (an alias): its
    // lifetime is not the result's. (A value of a segment cut inside the
    // backward may live on as an argument of the next one.)
    if (Storage s = storages_[k].lock(); s && !s->materialized)
      invalidate("a value recorded by the backward is held under another "
                 "name");
    program_.releases.emplace_back(position, k);
    alive_[a] = alive_.back();
    alive_.pop_back();
  }
  for (size_t t = 0; t < walk_.gradTargets.size(); ++t) {
    int32_t e = walk_.gradTargets[t];
    const Tensor &grad = walk_.externals[e]->grad;
    if (grad.get() == lastGrad_[t])
      continue;
    ReplayGradAssignment a;
    a.position = position;
    a.target = e;
    if (grad)
      a.value = resolve(grad);
    else
      invalidate("a gradient was reset during the backward");
    auto old = walk_.index.find(lastGrad_[t]);
    if (old != walk_.index.end() &&
        walk_.roles[old->second] == BackwardWalk::Gradient) {
      // Only the leaf held it: the walk let it go with the assignment, and
      // so does the capture (a segment cut later must not see it alive).
      a.dropExternal = old->second;
      walk_.externals[old->second].reset();
      walk_.index.erase(old);
    }
    lastGrad_[t] = grad.get();
    program_.assignments.push_back(a);
  }
}

void BackwardCapture::beforeNode() {
  settle(static_cast<int32_t>(program_.nodes.size()));
  insideNode_ = true;
}

void BackwardCapture::afterNode(const Node &node, TensorList inputs,
                                const Tensor &result, bool recordingResults) {
  insideNode_ = false;
  if (recordingResults)
    invalidate("an op with several results was recorded");
  if (!replayableOp(node.op))
    invalidate("an op that draws random numbers or moves between meshes was "
               "recorded");
  ReplayNode r;
  r.op = node.op;
  r.inputs.reserve(inputs.size());
  for (const Tensor &t : inputs)
    r.inputs.push_back(resolve(t));
  r.attrs = node.attrs;
  r.meta = node.meta;
  r.scalar = node.scalar;
  r.view = result->view;
  auto k = static_cast<int32_t>(program_.nodes.size());
  program_.nodes.push_back(std::move(r));
  resultIndex_[result.get()] = k;
  results_.push_back(result);
  storages_.push_back(result->storage());
  alive_.push_back(k);
}

std::shared_ptr<const ReplayProgram> BackwardCapture::finish(const char **why) {
  auto end = static_cast<int32_t>(program_.nodes.size());
  settle(end);
  for (int32_t k : alive_)
    program_.releases.emplace_back(end, k);
  alive_.clear();
  if (why_) {
    *why = why_;
    return nullptr;
  }
  return std::make_shared<const ReplayProgram>(std::move(program_));
}

// ---- cache
// --------------------------------------------------------------------

const BackwardReplayCache::Entry *
BackwardReplayCache::find(uint64_t hash,
                          const std::vector<uint64_t> &key) const {
  auto it = entries.find(hash);
  if (it == entries.end())
    return nullptr;
  for (const Entry &e : it->second)
    if (e.key == key)
      return &e;
  return nullptr;
}

void BackwardReplayCache::insert(uint64_t hash, std::vector<uint64_t> key,
                                 std::shared_ptr<const ReplayProgram> program) {
  // A training loop has a few structures; a program that builds a new
  // graph shape at every step should not grow the cache without bound.
  constexpr size_t kMaxEntries = 64;
  if (count >= kMaxEntries) {
    entries.clear();
    count = 0;
  }
  entries[hash].push_back({std::move(key), std::move(program)});
  ++count;
}

// ---- the session's side
// -------------------------------------------------------

Session::BackwardStart
Session::startBackward(const std::vector<Tensor> &roots,
                       const std::vector<Tensor> &rootGrads,
                       bool releaseGraph) {
  if (!replayCache_)
    replayCache_ = std::make_unique<BackwardReplayCache>();
  BackwardReplayStats &stats = replayCache_->stats;
  if (capture_ || !backwardReplayEnabled() ||
      roots.size() != rootGrads.size() || roots.empty())
    return BackwardStart::Walk;
  for (const Tensor &t : roots)
    if (!t || t->session() != this)
      return BackwardStart::Walk;
  for (const Tensor &t : rootGrads)
    if (!t || t->session() != this)
      return BackwardStart::Walk;
  // The buffers of the last replayed walk, when there is one.
  BackwardWalk walk = std::move(replayCache_->spareWalk);
  walkBackward(roots, rootGrads, walk);
  auto keepBuffers = [&] {
    walk.clear(); // drops the references to the graph's tensors
    replayCache_->spareWalk = std::move(walk);
  };
  if (walk.unreplayable) {
    ++stats.walks;
    stats.lastReason = walk.unreplayable;
    keepBuffers();
    return BackwardStart::Walk;
  }
  if (const BackwardReplayCache::Entry *e =
          replayCache_->find(walk.hash, walk.key)) {
    if (!e->program) {
      ++stats.notReplayable;
      keepBuffers();
      return BackwardStart::Walk;
    }
    std::shared_ptr<const ReplayProgram> program = e->program;
    replayBackward(*program, walk, releaseGraph);
    ++stats.replays;
    keepBuffers();
    return BackwardStart::Replayed;
  }
  capture_ = std::make_unique<BackwardCapture>(std::move(walk));
  return BackwardStart::Capturing;
}

void Session::endBackwardCapture(bool completed) {
  if (!capture_)
    return;
  std::unique_ptr<BackwardCapture> capture = std::move(capture_);
  if (!completed)
    return;
  const char *why = nullptr;
  std::shared_ptr<const ReplayProgram> program = capture->finish(&why);
  BackwardReplayStats &stats = replayCache_->stats;
  if (program)
    ++stats.captures;
  else
    stats.lastReason = why;
  BackwardWalk &walk = capture->walk();
  replayCache_->insert(walk.hash, std::move(walk.key), std::move(program));
}

Session::BackwardReplayStats Session::backwardReplayStats() const {
  BackwardReplayStats out;
  if (replayCache_) {
    out = replayCache_->stats;
    out.entries = replayCache_->count;
  }
  return out;
}

void Session::replayBackward(const ReplayProgram &program, BackwardWalk &walk,
                             bool releaseGraph) {
  // As autograd.py's walk: no records of the backward's own ops.
  struct GradModeOff {
    bool was = gradEnabled();
    GradModeOff() { setGradEnabled(false); }
    ~GradModeOff() { setGradEnabled(was); }
  } off;
  const auto count = static_cast<int32_t>(program.nodes.size());
  std::vector<Tensor> results(program.nodes.size());
  std::vector<Tensor> &externals = walk.externals;
  auto ref = [&](ReplayRef r) -> const Tensor & {
    return r >= 0 ? results[r] : externals[-1 - r];
  };
  size_t nextAssignment = 0, nextRelease = 0;
  // What the Python walk did between two ops: .grad assignments, results
  // let go (so that a segment cut inside the backward sees the same
  // results alive).
  auto settle = [&](int32_t position) {
    for (; nextAssignment < program.assignments.size() &&
           program.assignments[nextAssignment].position == position;
         ++nextAssignment) {
      const ReplayGradAssignment &a = program.assignments[nextAssignment];
      externals[a.target]->grad = ref(a.value);
      if (a.dropExternal >= 0)
        externals[a.dropExternal].reset();
    }
    for (; nextRelease < program.releases.size() &&
           program.releases[nextRelease].first == position;
         ++nextRelease)
      results[program.releases[nextRelease].second].reset();
  };
  std::vector<Tensor> inputs;
  for (int32_t k = 0; k < count; ++k) {
    settle(k);
    const ReplayNode &node = program.nodes[k];
    inputs.clear();
    for (ReplayRef r : node.inputs)
      inputs.push_back(ref(r));
    Tensor result =
        addNode(node.op, inputs, node.attrs, node.meta, node.scalar);
    result->view = node.view;
    results[k] = std::move(result);
  }
  settle(count);
  if (releaseGraph)
    for (int32_t i : walk.order) {
      const Tensor &t = externals[i];
      if (!t || !t->gradFn)
        continue;
      t->gradFn->released = true;
      auto dropped = std::move(t->gradFn->inputs);
      t->gradFn->inputs.clear();
    }
}

} // namespace dtorch::client
