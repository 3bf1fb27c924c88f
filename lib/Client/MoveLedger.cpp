//===- MoveLedger.cpp - pairs the moves between meshes of the runs
//---------===//
#include "MoveLedger.h"

#include "dtorch/Client/Errors.h"

namespace dtorch::client {
namespace {

std::string specText(const wire::TensorSpec &t) {
  std::string s = wire::DType_Name(t.dtype()) + "[";
  for (int k = 0; k < t.shape_size(); ++k)
    s += (k ? "x" : "") + std::to_string(t.shape(k));
  return s + "]";
}

bool sameSpec(const wire::TensorSpec &a, const wire::TensorSpec &b) {
  if (a.dtype() != b.dtype() || a.shape_size() != b.shape_size())
    return false;
  for (int k = 0; k < a.shape_size(); ++k)
    if (a.shape(k) != b.shape(k))
      return false;
  return true;
}

/// The global rank of every position of `program`'s boxes, row-major
/// within each box.
std::vector<int64_t> ranksOf(const wire::Program &program,
                             const std::vector<int64_t> &meshRanks) {
  std::vector<int64_t> out;
  const auto &shape = program.mesh_shape();
  size_t n = static_cast<size_t>(shape.size());
  for (const wire::MeshBox &box : program.positions()) {
    if (static_cast<size_t>(box.lo_size()) != n ||
        static_cast<size_t>(box.hi_size()) != n)
      continue;
    std::vector<int64_t> coord(box.lo().begin(), box.lo().end());
    bool done = false;
    for (size_t a = 0; a < n; ++a)
      done |= box.lo(a) >= box.hi(a);
    while (!done) {
      int64_t index = 0;
      for (size_t a = 0; a < n; ++a)
        index = index * shape[a] + coord[a];
      if (index >= 0 && static_cast<size_t>(index) < meshRanks.size())
        out.push_back(meshRanks[index]);
      done = true;
      for (size_t a = n; a-- > 0;) {
        if (++coord[a] < box.hi(a)) {
          done = false;
          break;
        }
        coord[a] = box.lo(a);
      }
    }
  }
  return out;
}

} // namespace

std::vector<MoveLedger::Move>
MoveLedger::movesOf(const std::vector<wire::Program> &programs,
                    const std::vector<int64_t> &meshRanks,
                    const std::string &segment) {
  std::vector<Move> moves;
  for (const wire::Program &program : programs) {
    std::vector<int64_t> ranks;
    bool ranksKnown = false;
    std::string name = "@" + program.name() + " of " + segment;
    for (const wire::Instruction &inst : program.instructions()) {
      bool isSend = inst.op() == "send", isRecv = inst.op() == "recv";
      // A message on a mesh axis (a transfer inside the mesh) is paired by
      // --rank-match-p2p within the segment.
      if ((!isSend && !isRecv) || inst.attrs().count("axis"))
        continue;
      auto peer = inst.attrs().find("peer"), tag = inst.attrs().find("tag");
      if (peer == inst.attrs().end() || tag == inst.attrs().end())
        continue;
      int buffer = isSend ? (inst.inputs_size() ? inst.inputs(0) : -1)
                          : (inst.outputs_size() ? inst.outputs(0) : -1);
      if (buffer < 0 || buffer >= program.buffers_size())
        continue;
      if (!ranksKnown) {
        ranks = ranksOf(program, meshRanks);
        ranksKnown = true;
      }
      for (int64_t self : ranks)
        moves.push_back({self, peer->second.i(), tag->second.i(), isSend,
                         program.buffers(buffer), name});
    }
  }
  return moves;
}

void MoveLedger::admit(const std::vector<Move> &moves) {
  if (moves.empty())
    return;
  // Check every receive first (the ledger stays as it was on an error):
  // the k-th receive of a channel takes the k-th pending message.
  std::map<Channel, size_t> taken;
  for (const Move &m : moves) {
    if (m.isSend)
      continue;
    Channel channel{m.peer, m.self, m.tag};
    size_t k = taken[channel]++;
    auto it = channels_.find(channel);
    size_t available = it == channels_.end() ? 0 : it->second.size();
    std::string where =
        m.program + " at global rank " + std::to_string(m.self) + " receives " +
        specText(m.type) + " from global rank " + std::to_string(m.peer) +
        " (tag " + std::to_string(m.tag) + ")";
    if (k >= available)
      throw DTorchError(
          "unmatched move between meshes: " + where +
          ", but no program run "
          "before it sends that message (" +
          std::to_string(available) +
          " pending on the channel): the receive would wait forever; the "
          "segment did not run");
    const Sent &sent = it->second[k];
    if (!sameSpec(sent.type, m.type))
      throw DTorchError("mismatched move between meshes: " + where +
                        ", but the message it would take, sent by " +
                        sent.program + ", is " + specText(sent.type) +
                        "; the segment did not run");
  }
  for (const auto &[channel, count] : taken) {
    std::deque<Sent> &queue = channels_[channel];
    queue.erase(queue.begin(), queue.begin() + static_cast<long>(count));
    if (queue.empty())
      channels_.erase(channel);
  }
  for (const Move &m : moves)
    if (m.isSend)
      channels_[{m.self, m.peer, m.tag}].push_back({m.type, m.program});
}

size_t MoveLedger::pending() const {
  size_t n = 0;
  for (const auto &[channel, queue] : channels_)
    n += queue.size();
  return n;
}

} // namespace dtorch::client
