//===- MatchPointToPoint.cpp - --rank-match-p2p ---------------------------===//
//
// Pairs every point-to-point send of the class programs of a module with
// its receive (Passes.td): a mismatched pair is a compile error, not a hang.
//
//===----------------------------------------------------------------------===//
#include "dtensor/Transforms/Passes.h"

#include "llvm/ADT/STLExtras.h"

#include <map>
#include <set>
#include <tuple>

namespace dtorch::dtensor {
#define GEN_PASS_DEF_MATCHPOINTTOPOINT
#include "dtensor/Transforms/Passes.h.inc"
} // namespace dtorch::dtensor

using namespace mlir;
namespace rank = dtorch::rank;

namespace {

/// One message a program sends or receives.
struct Message {
  Type type;
  Operation *op;
};

/// (axis, peer coordinate, tag, is a send): one channel of a program.
using Channel = std::tuple<int64_t, int64_t, int64_t, bool>;

struct ClassProgram {
  func::FuncOp fn;
  SmallVector<SmallVector<int64_t>> boxes; // [lo0, hi0, lo1, hi1, ...]
  std::map<Channel, SmallVector<Message>> channels;
};

/// The messages of `fn` per channel, in issue order.
std::map<Channel, SmallVector<Message>> messagesOf(func::FuncOp fn) {
  std::map<Channel, SmallVector<Message>> channels;
  fn.walk([&](Operation *op) {
    // A send or recv without an axis names a global rank: one side of a
    // move between two meshes, which the client pairs (dtensor.send).
    if (auto send = dyn_cast<rank::SendOp>(op)) {
      if (send.getAxis())
        channels[{*send.getAxis(), send.getPeer(), send.getTag(), true}]
            .push_back({send.getInput().getType(), op});
    } else if (auto recv = dyn_cast<rank::RecvOp>(op)) {
      if (recv.getAxis())
        channels[{*recv.getAxis(), recv.getPeer(), recv.getTag(), false}]
            .push_back({recv.getResult().getType(), op});
    } else if (auto batch = dyn_cast<rank::BatchSendRecvOp>(op)) {
      for (auto [peer, v] : llvm::zip(batch.getSendPeers(), batch.getInputs()))
        channels[{batch.getAxis(), peer, batch.getTag(), true}].push_back(
            {v.getType(), op});
      for (auto [peer, v] : llvm::zip(batch.getRecvPeers(), batch.getResults()))
        channels[{batch.getAxis(), peer, batch.getTag(), false}].push_back(
            {v.getType(), op});
    }
  });
  return channels;
}

/// Positions in the intersection of two boxes.
int64_t overlap(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  int64_t count = 1;
  for (size_t k = 0; k + 1 < a.size(); k += 2) {
    int64_t lo = std::max(a[k], b[k]), hi = std::min(a[k + 1], b[k + 1]);
    if (hi <= lo)
      return 0;
    count *= hi - lo;
  }
  return count;
}

int64_t volume(ArrayRef<int64_t> box) {
  int64_t count = 1;
  for (size_t k = 0; k + 1 < box.size(); k += 2)
    count *= box[k + 1] - box[k];
  return count;
}

std::string boxText(ArrayRef<int64_t> box) {
  std::string text = "[";
  for (size_t k = 0; k + 1 < box.size(); k += 2)
    text +=
        (k ? ", " : "") + std::to_string(box[k]) +
        (box[k + 1] - box[k] == 1 ? "" : ".." + std::to_string(box[k + 1] - 1));
  return text + "]";
}

/// Checks every channel of `from` against the programs at the peer
/// positions; emits a diagnostic at the first mismatch.
LogicalResult checkProgram(const ClassProgram &from,
                           ArrayRef<ClassProgram> programs) {
  for (const auto &[channel, messages] : from.channels) {
    auto [axis, peer, tag, isSend] = channel;
    const char *mine = isSend ? "sends" : "receives";
    const char *theirs = isSend ? "receives" : "sends";
    for (ArrayRef<int64_t> box : from.boxes) {
      int64_t self = box[2 * axis];
      SmallVector<int64_t> peerBox(box.begin(), box.end());
      peerBox[2 * axis] = peer;
      peerBox[2 * axis + 1] = peer + 1;
      int64_t covered = 0;
      for (const ClassProgram &other : programs) {
        int64_t shared = 0;
        for (ArrayRef<int64_t> b : other.boxes)
          shared += overlap(peerBox, b);
        if (!shared)
          continue;
        covered += shared;
        auto it = other.channels.find({axis, self, tag, !isSend});
        ArrayRef<Message> matched;
        if (it != other.channels.end())
          matched = it->second;
        std::string where = "@" + func::FuncOp(other.fn).getSymName().str() +
                            " at positions " + boxText(peerBox);
        for (size_t k = 0; k < messages.size(); ++k) {
          if (k >= matched.size())
            return messages[k].op->emitOpError()
                   << mine << " " << messages.size() << " message(s) on axis "
                   << axis << " with tag " << tag << " to coordinate " << peer
                   << " but " << where << " " << theirs << " " << matched.size()
                   << ": message " << k << " (" << messages[k].type
                   << ") is unmatched";
          if (matched[k].type != messages[k].type)
            return messages[k].op->emitOpError()
                   << mine << " " << messages[k].type << " (message " << k
                   << " on axis " << axis << ", tag " << tag << ") but "
                   << where << " " << theirs << " " << matched[k].type;
        }
        if (matched.size() > messages.size())
          return matched[messages.size()].op->emitOpError()
                 << theirs << " " << matched.size() << " message(s) on axis "
                 << axis << " with tag " << tag << " but @"
                 << func::FuncOp(from.fn).getSymName() << " at coordinate "
                 << self << " " << mine << " " << messages.size()
                 << ": message " << messages.size() << " is unmatched";
      }
      if (covered != volume(peerBox))
        return messages.front().op->emitOpError()
               << mine << " on axis " << axis << " with peer " << peer
               << " but no program runs at positions " << boxText(peerBox);
    }
  }
  return success();
}

/// A message between global ranks (a move between meshes): one side.
struct GlobalMessage {
  Type type;
  Operation *op;
  func::FuncOp fn;
};

/// (sender, receiver, tag) in global ranks.
using GlobalChannel = std::tuple<int64_t, int64_t, int64_t>;

struct GlobalMessages {
  std::map<GlobalChannel, SmallVector<GlobalMessage>> sends, receives;
  /// The functions that run at each global rank, in module order.
  std::map<int64_t, SmallVector<func::FuncOp>> programs;
};

/// Adds the axis-less sends and receives of `fn`, at every position it runs,
/// to `out` (the dialect verified that `rank.global_ranks` fits the mesh).
void collectGlobalMessages(func::FuncOp fn, GlobalMessages &out) {
  auto ranks = fn->getAttrOfType<DenseI64ArrayAttr>(rank::kGlobalRanksAttrName);
  auto mesh = fn->getAttrOfType<DenseI64ArrayAttr>(rank::kMeshAttrName);
  auto positions = fn->getAttrOfType<ArrayAttr>(rank::kPositionsAttrName);
  if (!ranks || !mesh || !positions)
    return;
  SmallVector<std::pair<Operation *, bool>> ops; // (op, is a send)
  fn.walk([&](Operation *op) {
    if (auto send = dyn_cast<rank::SendOp>(op); send && !send.getAxis())
      ops.push_back({op, true});
    else if (auto recv = dyn_cast<rank::RecvOp>(op); recv && !recv.getAxis())
      ops.push_back({op, false});
  });
  ArrayRef<int64_t> shape = mesh.asArrayRef();
  for (Attribute b : positions) {
    auto box = dyn_cast<DenseI64ArrayAttr>(b);
    if (!box || box.size() != (int64_t)(2 * shape.size()))
      continue;
    // Every position of the box, row-major.
    SmallVector<int64_t> coord;
    for (size_t a = 0; a < shape.size(); ++a)
      coord.push_back(box[2 * a]);
    bool done = volume(box.asArrayRef()) == 0;
    while (!done) {
      int64_t index = 0;
      for (size_t a = 0; a < shape.size(); ++a)
        index = index * shape[a] + coord[a];
      int64_t me = ranks[index];
      SmallVector<func::FuncOp> &here = out.programs[me];
      if (!llvm::is_contained(here, fn))
        here.push_back(fn);
      for (auto [op, isSend] : ops) {
        if (isSend) {
          auto send = cast<rank::SendOp>(op);
          out.sends[{me, send.getPeer(), send.getTag()}].push_back(
              {send.getInput().getType(), op, fn});
        } else {
          auto recv = cast<rank::RecvOp>(op);
          out.receives[{recv.getPeer(), me, recv.getTag()}].push_back(
              {recv.getResult().getType(), op, fn});
        }
      }
      done = true;
      for (size_t a = shape.size(); a-- > 0;) {
        if (++coord[a] < box[2 * a + 1]) {
          done = false;
          break;
        }
        coord[a] = box[2 * a];
      }
    }
  }
}

/// "@f" or "@f, @g": the functions of a module that run at a global rank.
std::string programsText(ArrayRef<func::FuncOp> fns) {
  std::string text;
  for (func::FuncOp fn : fns)
    text += (text.empty() ? "@" : ", @") + fn.getSymName().str();
  return text;
}

/// Pairs the messages between global ranks: same count, types and order
/// on every channel whose two ranks both run a function of the module. Every
/// diagnostic names the program of each side.
LogicalResult checkGlobalMessages(const GlobalMessages &all) {
  auto name = [](func::FuncOp fn) { return "@" + fn.getSymName().str(); };
  for (const auto &[channel, sends] : all.sends) {
    auto [from, to, tag] = channel;
    auto there = all.programs.find(to);
    if (there == all.programs.end())
      continue;
    auto it = all.receives.find(channel);
    ArrayRef<GlobalMessage> receives;
    if (it != all.receives.end())
      receives = it->second;
    for (size_t k = 0; k < sends.size(); ++k) {
      if (k >= receives.size())
        return sends[k].op->emitOpError()
               << "in " << name(sends[k].fn) << " sends " << sends.size()
               << " message(s) from global rank " << from << " to global rank "
               << to << " with tag " << tag << " but "
               << programsText(there->second) << " at global rank " << to
               << " receive(s) " << receives.size() << ": message " << k << " ("
               << sends[k].type << ") is unmatched";
      if (receives[k].type != sends[k].type)
        return sends[k].op->emitOpError()
               << "in " << name(sends[k].fn) << " sends " << sends[k].type
               << " from global rank " << from << " to global rank " << to
               << " (message " << k << ", tag " << tag << ") but "
               << name(receives[k].fn) << " receives " << receives[k].type;
    }
  }
  for (const auto &[channel, receives] : all.receives) {
    auto [from, to, tag] = channel;
    auto there = all.programs.find(from);
    if (there == all.programs.end())
      continue;
    auto it = all.sends.find(channel);
    size_t sent = it == all.sends.end() ? 0 : it->second.size();
    if (receives.size() > sent)
      return receives[sent].op->emitOpError()
             << "in " << name(receives[sent].fn) << " receives "
             << receives.size() << " message(s) from global rank " << from
             << " at global rank " << to << " with tag " << tag << " but "
             << programsText(there->second) << " at global rank " << from
             << " send(s) " << sent << ": message " << sent << " is unmatched";
  }
  return success();
}

struct MatchPointToPointPass
    : public dtorch::dtensor::impl::MatchPointToPointBase<
          MatchPointToPointPass> {
  void runOnOperation() override {
    // Moves between meshes, across every function that names its ranks.
    GlobalMessages global;
    for (func::FuncOp fn : getOperation().getOps<func::FuncOp>())
      collectGlobalMessages(fn, global);
    if (failed(checkGlobalMessages(global)))
      return signalPassFailure();

    SmallVector<ClassProgram> programs;
    bool any = false;
    for (func::FuncOp fn : getOperation().getOps<func::FuncOp>()) {
      auto positions = fn->getAttrOfType<ArrayAttr>(rank::kPositionsAttrName);
      if (!positions)
        continue;
      ClassProgram program{fn, {}, messagesOf(fn)};
      any |= !program.channels.empty();
      for (Attribute b : positions)
        if (auto box = dyn_cast<DenseI64ArrayAttr>(b))
          program.boxes.emplace_back(box.asArrayRef());
      programs.push_back(std::move(program));
    }
    if (!any)
      return;
    // The class programs of one segment share a prefix (@f_class<k>); a
    // module may hold several segments, each matched on its own.
    auto segmentOf = [](func::FuncOp fn) {
      StringRef name = fn.getSymName();
      size_t at = name.rfind("_class");
      return at == StringRef::npos ? name : name.take_front(at);
    };
    std::map<std::string, SmallVector<ClassProgram>> segments;
    for (ClassProgram &p : programs)
      segments[segmentOf(p.fn).str()].push_back(std::move(p));
    for (auto &[name, group] : segments)
      for (const ClassProgram &p : group)
        if (failed(checkProgram(p, group)))
          return signalPassFailure();
  }
};

} // namespace
