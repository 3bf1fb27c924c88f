//===- MoveLedger.h - pairs the moves between meshes of the runs -*- C++
//-*-===//
//
// A move between meshes (Session::moveToMesh, a pipeline stage's activation
// or gradient) is a send in one segment and a receive in another: each
// segment runs on its own mesh and compiles on its own, so no compile sees
// both halves, and --rank-match-p2p pairs only what one module holds. The
// controller therefore pairs them where they meet, in run order: every
// segment's class programs are admitted before they run; each receive that
// names a global rank takes the oldest message sent to it on its channel
// (sender, receiver, tag) by a program admitted before, and must have its
// type, or the segment is refused with an error naming both programs (the
// receive would wait forever or read the wrong bytes); its sends then wait
// for their receives. Messages are matched by channel in issue order on the
// workers too, so what the ledger admits is what the workers will pair.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "dtorch_program.pb.h"

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace dtorch::client {

class MoveLedger {
public:
  /// One send or receive that names a global rank, at one global rank.
  struct Move {
    int64_t self, peer, tag;
    bool isSend;
    wire::TensorSpec type;
    std::string program; // "@segment_class0 of program 12"
  };
  /// The moves of `programs` (the class programs of one segment, which
  /// runs on the mesh whose global ranks are `meshRanks`, row-major), each
  /// program's in issue order; `segment` names it in errors ("program 12").
  /// Empty for a segment that moves nothing between meshes.
  static std::vector<Move> movesOf(const std::vector<wire::Program> &programs,
                                   const std::vector<int64_t> &meshRanks,
                                   const std::string &segment);
  /// Pairs a segment's moves with the messages of the segments admitted
  /// before. Throws DTorchError, leaving the ledger as it was, when a
  /// receive has no message or one of another type.
  void admit(const std::vector<Move> &moves);
  /// Messages sent and not yet received.
  size_t pending() const;
  /// Forgets every message in flight (the workers' transports were
  /// replaced: dtorch.restart()).
  void clear() { channels_.clear(); }

private:
  struct Sent {
    wire::TensorSpec type;
    std::string program;
  };
  /// (sender, receiver, tag) in global ranks.
  using Channel = std::tuple<int64_t, int64_t, int64_t>;
  std::map<Channel, std::deque<Sent>> channels_;
};

} // namespace dtorch::client
