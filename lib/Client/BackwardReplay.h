//===- BackwardReplay.h - backward() recorded once, replayed after -*- C++
//-*-===//
//
// The ops a backward() records are a function of the structure of the graph
// it walks: each record's op, attributes and scalar operand, the shape,
// dtype, mesh, placements and view of every tensor a formula may read,
// which tensors require grad, retain their gradient or are the same tensor,
// the root gradients and the leaves' existing .grad. walkBackward() visits
// the records as python/dtorch/autograd.py does and spells that structure
// out as a key. The first backward of a structure runs the Python walk
// while a BackwardCapture watches Session::addNode: it keeps each recorded
// op with its operands as references (a tensor of the walk by position, or
// an op recorded before), when each result was let go, and when each .grad
// was assigned. A later backward with the same key records the same ops in
// the same order through addNode (Session::replayBackward), with no formula
// evaluated: the same segment, so the same cached program and the same
// bits.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/Client/RecordPool.h"
#include "dtorch/Client/Session.h"

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace dtorch::client {

/// An operand of a replayed op: the result of replayed op k (k >= 0) or the
/// walk's external tensor i (-1 - i).
using ReplayRef = int32_t;
inline ReplayRef externalRef(int32_t index) { return -1 - index; }

/// One op the backward recorded, as addNode received it.
struct ReplayNode {
  std::string op;
  std::vector<ReplayRef> inputs;
  Attrs attrs;
  TensorMeta meta;
  ScalarOperand scalar;
  /// The result's view after the op's binding set it.
  int view = -1;
};

/// `.grad` of external `target` became `value`, before op `position`
/// (or after the last op when position == the number of ops). The old
/// gradient, when only a gradient in the walk (`dropExternal` >= 0), is let
/// go then as Python lets it go.
struct ReplayGradAssignment {
  int32_t position = 0;
  int32_t target = 0;
  ReplayRef value = 0;
  int32_t dropExternal = -1;
};

/// What a captured backward does, replayable from a walk of the same key.
struct ReplayProgram {
  std::vector<ReplayNode> nodes;
  std::vector<ReplayGradAssignment> assignments; // by position
  /// (position, op): op k's result was let go before op `position` (the
  /// number of ops: at the end), sorted by position.
  std::vector<std::pair<int32_t, int32_t>> releases;
};

/// One backward's walk: the external tensors (every tensor the formulas
/// may read, each once, in walk order), the tensors whose records the walk
/// visits (Python's topological order) and the structural key.
struct BackwardWalk {
  /// What the walk found each external to be (ORed).
  enum Role : uint8_t {
    Root = 1,
    RootGrad = 2,
    Walked = 4,
    Operand = 8,
    Gradient = 16
  };
  std::vector<Tensor> externals;
  std::vector<uint8_t> roles;
  /// Its nodes from the record pool (RecordPool.h): a backward adds one
  /// per external tensor and drops them all at its end.
  std::unordered_map<const TensorImpl *, int32_t, std::hash<const TensorImpl *>,
                     std::equal_to<const TensorImpl *>,
                     PoolAllocator<std::pair<const TensorImpl *const, int32_t>>>
      index;
  /// Empties it, keeping the capacity of its vectors (the session keeps
  /// the buffers of replayed walks for the next backward).
  void clear();
  /// Externals with a record, in the order autograd.py's _topological
  /// lists them (each after the tensors it was computed from).
  std::vector<int32_t> order;
  /// Externals whose .grad the walk may assign (leaves and tensors that
  /// retain their gradient, among the walked).
  std::vector<int32_t> gradTargets;
  std::vector<uint64_t> key;
  uint64_t hash = 0;
  /// Set when this backward cannot be replayed (the Python walk decides).
  const char *unreplayable = nullptr;
};

/// The walk of a backward from `roots` with gradients `rootGrads`.
BackwardWalk walkBackward(const std::vector<Tensor> &roots,
                          const std::vector<Tensor> &rootGrads);
/// The same into `w` (cleared first), reusing its buffers.
void walkBackward(const std::vector<Tensor> &roots,
                  const std::vector<Tensor> &rootGrads, BackwardWalk &w);

/// Watches Session::addNode while autograd.py walks a backward.
class BackwardCapture {
public:
  explicit BackwardCapture(BackwardWalk walk);
  /// At the start of addNode (before it may cut the segment): notes the
  /// results let go and the .grad assigned since the last op.
  void beforeNode();
  void afterNode(const Node &node, TensorList inputs, const Tensor &result,
                 bool recordingResults);
  /// The pending segment is being cut: by addNode itself (its size bound
  /// or a mesh change), which the replay's addNode calls repeat, or by
  /// anything else (the capture cannot be replayed).
  void noteCut() {
    if (!insideNode_)
      invalidate("the segment was cut during the backward");
  }
  /// The capture cannot be replayed (the first reason is kept).
  void invalidate(const char *why) {
    if (!why_)
      why_ = why;
  }
  /// After the walk: the program, or null with the reason in `why`.
  std::shared_ptr<const ReplayProgram> finish(const char **why);
  BackwardWalk &walk() { return walk_; }

private:
  /// The reference of an operand or assigned gradient; fails (invalidates)
  /// for a tensor neither external nor recorded by this backward.
  ReplayRef resolve(const Tensor &t);
  /// Notes, before op `position`, what changed since the last op.
  void settle(int32_t position);

  BackwardWalk walk_;
  ReplayProgram program_;
  std::unordered_map<const TensorImpl *, int32_t> resultIndex_;
  std::vector<std::weak_ptr<TensorImpl>> results_;
  std::vector<std::weak_ptr<TensorStorage>> storages_;
  std::vector<int32_t> alive_;
  std::vector<const TensorImpl *> lastGrad_; // per gradTargets entry
  const char *why_ = nullptr;
  /// Between beforeNode and afterNode: inside addNode.
  bool insideNode_ = false;
};

/// The captured programs of a session, by key (a structure found not
/// replayable is kept too, with no program, so it is not captured again).
struct BackwardReplayCache {
  struct Entry {
    std::vector<uint64_t> key;
    std::shared_ptr<const ReplayProgram> program;
  };
  const Entry *find(uint64_t hash, const std::vector<uint64_t> &key) const;
  void insert(uint64_t hash, std::vector<uint64_t> key,
              std::shared_ptr<const ReplayProgram> program);
  std::unordered_map<uint64_t, std::vector<Entry>> entries;
  size_t count = 0;
  Session::BackwardReplayStats stats;
  /// The buffers of the last replayed walk (cleared), for the next one.
  BackwardWalk spareWalk;
};

/// Whether backward() replays (on unless DTORCH_BACKWARD_REPLAY is "0";
/// python/dtorch/autograd.py reads it at each backward).
bool backwardReplayEnabled();

} // namespace dtorch::client
