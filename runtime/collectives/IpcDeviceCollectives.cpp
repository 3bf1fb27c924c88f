// Collectives between processes that share one device, through exported
// device arenas (IpcDeviceCollectives.h). The rounds' sequencing lives in a
// host shared-memory segment per group (HostSharedMemorySegment.h); the data
// moves device to device through DeviceIpc.
#include "dtorch/runtime/IpcDeviceCollectives.h"

#include "HostSharedMemorySegment.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>

namespace dtorch::rt {

namespace {

using hostshm::MemberControl;
using hostshm::RoundHeader;
using hostshm::Segment;
using hostshm::SegmentKind;

constexpr size_t kArenaSlots = 2; // rounds in flight per member
constexpr size_t kPairChunks = 4; // chunks in flight per sender -> receiver
constexpr size_t kControlChunk = 4096; // the segments carry no data

enum Op : uint32_t {
  kAllReduce = 1,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
};

size_t roundUp(size_t value, size_t to) {
  return value == 0 ? to : (value + to - 1) / to * to;
}

bool reached(const std::atomic<uint32_t> &counter, uint32_t target) {
  return static_cast<int32_t>(counter.load(std::memory_order_acquire) -
                              target) >= 0;
}

std::string ranksToString(const std::vector<int64_t> &ranks) {
  std::string text;
  for (int64_t r : ranks)
    text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

std::string groupKeyPart(const Group &group) {
  std::string key;
  for (int64_t r : group)
    key += (key.empty() ? "" : ",") + std::to_string(r);
  return key;
}

// Rows of `rowBytes` bytes, `pitch` apart, from `base`: the bytes of a piece
// of a tensor cut along one dim, in row-major order.
struct View {
  char *base = nullptr;
  size_t rowBytes = 0;
  size_t pitch = 0;
  size_t rows = 0;
  size_t bytes() const { return rowBytes * rows; }
};

// The piece [offset, offset + extent) along `dim` of a tensor of `shape`
// at `base`.
View viewAlong(void *base, const std::vector<int64_t> &shape, size_t elem,
               int64_t dim, int64_t offset, int64_t extent) {
  if (dim < 0 || dim >= static_cast<int64_t>(shape.size()))
    throw RuntimeError("device ipc: dim " + std::to_string(dim) +
                       " does not fit a tensor of rank " +
                       std::to_string(shape.size()));
  size_t outer = 1, inner = elem;
  for (int64_t d = 0; d < dim; ++d)
    outer *= static_cast<size_t>(shape[d]);
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d)
    inner *= static_cast<size_t>(shape[d]);
  if (offset < 0 || extent < 0 || offset + extent > shape[dim])
    throw RuntimeError("device ipc: a piece exceeds its tensor along dim " +
                       std::to_string(dim));
  View v;
  v.base = static_cast<char *>(base) + static_cast<size_t>(offset) * inner;
  v.rowBytes = static_cast<size_t>(extent) * inner;
  v.pitch = static_cast<size_t>(shape[dim]) * inner;
  v.rows = outer;
  return v;
}

std::vector<int64_t> prefixSums(const std::vector<int64_t> &sizes) {
  std::vector<int64_t> sums(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i)
    sums[i + 1] = sums[i] + sizes[i];
  return sums;
}

// A peer rank's arena and event, mapped into this process (or, when the
// peer is a rank of this process, its own).
struct PeerArena {
  void *arena = nullptr;
  size_t bytes = 0;
  std::string handle; // of the memory, to release it
  bool local = false;
  std::shared_ptr<IpcEvent> event;
};

// Memory and events by handle, for the whole process: what its
// communicators exported (a member of the same process uses them as they
// are: CUDA opens no handle in the process that exported it) and what they
// opened of other processes (once per process, as CUDA allows, closed when
// the last user lets go).
class ProcessHandles {
public:
  void exportedMemory(const std::string &handle, void *data) {
    std::lock_guard<std::mutex> lock(mutex_);
    own_[handle] = data;
  }
  void exportedEvent(const std::string &handle,
                     const std::shared_ptr<IpcEvent> &event) {
    std::lock_guard<std::mutex> lock(mutex_);
    events_[handle] = event;
  }
  void forget(const std::string &handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    own_.erase(handle);
    events_.erase(handle);
  }
  // The memory behind `handle`: this process's own (`local`), or opened
  // through `ipc` on first use.
  void *acquire(DeviceIpc &ipc, const std::string &handle, size_t bytes,
                bool &local) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto own = own_.find(handle);
    local = own != own_.end();
    if (local)
      return own->second;
    Opened &opened = opened_[handle];
    if (opened.users == 0) {
      try {
        opened.data = ipc.openPeer(handle, bytes);
      } catch (...) {
        opened_.erase(handle);
        throw;
      }
      opened.bytes = bytes;
    }
    ++opened.users;
    return opened.data;
  }
  void release(DeviceIpc &ipc, const std::string &handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = opened_.find(handle);
    if (it == opened_.end())
      return; // this process's own
    if (--it->second.users == 0) {
      ipc.closePeer(it->second.data, it->second.bytes);
      opened_.erase(it);
    }
  }
  // The event behind `handle`: this process's own, or opened through `ipc`
  // while no communicator of the process holds it.
  std::shared_ptr<IpcEvent> event(DeviceIpc &ipc, const std::string &handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::weak_ptr<IpcEvent> &slot = events_[handle];
    std::shared_ptr<IpcEvent> event = slot.lock();
    if (!event) {
      event = ipc.openPeerEvent(handle);
      slot = event;
    }
    return event;
  }

private:
  struct Opened {
    void *data = nullptr;
    size_t bytes = 0;
    int users = 0;
  };
  std::mutex mutex_;
  std::map<std::string, void *> own_;
  std::map<std::string, std::weak_ptr<IpcEvent>> events_;
  std::map<std::string, Opened> opened_;
};

ProcessHandles &processHandles() {
  static auto *handles = new ProcessHandles;
  return *handles;
}

// One group, as this rank sees it.
struct Channel {
  std::unique_ptr<Segment> segment;
  Group group;
  size_t me = 0;
  uint32_t round = 0;      // rounds completed on the segment (wraps)
  uint64_t roundsEver = 0; // the same, without wrapping
  uint64_t calls = 0;
  std::string broken;
  std::vector<PeerArena *> peers; // by member; null for this rank
};

// One direction of point to point, as one of its ends sees it.
struct PairChannel {
  std::unique_ptr<Segment> segment;
  uint32_t chunks = 0; // chunks posted (sender) or taken (receiver)
  std::string broken;
  // Sender: its buffer; receiver: the sender's, mapped (or, when the sender
  // is a rank of this process, its own).
  void *buffer = nullptr;
  std::string bufferHandle; // receiver: to release it
  size_t bufferBytes = 0;
  // Receiver: messages read past while looking for another tag.
  std::map<int64_t, std::deque<Tensor>> stash;
};

// What a member contributes and what it does with everyone's rounds.
struct Plan {
  uint32_t op = 0;
  DType dtype = ::dtorch::wire::DTYPE_INVALID;
  uint32_t reduce = 0;
  uint64_t length = 0;                // bytes of this member's stream
  std::vector<uint64_t> pieceOffsets; // posted (all_to_all), n + 1 entries
  // Copies this member's stream bytes [from, to) to `slot`.
  std::function<void(uint64_t from, uint64_t to, char *slot)> produce;
  // Every member's header, after the first round's posting.
  std::function<void(const std::vector<const RoundHeader *> &)> check;
  // The round starting at stream byte `begin` (every member's slot in group
  // order); not used by an owned all_reduce.
  std::function<void(uint64_t begin, const std::vector<const char *> &)>
      consume;
  // all_reduce through owners: the output, written chunk by chunk.
  char *ownedOut = nullptr;
};

class IpcDeviceComm final : public IpcDeviceCommunicator {
public:
  IpcDeviceComm(int rank, DeviceIpc &ipc, std::shared_ptr<KeyValueStore> store,
                const IpcDeviceOptions &options)
      : rank_(rank), ipc_(ipc), store_(std::move(store)), options_(options) {
    options_.chunkBytes = roundUp(options_.chunkBytes, 4096);
    options_.p2pChunkBytes = roundUp(options_.p2pChunkBytes, 4096);
    prefix_ = options_.prefix;
  }

  ~IpcDeviceComm() override {
    dropAll();
    processHandles().forget(arenaHandle_);
    processHandles().forget(eventHandle_);
    for (auto &[peer, handle] : sendHandles_)
      processHandles().forget(handle);
    if (arena_)
      ipc_.freeExported(arena_, arenaBytes());
    for (auto &[peer, buffer] : sendBuffers_)
      ipc_.freeExported(buffer, pairBytes());
  }

  int rank() const override { return rank_; }

  IpcDeviceStats stats() const override {
    std::lock_guard<std::mutex> lock(statsMutex_);
    return stats_;
  }

  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override {
    checkReducible(x.dtype(), op);
    sameSize(x, out, "all_reduce");
    Channel &ch = channel(group, "all_reduce");
    Plan plan = basePlan(kAllReduce, x.dtype(), op, x.nbytes());
    const char *in = static_cast<const char *>(x.data());
    plan.produce = [this, in](uint64_t from, uint64_t to, char *slot) {
      copyFlat(slot, in + from, to - from);
    };
    plan.check = sameLengths(plan.length);
    char *o = static_cast<char *>(out.data());
    size_t elem = dtypeSize(x.dtype());
    DType dtype = x.dtype();
    if (x.nbytes() > options_.directReduceBytes && group.size() > 1) {
      plan.ownedOut = o;
    } else {
      uint64_t bytes = x.nbytes();
      plan.consume = [this, o, elem, dtype, op, bytes,
                      &ch](uint64_t begin,
                           const std::vector<const char *> &slots) {
        uint64_t len = begin < bytes ? std::min<uint64_t>(options_.chunkBytes,
                                                          bytes - begin)
                                     : 0;
        reduceInto(o + begin, slots, 0, len / elem, dtype, op, ch);
      };
    }
    run(ch, plan, "all_reduce");
  }

  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override {
    Channel &ch = channel(group, "all_gather");
    checkSizes(sizes, group, "all_gather");
    size_t elem = dtypeSize(out.dtype());
    std::vector<int64_t> offsets = prefixSums(sizes);
    std::vector<View> targets;
    for (size_t j = 0; j < group.size(); ++j)
      targets.push_back(
          viewAlong(out.data(), out.shape(), elem, dim, offsets[j], sizes[j]));
    if (x.nbytes() != targets[ch.me].bytes())
      throw RuntimeError(where(ch, "all_gather") + ": the input " +
                         x.describe() + " is not this member's piece of " +
                         out.describe());
    Plan plan = basePlan(kAllGather, x.dtype(), ReduceOp::Sum, x.nbytes());
    const char *in = static_cast<const char *>(x.data());
    plan.produce = [this, in](uint64_t from, uint64_t to, char *slot) {
      copyFlat(slot, in + from, to - from);
    };
    plan.check = [this, targets,
                  &ch](const std::vector<const RoundHeader *> &headers) {
      for (size_t j = 0; j < headers.size(); ++j)
        if (headers[j]->length != targets[j].bytes())
          throw RuntimeError(where(ch, "all_gather") + ": rank " +
                             std::to_string(ch.group[j]) + " sends " +
                             std::to_string(headers[j]->length) +
                             " bytes, its piece has " +
                             std::to_string(targets[j].bytes()));
    };
    plan.consume = [this, targets](uint64_t begin,
                                   const std::vector<const char *> &slots) {
      for (size_t j = 0; j < slots.size(); ++j) {
        uint64_t end =
            std::min<uint64_t>(begin + options_.chunkBytes, targets[j].bytes());
        if (begin < end)
          moveRange(targets[j], begin, end, const_cast<char *>(slots[j]), true);
      }
    };
    run(ch, plan, "all_gather");
  }

  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override {
    checkReducible(x.dtype(), op);
    Channel &ch = channel(group, "reduce_scatter");
    checkSizes(sizes, group, "reduce_scatter");
    size_t elem = dtypeSize(x.dtype());
    std::vector<int64_t> offsets = prefixSums(sizes);
    // The stream: piece 0, piece 1, ... of x (each laid out contiguously).
    std::vector<View> pieces;
    std::vector<uint64_t> streamOffsets = {0};
    for (size_t i = 0; i < group.size(); ++i) {
      pieces.push_back(viewAlong(const_cast<void *>(x.data()), x.shape(), elem,
                                 dim, offsets[i], sizes[i]));
      streamOffsets.push_back(streamOffsets.back() + pieces.back().bytes());
    }
    if (out.nbytes() != pieces[ch.me].bytes())
      throw RuntimeError(where(ch, "reduce_scatter") + ": the output " +
                         out.describe() + " is not this member's piece of " +
                         x.describe());
    Plan plan = basePlan(kReduceScatter, x.dtype(), op, streamOffsets.back());
    plan.produce = [this, pieces, streamOffsets](uint64_t from, uint64_t to,
                                                 char *slot) {
      produceFromPieces(pieces, streamOffsets, from, to, slot);
    };
    plan.check = sameLengths(plan.length);
    char *o = static_cast<char *>(out.data());
    uint64_t mineFrom = streamOffsets[ch.me], mineTo = streamOffsets[ch.me + 1];
    DType dtype = x.dtype();
    plan.consume = [this, o, mineFrom, mineTo, elem, dtype, op, &ch](
                       uint64_t begin, const std::vector<const char *> &slots) {
      uint64_t end = begin + options_.chunkBytes;
      uint64_t from = std::max(begin, mineFrom), to = std::min(end, mineTo);
      if (from >= to)
        return;
      reduceInto(o + (from - mineFrom), slots, from - begin, (to - from) / elem,
                 dtype, op, ch);
    };
    run(ch, plan, "reduce_scatter");
  }

  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override {
    Channel &ch = channel(group, "all_to_all");
    checkSizes(splitSizes, group, "all_to_all");
    checkSizes(concatSizes, group, "all_to_all");
    size_t elem = dtypeSize(x.dtype());
    std::vector<int64_t> split = prefixSums(splitSizes);
    std::vector<int64_t> concat = prefixSums(concatSizes);
    std::vector<View> pieces, targets;
    std::vector<uint64_t> streamOffsets = {0};
    for (size_t i = 0; i < group.size(); ++i) {
      pieces.push_back(viewAlong(const_cast<void *>(x.data()), x.shape(), elem,
                                 splitDim, split[i], splitSizes[i]));
      streamOffsets.push_back(streamOffsets.back() + pieces.back().bytes());
      targets.push_back(viewAlong(out.data(), out.shape(), elem, concatDim,
                                  concat[i], concatSizes[i]));
    }
    Plan plan =
        basePlan(kAllToAll, x.dtype(), ReduceOp::Sum, streamOffsets.back());
    plan.pieceOffsets = streamOffsets;
    plan.produce = [this, pieces, streamOffsets](uint64_t from, uint64_t to,
                                                 char *slot) {
      produceFromPieces(pieces, streamOffsets, from, to, slot);
    };
    // Where member j's piece for this member starts and ends in j's stream.
    auto ranges =
        std::make_shared<std::vector<std::pair<uint64_t, uint64_t>>>();
    size_t n = group.size();
    plan.check = [this, targets, ranges, n,
                  &ch](const std::vector<const RoundHeader *> &headers) {
      for (size_t j = 0; j < n; ++j) {
        uint64_t from = headers[j]->pieceOffsets[ch.me],
                 to = headers[j]->pieceOffsets[ch.me + 1];
        if (to < from || to - from != targets[j].bytes())
          throw RuntimeError(where(ch, "all_to_all") + ": rank " +
                             std::to_string(ch.group[j]) + " sends " +
                             std::to_string(to - from) +
                             " bytes to this member, its piece has " +
                             std::to_string(targets[j].bytes()));
        ranges->push_back({from, to});
      }
    };
    plan.consume = [this, targets, ranges](
                       uint64_t begin, const std::vector<const char *> &slots) {
      uint64_t end = begin + options_.chunkBytes;
      for (size_t j = 0; j < slots.size(); ++j) {
        auto [pieceFrom, pieceTo] = (*ranges)[j];
        uint64_t from = std::max(begin, pieceFrom), to = std::min(end, pieceTo);
        if (from < to)
          moveRange(targets[j], from - pieceFrom, to - pieceFrom,
                    const_cast<char *>(slots[j]) + (from - begin), true);
      }
    };
    run(ch, plan, "all_to_all");
  }

  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override {
    size_t rootIndex = groupIndexOf(group, root);
    Channel &ch = channel(group, "broadcast");
    bool isRoot = ch.me == rootIndex;
    if (isRoot && (!x.defined() || x.nbytes() != out.nbytes()))
      throw RuntimeError(where(ch, "broadcast") +
                         ": the root's input does "
                         "not match the output " +
                         out.describe());
    Plan plan = basePlan(kBroadcast, out.dtype(), ReduceOp::Sum,
                         isRoot ? x.nbytes() : 0);
    if (isRoot) {
      const char *in = static_cast<const char *>(x.data());
      plan.produce = [this, in](uint64_t from, uint64_t to, char *slot) {
        copyFlat(slot, in + from, to - from);
      };
    }
    uint64_t bytes = out.nbytes();
    plan.check = [this, rootIndex, bytes,
                  &ch](const std::vector<const RoundHeader *> &headers) {
      if (headers[rootIndex]->length != bytes)
        throw RuntimeError(where(ch, "broadcast") + ": the root sends " +
                           std::to_string(headers[rootIndex]->length) +
                           " bytes, " + std::to_string(bytes) + " expected");
    };
    char *o = static_cast<char *>(out.data());
    plan.consume = [this, o, bytes, rootIndex](
                       uint64_t begin, const std::vector<const char *> &slots) {
      uint64_t end = std::min<uint64_t>(begin + options_.chunkBytes, bytes);
      if (begin < end)
        copyFlat(o + begin, slots[rootIndex], end - begin);
    };
    run(ch, plan, "broadcast");
  }

  void send(const Tensor &x, int64_t peer, int64_t tag) override {
    refreshPrefix();
    PairChannel &pc = pair(rank_, peer, "send");
    guardedPair(pc, "send", peer, [&] {
      Segment &seg = *pc.segment;
      Stream &stream = ipc_.device().currentStream();
      const char *in = static_cast<const char *>(x.data());
      uint64_t bytes = x.nbytes(), chunk = options_.p2pChunkBytes;
      uint64_t chunks = std::max<uint64_t>(1, (bytes + chunk - 1) / chunk);
      for (uint64_t c = 0; c < chunks; ++c) {
        uint32_t n = pc.chunks;
        // The chunk's place is free once the receiver took chunk n - K.
        if (n >= kPairChunks) {
          waitCounter(seg, 1, &MemberControl::done,
                      n - static_cast<uint32_t>(kPairChunks) + 1,
                      [&](const std::string &why) {
                        return "send of rank " + std::to_string(rank_) +
                               " to rank " + std::to_string(peer) + ": " + why;
                      },
                      {peer});
          peerEventOf(peer).waitOn(stream);
        }
        size_t place = n % kPairChunks;
        uint64_t from = c * chunk, len = std::min(chunk, bytes - from);
        char *dst = static_cast<char *>(pc.buffer) + place * chunk;
        if (len)
          copyFlat(dst, in + from, len);
        RoundHeader &h = seg.roundHeader(0, n % hostshm::kSlots);
        h.call = static_cast<uint64_t>(tag);
        h.length = bytes;
        h.pieceOffsets[0] = from;
        h.dtype = static_cast<uint32_t>(x.dtype());
        myEvent().record(stream);
        pc.chunks = n + 1;
        seg.publish(seg.control(0).posted, pc.chunks);
      }
      finishOnDevice([&] {
        return "send of rank " + std::to_string(rank_) + " to rank " +
               std::to_string(peer);
      });
      countMessage();
    });
  }

  void recv(Tensor &out, int64_t peer, int64_t tag) override {
    refreshPrefix();
    PairChannel &pc = pair(peer, rank_, "recv");
    auto stashed = pc.stash.find(tag);
    if (stashed != pc.stash.end() && !stashed->second.empty()) {
      Tensor message = std::move(stashed->second.front());
      stashed->second.pop_front();
      if (message.nbytes() != out.nbytes())
        throw RuntimeError(recvWhere(peer, tag) + ": " +
                           std::to_string(message.nbytes()) + " bytes sent, " +
                           std::to_string(out.nbytes()) + " expected");
      copyFlat(static_cast<char *>(out.data()),
               static_cast<const char *>(message.data()), out.nbytes());
      finishOnDevice([&] { return recvWhere(peer, tag); });
      countMessage();
      return;
    }
    guardedPair(pc, "recv", peer, [&] {
      while (true) {
        // The next message in the pair's order: out's, or one kept aside.
        RoundHeader first;
        Tensor aside;
        bool mine = false;
        takeMessage(pc, peer, tag, [&](const RoundHeader &h) -> char * {
          first = h;
          mine = static_cast<int64_t>(h.call) == tag;
          if (mine) {
            if (h.length != out.nbytes())
              throw RuntimeError(recvWhere(peer, tag) + ": " +
                                 std::to_string(h.length) + " bytes sent, " +
                                 std::to_string(out.nbytes()) + " expected");
            return static_cast<char *>(out.data());
          }
          DType dtype = static_cast<DType>(h.dtype);
          size_t elem = dtypeSize(dtype);
          aside = Tensor::empty(dtype, {static_cast<int64_t>(h.length / elem)},
                                ipc_.device());
          return static_cast<char *>(aside.data());
        });
        if (mine)
          break;
        pc.stash[static_cast<int64_t>(first.call)].push_back(aside);
      }
      finishOnDevice([&] { return recvWhere(peer, tag); });
      countMessage();
    });
  }

private:
  // ---- state
  // ------------------------------------------------------------------
  size_t arenaBytes() const { return kArenaSlots * 2 * options_.chunkBytes; }
  size_t pairBytes() const { return kPairChunks * options_.p2pChunkBytes; }
  char *slotInput(char *arena, size_t slot) const {
    return arena + slot * 2 * options_.chunkBytes;
  }
  char *slotResult(char *arena, size_t slot) const {
    return slotInput(arena, slot) + options_.chunkBytes;
  }

  // A world restart changes the prefix: everything of the old world goes.
  void refreshPrefix() {
    if (!options_.currentPrefix)
      return;
    std::string now = options_.currentPrefix();
    if (now == prefix_)
      return;
    dropAll();
    prefix_ = now;
    published_ = false;
  }

  void dropAll() {
    pendingTail_ = nullptr;
    channels_.clear();
    for (auto &[key, pc] : pairs_)
      if (!pc->bufferHandle.empty())
        processHandles().release(ipc_, pc->bufferHandle);
    pairs_.clear();
    for (auto &[rank, peer] : peers_)
      if (!peer->handle.empty())
        processHandles().release(ipc_, peer->handle);
    peers_.clear();
  }

  // This rank's arena and event, published under the current prefix.
  void publish() {
    if (published_)
      return;
    std::string memory, event;
    if (!arena_) {
      arena_ = static_cast<char *>(ipc_.allocateExported(arenaBytes(), memory));
      arenaHandle_ = memory;
      event_ = ipc_.newExportedEvent(event);
      eventHandle_ = event;
      processHandles().exportedMemory(arenaHandle_, arena_);
      processHandles().exportedEvent(eventHandle_, event_);
    }
    store_->set(prefix_ + "/arena/" + std::to_string(rank_),
                std::to_string(arenaBytes()) + "\n" + ipc_.deviceIdentity() +
                    "\n" + arenaHandle_ + "\n" + eventHandle_);
    published_ = true;
  }

  IpcEvent &myEvent() {
    publish();
    return *event_;
  }

  static std::vector<std::string> lines(const std::string &text, size_t n) {
    std::vector<std::string> parts;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
      parts.push_back(line);
    if (parts.size() != n)
      throw RuntimeError("device ipc: malformed record '" + text + "'");
    return parts;
  }

  PeerArena &peerArena(int64_t peer) {
    auto it = peers_.find(peer);
    if (it != peers_.end())
      return *it->second;
    std::string record = store_->get(prefix_ + "/arena/" + std::to_string(peer),
                                     options_.deadline);
    std::vector<std::string> parts = lines(record, 4);
    if (parts[1] != ipc_.deviceIdentity())
      throw RuntimeError(
          "rank " + std::to_string(peer) + " computes on device " + parts[1] +
          ", rank " + std::to_string(rank_) + " on " + ipc_.deviceIdentity() +
          ": they do not share a device");
    size_t bytes = std::strtoull(parts[0].c_str(), nullptr, 10);
    if (bytes != arenaBytes())
      throw RuntimeError("rank " + std::to_string(peer) + " has an arena of " +
                         std::to_string(bytes) + " bytes, rank " +
                         std::to_string(rank_) + " expects " +
                         std::to_string(arenaBytes()) +
                         " (members disagree on the chunk size)");
    auto made = std::make_unique<PeerArena>();
    made->bytes = bytes;
    made->arena = processHandles().acquire(ipc_, parts[2], bytes, made->local);
    made->handle = parts[2];
    made->event = processHandles().event(ipc_, parts[3]);
    {
      std::lock_guard<std::mutex> lock(statsMutex_);
      ++(made->local ? stats_.peersInProcess : stats_.peersOpened);
    }
    return *peers_.emplace(peer, std::move(made)).first->second;
  }

  IpcEvent &peerEventOf(int64_t peer) { return *peerArena(peer).event; }

  Channel &channel(const Group &group, const char *op) {
    refreshPrefix();
    if (options_.health && options_.health->anyDead()) {
      std::string lost = options_.health->deadAmong(group);
      if (!lost.empty())
        throw RuntimeError(std::string(op) + " on group " +
                           groupToString(group) + " on rank " +
                           std::to_string(rank_) + ": peer " + lost);
    }
    if (group.size() > ipc_.maxPieces())
      throw RuntimeError(std::string(op) + " on group " + groupToString(group) +
                         ": device ipc takes at most " +
                         std::to_string(ipc_.maxPieces()) + " members");
    auto it = channels_.find(group);
    if (it != channels_.end()) {
      if (!it->second->broken.empty())
        throw RuntimeError(std::string(op) + " on group " +
                           groupToString(group) + " on rank " +
                           std::to_string(rank_) +
                           ": the group's device ipc is unusable after an "
                           "earlier failure: " +
                           it->second->broken);
      return *it->second;
    }
    auto ch = std::make_unique<Channel>();
    ch->group = group;
    ch->me = groupIndexOf(group, rank_);
    std::string key = prefix_ + "/group/" + groupKeyPart(group);
    try {
      publish();
      ch->segment =
          ch->me == 0
              ? Segment::create(*store_, key, SegmentKind::Group, group,
                                kControlChunk, 0)
              : Segment::attach(*store_, key, SegmentKind::Group, group,
                                kControlChunk, ch->me, options_.deadline);
      ch->segment->setHealth(options_.health.get());
      ch->peers.assign(group.size(), nullptr);
      for (size_t j = 0; j < group.size(); ++j)
        if (j != ch->me)
          ch->peers[j] = &peerArena(group[j]);
    } catch (const std::exception &error) {
      throw RuntimeError(std::string(op) + " on group " + groupToString(group) +
                         " on rank " + std::to_string(rank_) +
                         ": setting up device ipc failed: " + error.what());
    }
    return *channels_.emplace(group, std::move(ch)).first->second;
  }

  std::string pairKey(int64_t from, int64_t to) const {
    return prefix_ + "/pair/" + std::to_string(from) + "-" + std::to_string(to);
  }

  // The channel of sender `from` -> receiver `to` (this rank is one end).
  PairChannel &pair(int64_t from, int64_t to, const char *op) {
    int64_t peer = from == rank_ ? to : from;
    if (options_.health && options_.health->isDead(peer))
      throw RuntimeError(std::string(op) + " of rank " + std::to_string(rank_) +
                         " with rank " + std::to_string(peer) + ": peer " +
                         options_.health->deadAmong({peer}));
    auto it = pairs_.find({from, to});
    if (it != pairs_.end()) {
      if (!it->second->broken.empty())
        throw RuntimeError(
            std::string(op) + " of rank " + std::to_string(rank_) +
            " with rank " + std::to_string(peer) +
            ": unusable after an earlier failure: " + it->second->broken);
      return *it->second;
    }
    auto pc = std::make_unique<PairChannel>();
    std::vector<int64_t> ranks = {from, to};
    try {
      publish();
      if (from == rank_) {
        void *&buffer = sendBuffers_[to];
        if (!buffer) {
          std::string handle;
          buffer = ipc_.allocateExported(pairBytes(), handle);
          sendHandles_[to] = handle;
          processHandles().exportedMemory(handle, buffer);
        }
        pc->buffer = buffer;
        pc->bufferBytes = pairBytes();
        store_->set(pairKey(from, to) + "/buffer",
                    std::to_string(pairBytes()) + "\n" + sendHandles_[to]);
        pc->segment =
            Segment::create(*store_, pairKey(from, to), SegmentKind::Group,
                            ranks, kControlChunk, 0);
      } else {
        pc->segment =
            Segment::attach(*store_, pairKey(from, to), SegmentKind::Group,
                            ranks, kControlChunk, 1, options_.deadline);
        std::vector<std::string> parts = lines(
            store_->get(pairKey(from, to) + "/buffer", options_.deadline), 2);
        size_t bytes = std::strtoull(parts[0].c_str(), nullptr, 10);
        if (bytes != pairBytes())
          throw RuntimeError("rank " + std::to_string(from) +
                             " sends through " + std::to_string(bytes) +
                             " bytes, " + std::to_string(pairBytes()) +
                             " expected (members disagree on the chunk)");
        bool local = false;
        pc->buffer = processHandles().acquire(ipc_, parts[1], bytes, local);
        pc->bufferHandle = parts[1];
        pc->bufferBytes = bytes;
      }
      // The peer's event, which orders the chunks, is opened when first
      // waited for: a sender with room in its buffer waits for nothing.
      pc->segment->setHealth(options_.health.get());
    } catch (const std::exception &error) {
      throw RuntimeError(std::string(op) + " of rank " + std::to_string(rank_) +
                         " with rank " + std::to_string(peer) +
                         ": setting up device ipc failed: " + error.what());
    }
    return *pairs_.emplace(std::make_pair(from, to), std::move(pc))
                .first->second;
  }

  // ---- sequencing ---------------------------------------------------------
  std::string where(const Channel &ch, const char *op) const {
    return std::string(op) + " on group " + groupToString(ch.group) +
           " (call " + std::to_string(ch.calls) + ") on rank " +
           std::to_string(rank_);
  }
  std::string recvWhere(int64_t peer, int64_t tag) const {
    return "recv of rank " + std::to_string(rank_) + " from rank " +
           std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  }

  // Waits until member `member`'s counter reached `target`.
  void waitCounter(Segment &seg, size_t member,
                   std::atomic<uint32_t> MemberControl::*counter,
                   uint32_t target,
                   const std::function<std::string(const std::string &)> &why,
                   const std::vector<int64_t> &missing) {
    std::atomic<uint32_t> &word = seg.control(member).*counter;
    if (reached(word, target))
      return;
    seg.waitFor(
        word, [&] { return reached(word, target); }, options_.deadline, why,
        [&] { return ranksToString(missing); });
  }

  // Waits until every other member's `counter` reached `target`, then makes
  // this rank's stream wait for their events.
  void waitAll(Channel &ch, std::atomic<uint32_t> MemberControl::*counter,
               uint32_t target, const char *op) {
    Segment &seg = *ch.segment;
    for (size_t j = 0; j < seg.members(); ++j) {
      if (j == ch.me)
        continue;
      std::atomic<uint32_t> &word = seg.control(j).*counter;
      if (reached(word, target))
        continue;
      seg.waitFor(
          word, [&] { return reached(word, target); }, options_.deadline,
          [&](const std::string &why) { return where(ch, op) + ": " + why; },
          [&] {
            std::vector<int64_t> missing;
            for (size_t k = 0; k < seg.members(); ++k)
              if (k != ch.me && !reached(seg.control(k).*counter, target))
                missing.push_back(ch.group[k]);
            return ranksToString(missing);
          });
    }
    Stream &stream = ipc_.device().currentStream();
    for (size_t j = 0; j < seg.members(); ++j)
      if (j != ch.me)
        ch.peers[j]->event->waitOn(stream);
  }

  Plan basePlan(uint32_t op, DType dtype, ReduceOp reduce, uint64_t length) {
    Plan plan;
    plan.op = op;
    plan.dtype = dtype;
    plan.reduce = static_cast<uint32_t>(reduce);
    plan.length = length;
    return plan;
  }

  std::function<void(const std::vector<const RoundHeader *> &)>
  sameLengths(uint64_t length) {
    return [length](const std::vector<const RoundHeader *> &headers) {
      for (size_t j = 0; j < headers.size(); ++j)
        if (headers[j]->length != length)
          throw RuntimeError("member " + std::to_string(j) + " has " +
                             std::to_string(headers[j]->length) +
                             " bytes, this one " + std::to_string(length));
    };
  }

  // Runs one call on `ch`: the rounds of every member's stream.
  void run(Channel &ch, Plan &plan, const char *op) {
    try {
      rounds(ch, plan, op);
      ++ch.calls;
    } catch (const std::exception &error) {
      std::string message = error.what();
      std::string prefix = where(ch, op);
      if (message.compare(0, prefix.size(), prefix) != 0)
        message = prefix + ": " + message;
      ch.broken = message;
      ch.segment->abort("rank " + std::to_string(rank_) + ": " + message);
      throw RuntimeError(message);
    }
  }

  void rounds(Channel &ch, Plan &plan, const char *op) {
    // The arena was last used by a call on another group: every member of
    // that one must be done with it first.
    if (pendingTail_ && pendingTail_ != &ch && pendingTail_->broken.empty())
      waitAll(*pendingTail_, &MemberControl::done, pendingTail_->round,
              "the previous call");
    pendingTail_ = nullptr;
    Segment &seg = *ch.segment;
    size_t n = ch.group.size();
    Stream &stream = ipc_.device().currentStream();
    uint64_t chunk = options_.chunkBytes;
    uint32_t g0 = ch.round;
    uint64_t total = 1; // known after the first round's posting
    size_t elem = dtypeSize(plan.dtype);
    std::vector<const char *> inputs(n), results(n);
    for (uint64_t t = 0; t < total; ++t) {
      uint32_t g = g0 + static_cast<uint32_t>(t);
      size_t slot = (ch.roundsEver + t) % kArenaSlots;
      // The slot was read two rounds ago on this group (maybe in an earlier
      // call): every member must be done with it.
      if (ch.roundsEver + t >= kArenaSlots)
        waitAll(ch, &MemberControl::done,
                g - static_cast<uint32_t>(kArenaSlots) + 1, op);
      uint64_t from = t * chunk, to = std::min(plan.length, from + chunk);
      if (from < to && plan.produce)
        plan.produce(from, to, slotInput(arena_, slot));
      if (t == 0) {
        RoundHeader &h = seg.roundHeader(ch.me, ch.calls % hostshm::kSlots);
        h.op = plan.op;
        h.dtype = static_cast<uint32_t>(plan.dtype);
        h.reduce = plan.reduce;
        h.members = static_cast<uint32_t>(n);
        h.call = ch.calls;
        h.length = plan.length;
        for (size_t j = 0; j < plan.pieceOffsets.size(); ++j)
          h.pieceOffsets[j] = plan.pieceOffsets[j];
      }
      myEvent().record(stream);
      seg.publish(seg.control(ch.me).posted, g + 1);
      waitAll(ch, &MemberControl::posted, g + 1, op);
      if (t == 0) {
        std::vector<const RoundHeader *> headers(n);
        uint64_t longest = 0;
        for (size_t j = 0; j < n; ++j) {
          const RoundHeader &h = seg.roundHeader(j, ch.calls % hostshm::kSlots);
          headers[j] = &h;
          if (h.op != plan.op || h.dtype != static_cast<uint32_t>(plan.dtype) ||
              h.call != ch.calls || h.reduce != plan.reduce)
            throw RuntimeError("rank " + std::to_string(ch.group[j]) +
                               " runs another collective (op " +
                               std::to_string(h.op) + ", dtype " +
                               std::to_string(h.dtype) + ", call " +
                               std::to_string(h.call) + ")");
          longest = std::max<uint64_t>(longest, h.length);
        }
        if (plan.check)
          plan.check(headers);
        total = std::max<uint64_t>(1, (longest + chunk - 1) / chunk);
      }
      for (size_t j = 0; j < n; ++j) {
        char *arena =
            j == ch.me ? arena_ : static_cast<char *>(ch.peers[j]->arena);
        inputs[j] = slotInput(arena, slot);
        results[j] = slotResult(arena, slot);
      }
      if (plan.ownedOut) {
        // This member reduces its chunk of the round into its result area;
        // then everyone copies every member's reduced chunk.
        uint64_t len = std::min(chunk, plan.length - from);
        uint64_t count = len / elem;
        auto share = [&](size_t j) {
          return std::make_pair(count * j / n * elem,
                                count * (j + 1) / n * elem);
        };
        auto [mineFrom, mineTo] = share(ch.me);
        if (mineFrom < mineTo)
          reduceInto(slotResult(arena_, slot) + mineFrom, inputs, mineFrom,
                     (mineTo - mineFrom) / elem, plan.dtype,
                     static_cast<ReduceOp>(plan.reduce), ch);
        myEvent().record(stream);
        seg.publish(seg.control(ch.me).reduced, g + 1);
        waitAll(ch, &MemberControl::reduced, g + 1, op);
        for (size_t j = 0; j < n; ++j) {
          auto [a, b] = share(j);
          if (a < b)
            copyFlat(plan.ownedOut + from + a, results[j] + a, b - a);
        }
      } else if (plan.consume) {
        plan.consume(from, inputs);
      }
      myEvent().record(stream);
      seg.publish(seg.control(ch.me).done, g + 1);
      std::lock_guard<std::mutex> lock(statsMutex_);
      ++stats_.rounds;
      stats_.bytes += to > from ? to - from : 0;
    }
    // The members may still read this rank's slots: the next call on this
    // group waits for them round by round, a call on another group for all
    // of them first (pendingTail_).
    ch.round = g0 + static_cast<uint32_t>(total);
    ch.roundsEver += total;
    pendingTail_ = &ch;
    finishOnDevice([&] { return where(ch, op); });
    std::lock_guard<std::mutex> lock(statsMutex_);
    ++stats_.collectives;
  }

  // Receives the next message of pair `pc`: `place` says where its bytes go
  // from its first chunk's header.
  void takeMessage(PairChannel &pc, int64_t peer, int64_t tag,
                   const std::function<char *(const RoundHeader &)> &place) {
    Segment &seg = *pc.segment;
    Stream &stream = ipc_.device().currentStream();
    uint64_t chunk = options_.p2pChunkBytes;
    char *dst = nullptr;
    uint64_t bytes = 0, chunks = 1;
    for (uint64_t c = 0; c < chunks; ++c) {
      uint32_t n = pc.chunks;
      waitCounter(seg, 0, &MemberControl::posted, n + 1,
                  [&](const std::string &why) {
                    return recvWhere(peer, tag) + ": " + why;
                  },
                  {peer});
      peerEventOf(peer).waitOn(stream);
      const RoundHeader &h = seg.roundHeader(0, n % hostshm::kSlots);
      if (c == 0) {
        dst = place(h);
        bytes = h.length;
        chunks = std::max<uint64_t>(1, (bytes + chunk - 1) / chunk);
      } else if (h.pieceOffsets[0] != c * chunk || h.length != bytes) {
        throw RuntimeError(recvWhere(peer, tag) +
                           ": chunks of a message out of order");
      }
      uint64_t len = std::min(chunk, bytes - c * chunk);
      if (len)
        copyFlat(dst + c * chunk,
                 static_cast<const char *>(pc.buffer) +
                     (n % kPairChunks) * chunk,
                 len);
      myEvent().record(stream);
      pc.chunks = n + 1;
      seg.publish(seg.control(1).done, pc.chunks);
    }
  }

  template <class Body>
  void guardedPair(PairChannel &pc, const char *op, int64_t peer, Body body) {
    try {
      body();
    } catch (const std::exception &error) {
      std::string message = error.what();
      pc.broken = message;
      pc.segment->abort("rank " + std::to_string(rank_) + ": " + message);
      throw RuntimeError(std::string(op) + " of rank " + std::to_string(rank_) +
                         " with rank " + std::to_string(peer) + ": " + message);
    }
  }

  // Returns once this rank's device work queued so far has finished, as the
  // other device communicators do (the caller may free or reuse the input
  // at once). Polled, with the deadline: work waiting on the event of a
  // peer that died must not hang the rank.
  void finishOnDevice(const std::function<std::string()> &where) {
    Stream &stream = ipc_.device().currentStream();
    if (!finished_)
      finished_ = ipc_.device().newEvent();
    stream.record(*finished_);
    auto start = std::chrono::steady_clock::now();
    for (int spins = 0; !finished_->done(); ++spins) {
      if (std::chrono::steady_clock::now() - start > options_.deadline)
        throw RuntimeError(where() +
                           ": the device did not finish its copies "
                           "within " +
                           std::to_string(options_.deadline.count()) +
                           " ms (a peer's event never completed)");
      if (spins < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void countMessage() {
    std::lock_guard<std::mutex> lock(statsMutex_);
    ++stats_.messages;
  }

  // ---- data movement --------------------------------------------------------
  void copyFlat(char *dst, const char *src, uint64_t bytes) {
    if (bytes)
      ipc_.copy2D(dst, bytes, src, bytes, bytes, 1,
                  ipc_.device().currentStream());
  }

  // Copies bytes [from, to) of `v`'s row-major bytes from (intoView) or to
  // the flat memory `flat`, which holds byte `from` first.
  void moveRange(const View &v, uint64_t from, uint64_t to, char *flat,
                 bool intoView) {
    if (from >= to || v.rowBytes == 0)
      return;
    Stream &stream = ipc_.device().currentStream();
    uint64_t at = from;
    auto rows = [&](uint64_t row, uint64_t column, uint64_t width,
                    uint64_t height) {
      char *inView = v.base + row * v.pitch + column;
      char *inFlat = flat + (at - from);
      if (intoView)
        ipc_.copy2D(inView, v.pitch, inFlat, width, width, height, stream);
      else
        ipc_.copy2D(inFlat, width, inView, v.pitch, width, height, stream);
      at += width * height;
    };
    uint64_t column = at % v.rowBytes;
    if (column != 0)
      rows(at / v.rowBytes, column, std::min(v.rowBytes - column, to - at), 1);
    if (at < to && (to - at) / v.rowBytes > 0)
      rows(at / v.rowBytes, 0, v.rowBytes, (to - at) / v.rowBytes);
    if (at < to)
      rows(at / v.rowBytes, 0, to - at, 1);
  }

  // Copies the stream bytes [from, to) of `pieces` (laid out one after the
  // other at `offsets`) into `slot`.
  void produceFromPieces(const std::vector<View> &pieces,
                         const std::vector<uint64_t> &offsets, uint64_t from,
                         uint64_t to, char *slot) {
    for (size_t i = 0; i < pieces.size(); ++i) {
      uint64_t a = std::max(from, offsets[i]), b = std::min(to, offsets[i + 1]);
      if (a < b)
        moveRange(pieces[i], a - offsets[i], b - offsets[i], slot + (a - from),
                  false);
    }
  }

  // out[0, count) = reduction over the members, in group order, of
  // slots[j] + offset.
  void reduceInto(char *out, const std::vector<const char *> &slots,
                  uint64_t offset, uint64_t count, DType dtype, ReduceOp op,
                  Channel &) {
    if (count == 0)
      return;
    std::vector<const void *> pieces;
    for (const char *s : slots)
      pieces.push_back(s + offset);
    ipc_.reduce(out, pieces, static_cast<int64_t>(count), dtype, op,
                ipc_.device().currentStream());
  }

  // ---- checks ---------------------------------------------------------------
  static void sameSize(const Tensor &x, const Tensor &out, const char *op) {
    if (x.nbytes() != out.nbytes() || x.dtype() != out.dtype())
      throw RuntimeError(std::string("device ipc ") + op + ": the input " +
                         x.describe() + " does not match the output " +
                         out.describe());
  }
  static void checkSizes(const std::vector<int64_t> &sizes, const Group &group,
                         const char *op) {
    if (sizes.size() != group.size())
      throw RuntimeError(std::string("device ipc ") + op + ": " +
                         std::to_string(sizes.size()) + " sizes for " +
                         std::to_string(group.size()) + " members");
  }

  int rank_;
  DeviceIpc &ipc_;
  std::shared_ptr<KeyValueStore> store_;
  IpcDeviceOptions options_;
  std::string prefix_;
  bool published_ = false;
  char *arena_ = nullptr;
  std::string arenaHandle_, eventHandle_;
  std::shared_ptr<IpcEvent> event_;
  std::unique_ptr<Event> finished_;
  std::map<Group, std::unique_ptr<Channel>> channels_;
  // The group of the last call, whose members may still read the arena.
  Channel *pendingTail_ = nullptr;
  std::map<int64_t, std::unique_ptr<PeerArena>> peers_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<PairChannel>> pairs_;
  std::map<int64_t, void *> sendBuffers_;
  std::map<int64_t, std::string> sendHandles_;
  mutable std::mutex statsMutex_;
  IpcDeviceStats stats_;
};

} // namespace

std::unique_ptr<IpcDeviceCommunicator>
makeIpcDeviceCommunicator(int rank, DeviceIpc &ipc,
                          std::shared_ptr<KeyValueStore> store,
                          const IpcDeviceOptions &options) {
  return std::make_unique<IpcDeviceComm>(rank, ipc, std::move(store), options);
}

bool ipcDeviceCollectivesWanted() {
  const char *value = std::getenv("DTORCH_GPU_IPC");
  return !(value && std::string(value) == "0");
}

} // namespace dtorch::rt
