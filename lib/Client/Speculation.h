//===- Speculation.h - predicting the segment being recorded -----*- C++
//-*-===//
//
// The session's side of speculation (docs/speculation.md). While a segment
// records, its structural hash runs along (SegmentKey.h). SegmentPredictor
// keeps, for the last few segments flushed, that running hash at a few
// checkpoints (after 16, 32, 64 and 128 nodes, then every 128) and the
// segment's final hash. When the recording reaches a checkpoint and its
// running hash equals an earlier segment's at the same checkpoint (and at
// every checkpoint before), it asks the controller to start that segment's
// cached program on the arguments recorded so far; at later checkpoints that
// still match, it hands over the arguments recorded since. A checkpoint that
// differs ends the prediction for this segment. Between checkpoints the cost
// is one comparison of the node count per recorded node.
//
// DTORCH_SPECULATE=0 turns speculation off (speculationEnabled()).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch/Client/Session.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtorch::client {

class Controller;

/// False when DTORCH_SPECULATE is "0" (read once per process).
bool speculationEnabled();

class SegmentPredictor {
public:
  /// After a node was appended to `segment` (its hash folded in).
  void afterNode(const Segment &segment, Controller &controller) {
    if (segment.nodes.size() >= nextCheckpoint_)
      atCheckpoint(segment, controller);
  }
  /// When `segment` is cut (its final hash computed; nodes may be empty):
  /// remembers it and starts over for the next one.
  void onFlush(const Segment &segment);

  /// The node counts at which the running hash is compared.
  static size_t firstCheckpoint() { return 16; }
  static size_t checkpointAfter(size_t nodes) {
    return nodes < 128 ? 2 * nodes : nodes + 128;
  }

private:
  struct Record {
    int meshId = -1;
    uint64_t finalHash = 0;
    std::vector<uint64_t> checkpoints; // running hash at each checkpoint
  };
  void atCheckpoint(const Segment &segment, Controller &controller);

  std::vector<Record> history_; // most recent first, at most kHistory
  static constexpr size_t kHistory = 4;
  std::vector<uint64_t> current_; // this recording's checkpoints so far
  size_t nextCheckpoint_ = firstCheckpoint();
  int candidate_ = -1; // index into history_ while it matches
  bool mismatched_ = false;
  size_t argsSent_ = 0;
  bool started_ = false;
};

} // namespace dtorch::client
