#include "dtorch/runtime/HostSharedMemoryCollectives.h"

#include "CollectiveSupport.h"
#include "HostSharedMemoryPeerAccess.h"
#include "HostSharedMemorySegment.h"

#include "dtorch/runtime/SharedHostArena.h"

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>
#include <unistd.h>

namespace dtorch::rt {

using namespace detail;
using namespace hostshm;

namespace {

enum OpCode : uint32_t {
  kAllReduce = 1,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kBroadcast,
  kNegotiate // a group's agreement on peer access
};

const char *opName(uint32_t op) {
  switch (op) {
  case kAllReduce:
    return "all_reduce";
  case kAllGather:
    return "all_gather";
  case kReduceScatter:
    return "reduce_scatter";
  case kAllToAll:
    return "all_to_all";
  case kBroadcast:
    return "broadcast";
  case kNegotiate:
    return "peer-access negotiation";
  default:
    return "unknown collective";
  }
}

// Wrap-safe "counter has reached target".
inline bool reached(const std::atomic<uint32_t> &counter, uint32_t target) {
  return static_cast<int32_t>(counter.load(std::memory_order_acquire) -
                              target) >= 0;
}

// Copies `len` bytes of a packed stream, starting at `offset`, whose rows of
// `rowBytes` lie `stride` apart at `base` (dst = rows, src = packed).
void scatterRows(const char *src, uint64_t offset, uint64_t len,
                 uint64_t rowBytes, char *base, uint64_t stride) {
  if (rowBytes == stride) {
    std::memcpy(base + offset, src, len);
    return;
  }
  while (len > 0) {
    uint64_t row = offset / rowBytes, col = offset % rowBytes;
    uint64_t n = std::min(len, rowBytes - col);
    std::memcpy(base + row * stride + col, src, n);
    src += n;
    offset += n;
    len -= n;
  }
}

void gatherRows(char *dst, uint64_t offset, uint64_t len, uint64_t rowBytes,
                const char *base, uint64_t stride) {
  if (rowBytes == stride) {
    std::memcpy(dst, base + offset, len);
    return;
  }
  while (len > 0) {
    uint64_t row = offset / rowBytes, col = offset % rowBytes;
    uint64_t n = std::min(len, rowBytes - col);
    std::memcpy(dst, base + row * stride + col, n);
    dst += n;
    offset += n;
    len -= n;
  }
}

std::string readFirstLine(const std::string &path) {
  std::ifstream file(path);
  std::string line;
  std::getline(file, line);
  return line;
}

std::string readLink(const std::string &path) {
  char buffer[256] = {};
  ssize_t n = readlink(path.c_str(), buffer, sizeof(buffer) - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "?";
}

// One group's segment, as this rank sees it.
struct Channel {
  std::unique_ptr<Segment> segment;
  Group group;
  size_t me = 0;
  uint64_t round = 0; // rounds completed on this segment
  uint64_t calls = 0;
  std::string broken;
  // Peer access: -1 not negotiated yet, 0 no, 1 yes (the same on every
  // member); the claim counter's value after this member's last such call;
  // what the others probe; one chunk per other member.
  int peerAccess = -1;
  int crossMemoryAttach = -1;
  uint32_t peerChunks = 0;
  PeerProbe probe;
  std::vector<char> scratch;
};

// The two ends of a sender -> receiver ring.
struct PairChannel {
  std::unique_ptr<Segment> segment;
  uint64_t position = 0; // bytes written (sender) or read (receiver)
  std::string broken;
  // Receiver: messages read past while looking for another tag.
  std::map<int64_t, std::deque<std::vector<char>>> stash;
};

struct PendingSend {
  int64_t peer;
  int64_t tag;
  Tensor data;
};

// What each member contributes and what it does with everyone's rounds.
struct StreamPlan {
  uint32_t op = 0;
  DType dtype = ::dtorch::wire::DTYPE_INVALID;
  uint32_t reduce = 0;
  uint64_t length = 0;                // bytes of this member's stream
  std::vector<uint64_t> pieceOffsets; // all_to_all (n + 1 entries)
  std::function<void(uint64_t offset, char *dst, uint64_t len)> produce;
  // Every member's round headers of the first round, to check agreement and
  // read their lengths and offsets.
  std::function<void(const std::vector<const RoundHeader *> &)> check;
  // Every member's window of this round (in group order).
  std::function<void(uint64_t offset, const std::vector<const char *> &,
                     const std::vector<uint64_t> &)>
      consume;
};

class HostShmCommunicator final : public HostSharedMemoryCommunicator {
public:
  HostShmCommunicator(int rank, std::shared_ptr<KeyValueStore> store,
                      const HostSharedMemoryOptions &options)
      : rank_(rank), store_(std::move(store)), options_(options) {
    options_.chunkBytes = std::max<size_t>(
        kPage, (options_.chunkBytes + kPage - 1) / kPage * kPage);
    options_.ringBytes = std::max<size_t>(
        kPage, (options_.ringBytes + kPage - 1) / kPage * kPage);
    if (options_.hostIdentity.empty())
      options_.hostIdentity = localHostIdentity();
    if (options_.deadline.count() <= 0)
      throw RuntimeError("shared-memory communicator deadline must be "
                         "positive");
  }

  // Waits for the sends handed over so far to reach the rings (each up to
  // the deadline).
  ~HostShmCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(sendMutex_);
      stopping_ = true;
    }
    sendWake_.notify_all();
    if (sender_.joinable())
      sender_.join();
  }

  int rank() const override { return rank_; }

  void publishIdentity() override {
    store_->set(options_.prefix + "/host/" + std::to_string(rank_),
                options_.hostIdentity);
  }

  bool sameHost(const Group &group) override {
    if (group.empty())
      return false;
    for (int64_t member : group) {
      if (member == rank_)
        continue;
      auto it = hosts_.find(member);
      if (it == hosts_.end()) {
        std::string identity;
        try {
          identity =
              store_->get(options_.prefix + "/host/" + std::to_string(member),
                          options_.deadline);
        } catch (const RuntimeError &) {
          identity = ""; // never published: not reachable through us
        }
        it = hosts_.emplace(member, identity).first;
      }
      if (it->second != options_.hostIdentity)
        return false;
    }
    return true;
  }

  HostSharedMemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(statsMutex_);
    return stats_;
  }

  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override {
    groupIndexOf(group, rank_);
    if (!x.defined())
      throw RuntimeError("all_reduce input is undefined");
    requireShape(out, x.dtype(), x.shape(), "all_reduce output");
    checkReducible(x.dtype(), op);
    Channel &ch = channel(group, "all_reduce");
    guarded(ch, "all_reduce", [&] { allReduce(ch, x, out, op); });
  }

  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkAllGather(x, out, group, me, dim, sizes);
    size_t n = group.size(), esize = dtypeSize(x.dtype());
    uint64_t outer = outerCount(out.shape(), dim),
             unit = innerCount(out.shape(), dim) * esize,
             outRow = out.shape()[dim] * unit;
    std::vector<int64_t> offsets = exclusivePrefixSums(sizes);
    StreamPlan plan;
    plan.op = kAllGather;
    plan.dtype = x.dtype();
    plan.length = x.nbytes();
    plan.produce = [&](uint64_t offset, char *dst, uint64_t len) {
      std::memcpy(dst, static_cast<const char *>(x.data()) + offset, len);
    };
    plan.check = [&](const std::vector<const RoundHeader *> &headers) {
      for (size_t j = 0; j < n; ++j)
        if (headers[j]->length != outer * sizes[j] * unit)
          throw RuntimeError("the piece of rank " + std::to_string(group[j]) +
                             " has " + std::to_string(headers[j]->length) +
                             " bytes, expected " +
                             std::to_string(outer * sizes[j] * unit));
    };
    plan.consume = [&](uint64_t offset,
                       const std::vector<const char *> &windows,
                       const std::vector<uint64_t> &lengths) {
      for (size_t j = 0; j < n; ++j)
        if (lengths[j])
          scatterRows(windows[j], offset, lengths[j], sizes[j] * unit,
                      static_cast<char *>(out.data()) + offsets[j] * unit,
                      outRow);
    };
    Channel &ch = channel(group, "all_gather");
    guarded(ch, "all_gather", [&] { runStreams(ch, plan); });
  }

  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkReduceScatter(x, out, group, me, op, dim, sizes);
    size_t esize = dtypeSize(x.dtype());
    // My piece: `outer` runs of `run` elements, `stride` apart, from `first`.
    int64_t outer = outerCount(x.shape(), dim),
            unit = innerCount(x.shape(), dim);
    int64_t run = sizes[me] * unit, stride = x.shape()[dim] * unit;
    int64_t first = exclusivePrefixSums(sizes)[me] * unit;
    StreamPlan plan;
    plan.op = kReduceScatter;
    plan.dtype = x.dtype();
    plan.reduce = static_cast<uint32_t>(op);
    plan.length = x.nbytes();
    plan.produce = [&](uint64_t offset, char *dst, uint64_t len) {
      std::memcpy(dst, static_cast<const char *>(x.data()) + offset, len);
    };
    plan.check = [&](const std::vector<const RoundHeader *> &headers) {
      for (size_t j = 0; j < group.size(); ++j)
        if (headers[j]->length != x.nbytes() ||
            headers[j]->reduce != plan.reduce)
          throw RuntimeError("rank " + std::to_string(group[j]) +
                             " reduces another input (" +
                             std::to_string(headers[j]->length) +
                             " bytes) or with another reduction");
    };
    std::vector<const void *> pieces(group.size());
    plan.consume = [&](uint64_t offset,
                       const std::vector<const char *> &windows,
                       const std::vector<uint64_t> &lengths) {
      if (run == 0)
        return;
      int64_t w0 = static_cast<int64_t>(offset / esize),
              w1 = w0 + static_cast<int64_t>(lengths[me] / esize);
      int64_t oEnd = std::min<int64_t>(outer, (w1 + stride - 1) / stride);
      for (int64_t o = w0 / stride; o < oEnd; ++o) {
        int64_t a = std::max(w0, o * stride + first),
                b = std::min(w1, o * stride + first + run);
        if (a >= b)
          continue;
        for (size_t j = 0; j < pieces.size(); ++j)
          pieces[j] = windows[j] + (a - w0) * esize;
        reducePieces(static_cast<char *>(out.data()) +
                         (o * run + a - (o * stride + first)) * esize,
                     pieces, b - a, x.dtype(), op);
      }
    };
    Channel &ch = channel(group, "reduce_scatter");
    guarded(ch, "reduce_scatter", [&] { runStreams(ch, plan); });
  }

  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkAllToAll(x, out, group, splitDim, splitSizes, concatDim, concatSizes);
    size_t n = group.size(), esize = dtypeSize(x.dtype());
    // My stream: the pieces for members 0..n-1, each packed.
    uint64_t xOuter = outerCount(x.shape(), splitDim),
             xUnit = innerCount(x.shape(), splitDim) * esize,
             xRow = x.shape()[splitDim] * xUnit;
    std::vector<int64_t> splitOffsets = exclusivePrefixSums(splitSizes);
    StreamPlan plan;
    plan.op = kAllToAll;
    plan.dtype = x.dtype();
    plan.pieceOffsets.assign(n + 1, 0);
    for (size_t j = 0; j < n; ++j)
      plan.pieceOffsets[j + 1] =
          plan.pieceOffsets[j] + xOuter * splitSizes[j] * xUnit;
    plan.length = plan.pieceOffsets[n];
    plan.produce = [&](uint64_t offset, char *dst, uint64_t len) {
      size_t j = 0;
      while (len > 0) {
        while (plan.pieceOffsets[j + 1] <= offset)
          ++j;
        uint64_t p = offset - plan.pieceOffsets[j];
        uint64_t take = std::min(len, plan.pieceOffsets[j + 1] - offset);
        gatherRows(dst, p, take, splitSizes[j] * xUnit,
                   static_cast<const char *>(x.data()) +
                       splitOffsets[j] * xUnit,
                   xRow);
        dst += take;
        offset += take;
        len -= take;
      }
    };
    uint64_t outOuter = outerCount(out.shape(), concatDim),
             outUnit = innerCount(out.shape(), concatDim) * esize,
             outRow = out.shape()[concatDim] * outUnit;
    std::vector<int64_t> concatOffsets = exclusivePrefixSums(concatSizes);
    std::vector<uint64_t> mineBegin(n), mineEnd(n); // in each member's stream
    plan.check = [&](const std::vector<const RoundHeader *> &headers) {
      for (size_t j = 0; j < n; ++j) {
        mineBegin[j] = headers[j]->pieceOffsets[me];
        mineEnd[j] = headers[j]->pieceOffsets[me + 1];
        uint64_t slot = outOuter * concatSizes[j] * outUnit;
        if (mineEnd[j] - mineBegin[j] != slot)
          throw RuntimeError("all_to_all: the piece from rank " +
                             std::to_string(group[j]) + " has " +
                             std::to_string(mineEnd[j] - mineBegin[j]) +
                             " bytes, the output slot " + std::to_string(slot));
      }
    };
    plan.consume = [&](uint64_t offset,
                       const std::vector<const char *> &windows,
                       const std::vector<uint64_t> &lengths) {
      for (size_t j = 0; j < n; ++j) {
        uint64_t a = std::max(offset, mineBegin[j]),
                 b = std::min(offset + lengths[j], mineEnd[j]);
        if (a >= b)
          continue;
        scatterRows(windows[j] + (a - offset), a - mineBegin[j], b - a,
                    concatSizes[j] * outUnit,
                    static_cast<char *>(out.data()) +
                        concatOffsets[j] * outUnit,
                    outRow);
      }
    };
    Channel &ch = channel(group, "all_to_all");
    guarded(ch, "all_to_all", [&] { runStreams(ch, plan); });
  }

  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override {
    size_t me = groupIndexOf(group, rank_);
    size_t rootIndex = groupIndexOf(group, root);
    if (!out.defined())
      throw RuntimeError("broadcast output is undefined");
    bool isRoot = me == rootIndex;
    if (isRoot)
      requireShape(x, out.dtype(), out.shape(), "broadcast input on the root");
    StreamPlan plan;
    plan.op = kBroadcast;
    plan.dtype = out.dtype();
    plan.reduce = static_cast<uint32_t>(rootIndex);
    plan.length = isRoot ? x.nbytes() : 0;
    plan.produce = [&](uint64_t offset, char *dst, uint64_t len) {
      std::memcpy(dst, static_cast<const char *>(x.data()) + offset, len);
    };
    plan.check = [&](const std::vector<const RoundHeader *> &headers) {
      if (headers[rootIndex]->length != out.nbytes())
        throw RuntimeError(
            "broadcast: root " + std::to_string(root) + " sends " +
            std::to_string(headers[rootIndex]->length) +
            " bytes, the output has " + std::to_string(out.nbytes()));
    };
    plan.consume = [&](uint64_t offset,
                       const std::vector<const char *> &windows,
                       const std::vector<uint64_t> &lengths) {
      if (!isRoot && lengths[rootIndex])
        std::memcpy(static_cast<char *>(out.data()) + offset,
                    windows[rootIndex], lengths[rootIndex]);
    };
    Channel &ch = channel(group, "broadcast");
    guarded(ch, "broadcast", [&] { runStreams(ch, plan); });
    if (isRoot && out.nbytes() && out.data() != x.data())
      std::memcpy(out.data(), x.data(), out.nbytes());
  }

  void send(const Tensor &x, int64_t peer, int64_t tag) override {
    checkPeer(peer);
    if (!x.defined())
      throw RuntimeError("send input is undefined");
    std::lock_guard<std::mutex> lock(sendMutex_);
    if (!sendFailure_.empty())
      throw RuntimeError(
          "shared-memory send on rank " + std::to_string(rank_) +
          " is unusable after an earlier failure: " + sendFailure_);
    pendingSends_.push_back(PendingSend{peer, tag, x.clone()});
    if (!sender_.joinable())
      sender_ = std::thread([this] { sendLoop(); });
    sendWake_.notify_all();
  }

  void recv(Tensor &out, int64_t peer, int64_t tag) override {
    checkPeer(peer);
    if (!out.defined())
      throw RuntimeError("recv output is undefined");
    std::string where = "recv on rank " + std::to_string(rank_) +
                        " from rank " + std::to_string(peer) + " (tag " +
                        std::to_string(tag) + ")";
    PairChannel &pair = incoming(peer, where);
    if (!pair.broken.empty())
      throw RuntimeError(where +
                         ": unusable after an earlier failure: " + pair.broken);
    try {
      std::vector<char> bytes;
      auto stashed = pair.stash.find(tag);
      if (stashed != pair.stash.end() && !stashed->second.empty()) {
        bytes = std::move(stashed->second.front());
        stashed->second.pop_front();
      } else {
        while (true) {
          int64_t frame[2];
          readRing(pair, reinterpret_cast<char *>(frame), sizeof(frame), where,
                   peer);
          std::vector<char> payload(static_cast<size_t>(frame[1]));
          if (frame[0] == tag && payload.size() == out.nbytes()) {
            readRing(pair, static_cast<char *>(out.data()), out.nbytes(), where,
                     peer);
            return;
          }
          readRing(pair, payload.data(), payload.size(), where, peer);
          if (frame[0] == tag) {
            bytes = std::move(payload);
            break;
          }
          pair.stash[frame[0]].push_back(std::move(payload));
        }
      }
      if (bytes.size() != out.nbytes())
        throw RuntimeError(where + ": the message has " +
                           std::to_string(bytes.size()) +
                           " bytes, the output " + out.describe() + " " +
                           std::to_string(out.nbytes()));
      if (!bytes.empty())
        std::memcpy(out.data(), bytes.data(), bytes.size());
    } catch (const RuntimeError &error) {
      if (pair.broken.empty())
        pair.broken = error.what();
      throw;
    }
  }

private:
  void checkPeer(int64_t peer) const {
    if (peer < 0 || peer == rank_)
      throw RuntimeError("invalid peer rank " + std::to_string(peer) +
                         " for rank " + std::to_string(rank_));
  }

  void countBytes(uint64_t collectives, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(statsMutex_);
    stats_.collectives += collectives;
    stats_.bytes += bytes;
  }

  std::string groupKey(const Group &group) const {
    std::string key = options_.prefix + "/group/";
    for (size_t j = 0; j < group.size(); ++j)
      key += (j ? "," : "") + std::to_string(group[j]);
    return key;
  }

  // Throws when the controller declared a member of `group` dead: a call
  // that needs it fails at once.
  void requireAlive(const Group &group, const char *op) const {
    if (!options_.health)
      return;
    std::string lost = options_.health->deadAmong(group);
    if (!lost.empty())
      throw RuntimeError(std::string(op) + " on group " + groupToString(group) +
                         " on rank " + std::to_string(rank_) +
                         ": gave up: peer " + lost);
  }

  Channel &channel(const Group &group, const char *op) {
    requireAlive(group, op);
    std::lock_guard<std::mutex> lock(channelsMutex_);
    auto it = channels_.find(group);
    if (it != channels_.end()) {
      if (!it->second->broken.empty())
        throw RuntimeError(std::string(op) + " on group " +
                           groupToString(group) + " on rank " +
                           std::to_string(rank_) +
                           ": the group's shared memory is unusable after an "
                           "earlier failure: " +
                           it->second->broken);
      return *it->second;
    }
    auto ch = std::make_unique<Channel>();
    ch->group = group;
    ch->me = groupIndexOf(group, rank_);
    std::string key = groupKey(group);
    try {
      ch->segment =
          ch->me == 0
              ? Segment::create(*store_, key, SegmentKind::Group, group,
                                options_.chunkBytes, 0)
              : Segment::attach(*store_, key, SegmentKind::Group, group,
                                options_.chunkBytes, ch->me, options_.deadline);
    } catch (const std::exception &error) {
      throw RuntimeError(
          std::string(op) + " on group " + groupToString(group) + " on rank " +
          std::to_string(rank_) + ": setting up shared memory failed" +
          (ch->me == 0 ? std::string()
                       : " waiting for rank(s) " + std::to_string(group[0])) +
          ": " + error.what());
    }
    ch->segment->setHealth(options_.health.get());
    {
      std::lock_guard<std::mutex> statsLock(statsMutex_);
      ++stats_.segments;
    }
    return *channels_.emplace(group, std::move(ch)).first->second;
  }

  std::string where(const Channel &ch, const char *op) const {
    return std::string(op) + " on group " + groupToString(ch.group) +
           " (call " + std::to_string(ch.calls) + ") on rank " +
           std::to_string(rank_);
  }

  // Runs one call on `ch`; a failure aborts the segment for every member and
  // leaves the group unusable here.
  template <class Body> void guarded(Channel &ch, const char *op, Body body) {
    try {
      body();
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

  // Waits until every other member's `counter` reached `target`.
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
  }

  void writeHeader(Channel &ch, size_t slot, const StreamPlan &plan) {
    RoundHeader &h = ch.segment->roundHeader(ch.me, slot);
    h.op = plan.op;
    h.dtype = static_cast<uint32_t>(plan.dtype);
    h.reduce = plan.reduce;
    h.members = static_cast<uint32_t>(ch.group.size());
    h.call = ch.calls;
    h.length = plan.length;
    for (size_t j = 0; j < plan.pieceOffsets.size(); ++j)
      h.pieceOffsets[j] = plan.pieceOffsets[j];
  }

  // The members must run the same call: same collective, dtype and call
  // number (the lengths are checked by each plan).
  void checkAgreement(Channel &ch, size_t slot, const StreamPlan &plan,
                      std::vector<const RoundHeader *> &headers) {
    for (size_t j = 0; j < ch.group.size(); ++j) {
      const RoundHeader &h = ch.segment->roundHeader(j, slot);
      headers[j] = &h;
      if (h.op != plan.op || h.dtype != static_cast<uint32_t>(plan.dtype) ||
          h.call != ch.calls)
        throw RuntimeError(
            "members disagree: rank " + std::to_string(ch.group[j]) + " runs " +
            opName(h.op) + " of " + dtypeName(static_cast<DType>(h.dtype)) +
            " (call " + std::to_string(h.call) + "), this rank " +
            opName(plan.op) + " of " + dtypeName(plan.dtype));
    }
  }

  void runStreams(Channel &ch, StreamPlan &plan) {
    Segment &seg = *ch.segment;
    const char *op = opName(plan.op);
    size_t n = ch.group.size();
    uint64_t chunk = seg.chunkBytes();
    std::vector<const RoundHeader *> headers(n);
    std::vector<uint64_t> lengths(n), windowLengths(n);
    std::vector<const char *> windows(n);
    uint64_t rounds = 1;
    for (uint64_t k = 0; k < rounds; ++k) {
      uint64_t g = ch.round;
      size_t slot = g % kSlots;
      if (g >= kSlots) // round g - kSlots, the slot's last use, consumed
        waitAll(ch, &MemberControl::done, uint32_t(g - kSlots + 1), op);
      uint64_t offset = k * chunk;
      if (k == 0)
        writeHeader(ch, slot, plan);
      if (offset < plan.length)
        plan.produce(offset, seg.input(ch.me, slot),
                     std::min(chunk, plan.length - offset));
      seg.publish(seg.control(ch.me).posted, uint32_t(g + 1));
      waitAll(ch, &MemberControl::posted, uint32_t(g + 1), op);
      if (k == 0) {
        checkAgreement(ch, slot, plan, headers);
        plan.check(headers);
        uint64_t longest = 0;
        for (size_t j = 0; j < n; ++j) {
          lengths[j] = headers[j]->length;
          longest = std::max(longest, lengths[j]);
        }
        rounds = std::max<uint64_t>(1, (longest + chunk - 1) / chunk);
      }
      for (size_t j = 0; j < n; ++j) {
        windows[j] = seg.input(j, slot);
        windowLengths[j] =
            lengths[j] > offset ? std::min(chunk, lengths[j] - offset) : 0;
      }
      plan.consume(offset, windows, windowLengths);
      seg.publish(seg.control(ch.me).done, uint32_t(g + 1));
      ch.round = g + 1;
    }
    finishCall(ch, plan.length);
  }

  // Rounds over windows of x; two ways, with the same bits (every element
  // is reduced over the members in group order by reducePieces):
  //  * direct (small tensors, few members): post the whole window; every
  //    member reduces the whole window straight into out. One wait per round.
  //  * by shares (otherwise, allReduceByShares).
  static constexpr size_t kDirectMembers = 4;

  void allReduce(Channel &ch, const Tensor &x, Tensor &out, ReduceOp op) {
    size_t n = ch.group.size();
    // Peer access unless a member's buffers are out of the others' reach
    // (then the rounds below, which every member chooses alike).
    if (n > 1 && x.nbytes() > options_.peerAccessBytes &&
        peerAccessReady(ch, x.dtype()) && allReduceFromPeers(ch, x, out, op)) {
      finishCall(ch, x.nbytes());
      return;
    }
    bool direct =
        n <= kDirectMembers && x.nbytes() <= options_.directReduceBytes;
    StreamPlan plan;
    plan.op = kAllReduce;
    plan.dtype = x.dtype();
    plan.reduce = static_cast<uint32_t>(op) | (direct ? 0x100u : 0u);
    plan.length = x.nbytes();
    if (direct)
      allReduceDirect(ch, x, out, op, plan);
    else
      allReduceByShares(ch, x, out, op, plan);
    finishCall(ch, x.nbytes());
  }

  // One round that carries only headers: `fill` completes this member's,
  // `use` reads every member's (in group order) before the slot is given
  // back.
  template <class Fill, class Use>
  void exchangeHeaders(Channel &ch, const StreamPlan &plan, Fill fill,
                       Use use) {
    Segment &seg = *ch.segment;
    const char *op = opName(plan.op);
    uint64_t g = ch.round;
    size_t slot = g % kSlots;
    if (g >= kSlots)
      waitAll(ch, &MemberControl::done, uint32_t(g - kSlots + 1), op);
    writeHeader(ch, slot, plan);
    fill(seg.roundHeader(ch.me, slot));
    seg.publish(seg.control(ch.me).posted, uint32_t(g + 1));
    waitAll(ch, &MemberControl::posted, uint32_t(g + 1), op);
    std::vector<const RoundHeader *> headers(ch.group.size());
    checkAgreement(ch, slot, plan, headers);
    use(headers);
    seg.publish(seg.control(ch.me).done, uint32_t(g + 1));
    ch.round = g + 1;
  }

  // Whether the group uses peer access, negotiated on its first call that
  // could (two header rounds: willingness and probe addresses, then every
  // member's verdict on reaching all the others with process_vm_readv/
  // writev); every member gets the same answers: `peerAccess` (no member
  // turned it off) and `crossMemoryAttach` (every member reaches every
  // other one by system calls, for buffers outside the shared arenas).
  bool peerAccessReady(Channel &ch, DType dtype) {
    if (ch.peerAccess >= 0)
      return ch.peerAccess == 1;
    std::random_device random;
    uint64_t nonce = (static_cast<uint64_t>(random()) << 32) ^ random();
    ch.probe.fill(nonce);
    bool willing = peerAccessWanted(),
         able = willing && options_.crossMemoryAttach, everyoneWilling = true;
    StreamPlan plan;
    plan.op = kNegotiate;
    plan.dtype = dtype;
    exchangeHeaders(
        ch, plan,
        [&](RoundHeader &h) {
          h.inputAddress = reinterpret_cast<uint64_t>(&ch.probe);
          h.probeNonce = nonce;
          h.peerAccess = willing ? 1 : 0;
        },
        [&](const std::vector<const RoundHeader *> &headers) {
          for (const RoundHeader *h : headers)
            everyoneWilling = everyoneWilling && h->peerAccess == 1;
          able = able && everyoneWilling;
          for (size_t j = 0; j < headers.size() && able; ++j)
            if (j != ch.me)
              able =
                  headers[j]->peerAccess == 1 &&
                  probePeer(ch.segment->control(j).pid.load(
                                std::memory_order_acquire),
                            headers[j]->inputAddress, headers[j]->probeNonce);
        });
    bool everyone = true;
    exchangeHeaders(
        ch, plan, [&](RoundHeader &h) { h.peerAccess = able ? 1 : 0; },
        [&](const std::vector<const RoundHeader *> &headers) {
          for (const RoundHeader *h : headers)
            everyone = everyone && h->peerAccess == 1;
        });
    ch.peerAccess = everyoneWilling ? 1 : 0;
    ch.crossMemoryAttach = everyone ? 1 : 0;
    return everyoneWilling;
  }

  // This process's view of member j's buffer at `address` of its process,
  // lying at `offset` of its arena when `inArena`; null: through system
  // calls.
  char *viewOf(Channel &ch, size_t j, const RoundHeader &h, bool inArena,
               uint64_t address, uint64_t offset) {
    MemberControl &member = ch.segment->control(j);
    int32_t pid = member.pid.load(std::memory_order_acquire);
    if (pid == getpid())
      return reinterpret_cast<char *>(address);
    if (!inArena)
      return nullptr;
    std::lock_guard<std::mutex> lock(arenasMutex_);
    auto key = std::make_tuple(pid, member.startTime, h.arenaFd);
    auto it = arenas_.find(key);
    if (it == arenas_.end()) {
      try {
        it = arenas_
                 .emplace(key, std::make_unique<MappedArena>(pid, h.arenaFd,
                                                             h.arenaBytes))
                 .first;
      } catch (const RuntimeError &) {
        if (ch.crossMemoryAttach == 1)
          return nullptr;
        throw;
      }
    }
    return it->second->at(offset);
  }

  // All_reduce through peer access (HostSharedMemoryPeerAccess.h): post the
  // buffers' addresses (and places in the shared arena) in a round header,
  // wait for every member's, claim and do chunks, wait until every chunk is
  // done. The output accepts the others' writes from before posting until
  // leaving. Returns false, having done nothing but the header round, when
  // some member's buffers are outside its arena and the group cannot use
  // system calls.
  bool allReduceFromPeers(Channel &ch, const Tensor &x, Tensor &out,
                          ReduceOp op) {
    Segment &seg = *ch.segment;
    size_t n = ch.group.size();
    StreamPlan plan;
    plan.op = kAllReduce;
    plan.dtype = x.dtype();
    plan.reduce = static_cast<uint32_t>(op) | 0x200u;
    plan.length = x.nbytes();
    uint64_t g = ch.round;
    size_t slot = g % kSlots;
    if (g >= kSlots)
      waitAll(ch, &MemberControl::done, uint32_t(g - kSlots + 1), "all_reduce");
    writeHeader(ch, slot, plan);
    RoundHeader &header = seg.roundHeader(ch.me, slot);
    header.inputAddress = reinterpret_cast<uint64_t>(x.data());
    header.outputAddress = reinterpret_cast<uint64_t>(out.data());
    SharedArenaLocation input, output;
    header.inArena =
        (sharedArenaLocate(x.data(), x.nbytes(), input) ? 1u : 0u) |
        (sharedArenaLocate(out.data(), out.nbytes(), output) ? 2u : 0u);
    header.arenaFd = input.fd >= 0 ? input.fd : output.fd;
    header.arenaBytes = input.fd >= 0 ? input.arenaBytes : output.arenaBytes;
    header.inputOffset = input.offset;
    header.outputOffset = output.offset;
    PeerAllReduce call;
    call.segment = &seg;
    call.me = ch.me;
    call.token =
        static_cast<uint32_t>(g + 1) == 0 ? 1u : static_cast<uint32_t>(g + 1);
    call.dtype = x.dtype();
    call.op = op;
    call.count = static_cast<uint64_t>(x.numel());
    call.chunkElements =
        peerChunkBytes(x.nbytes(), n, seg.chunkBytes()) / dtypeSize(x.dtype());
    call.firstChunk = ch.peerChunks;
    call.streaming = x.nbytes() >= options_.streamingBytes;
    MemberControl &mine = seg.control(ch.me);
    mine.writable.store(call.token, std::memory_order_seq_cst);
    try {
      seg.publish(mine.posted, uint32_t(g + 1));
      waitAll(ch, &MemberControl::posted, uint32_t(g + 1), "all_reduce");
      checkAllReduceAgreement(ch, slot, plan);
      bool reachable = true;
      for (size_t j = 0; j < n; ++j)
        reachable = reachable && (seg.roundHeader(j, slot).inArena == 3u ||
                                  ch.crossMemoryAttach == 1);
      std::vector<RoundHeader> places(reachable ? n : 0);
      for (size_t j = 0; reachable && j < n; ++j) {
        const RoundHeader &theirs = seg.roundHeader(j, slot);
        places[j] = theirs; // the slot is given back below
        call.pids.push_back(seg.control(j).pid.load(std::memory_order_acquire));
        call.inputs.push_back(theirs.inputAddress);
        call.outputs.push_back(theirs.outputAddress);
      }
      call.inputViews.assign(call.pids.size(), nullptr);
      call.outputViews.assign(call.pids.size(), nullptr);
      seg.publish(mine.done, uint32_t(g + 1)); // the headers are read
      ch.round = g + 1;
      if (!reachable) {
        closeForWrites(seg, ch.me, options_.deadline);
        return false;
      }
      // The views are made once this member claimed a chunk: until every
      // chunk is done no member leaves the call, so every arena is there
      // to be mapped (a member that did all the work may be gone after).
      reduceClaimedChunks(call, ch.scratch, [&] {
        for (size_t j = 0; j < n; ++j) {
          const RoundHeader &h = places[j];
          call.inputViews[j] =
              viewOf(ch, j, h, h.inArena & 1u, h.inputAddress, h.inputOffset);
          call.outputViews[j] =
              viewOf(ch, j, h, h.inArena & 2u, h.outputAddress, h.outputOffset);
        }
      });
      seg.publish(mine.reduced, uint32_t(g + 1)); // claims nothing more
      uint32_t end = call.endChunk();
      std::atomic<uint32_t> &completed = seg.header().completed;
      if (!reached(completed, end))
        seg.waitFor(
            completed, [&] { return reached(completed, end); },
            options_.deadline,
            [&](const std::string &why) {
              return where(ch, "all_reduce") + ": " + why;
            },
            [&] {
              std::vector<int64_t> working;
              for (size_t k = 0; k < n; ++k)
                if (!reached(seg.control(k).reduced, uint32_t(g + 1)))
                  working.push_back(ch.group[k]);
              return ranksToString(working);
            });
      ch.peerChunks = end;
    } catch (...) {
      closeForWrites(seg, ch.me, options_.deadline);
      throw;
    }
    closeForWrites(seg, ch.me, options_.deadline);
    std::lock_guard<std::mutex> lock(statsMutex_);
    ++stats_.peerAccessCalls;
    return true;
  }

  void checkAllReduceAgreement(Channel &ch, size_t slot,
                               const StreamPlan &plan) {
    std::vector<const RoundHeader *> headers(ch.group.size());
    checkAgreement(ch, slot, plan, headers);
    for (size_t j = 0; j < headers.size(); ++j)
      if (headers[j]->length != plan.length ||
          headers[j]->reduce != plan.reduce)
        throw RuntimeError("rank " + std::to_string(ch.group[j]) + " reduces " +
                           std::to_string(headers[j]->length) +
                           " bytes with another reduction or size (" +
                           std::to_string(plan.length) + " bytes here)");
  }

  void allReduceDirect(Channel &ch, const Tensor &x, Tensor &out, ReduceOp op,
                       const StreamPlan &plan) {
    Segment &seg = *ch.segment;
    size_t n = ch.group.size(), esize = dtypeSize(x.dtype());
    uint64_t window = seg.chunkBytes() / esize; // elements per round
    uint64_t count = static_cast<uint64_t>(x.numel());
    uint64_t rounds = std::max<uint64_t>(1, (count + window - 1) / window);
    std::vector<const void *> pieces(n);
    const char *xData = static_cast<const char *>(x.data());
    char *outData = static_cast<char *>(out.data());
    for (uint64_t k = 0; k < rounds; ++k) {
      uint64_t g = ch.round;
      size_t slot = g % kSlots;
      if (g >= kSlots)
        waitAll(ch, &MemberControl::done, uint32_t(g - kSlots + 1),
                "all_reduce");
      uint64_t begin = k * window, len = std::min(window, count - begin);
      if (k == 0)
        writeHeader(ch, slot, plan);
      if (len)
        std::memcpy(seg.input(ch.me, slot), xData + begin * esize, len * esize);
      seg.publish(seg.control(ch.me).posted, uint32_t(g + 1));
      waitAll(ch, &MemberControl::posted, uint32_t(g + 1), "all_reduce");
      if (k == 0)
        checkAllReduceAgreement(ch, slot, plan);
      for (size_t j = 0; j < n; ++j) // my own piece from x, not the copy
        pieces[j] = j == ch.me ? xData + begin * esize : seg.input(j, slot);
      if (len)
        reducePieces(outData + begin * esize, pieces, static_cast<int64_t>(len),
                     x.dtype(), op);
      seg.publish(seg.control(ch.me).done, uint32_t(g + 1));
      ch.round = g + 1;
    }
  }

  // True when every other member's `counter` reached `target` (no wait).
  bool othersReached(Channel &ch, std::atomic<uint32_t> MemberControl::*counter,
                     uint32_t target) {
    for (size_t j = 0; j < ch.group.size(); ++j)
      if (j != ch.me && !reached(ch.segment->control(j).*counter, target))
        return false;
    return true;
  }

  // Each window is cut into one share per member. Three phases per round:
  // post (copy the shares the others reduce into my slot), reduce (my share
  // over every member, mine read from x, into my reduced chunk, then into
  // out), gather (the others' reduced shares into out; then `done`). The
  // phases of different rounds run ahead of each other as far as the data
  // allows (posting up to kSlots rounds ahead), and a member blocks only
  // when no phase can move: on a busy host, each time it runs it does all it
  // can, so the members hand over to each other a few times per tensor, not
  // a few times per round.
  void allReduceByShares(Channel &ch, const Tensor &x, Tensor &out, ReduceOp op,
                         const StreamPlan &plan) {
    Segment &seg = *ch.segment;
    size_t n = ch.group.size(), esize = dtypeSize(x.dtype());
    uint64_t window = seg.chunkBytes() / esize; // elements per round
    uint64_t count = static_cast<uint64_t>(x.numel());
    uint64_t rounds = std::max<uint64_t>(1, (count + window - 1) / window);
    std::vector<const void *> pieces(n);
    const char *xData = static_cast<const char *>(x.data());
    char *outData = static_cast<char *>(out.data());
    auto lengthOf = [&](uint64_t k) {
      return std::min(window, count - k * window);
    };
    auto share = [&](uint64_t len, size_t j) { return len * j / n; };
    // Outputs larger than a core's share of the cache are written around it.
    bool streaming = x.nbytes() >= options_.streamingBytes;
    auto copyOut = [&](char *dst, const char *src, size_t bytes) {
      if (streaming)
        streamCopy(dst, src, bytes);
      else
        std::memcpy(dst, src, bytes);
    };
    uint64_t base = ch.round;
    uint64_t posted = 0, reduced = 0, gathered = 0; // rounds per phase
    MemberControl &mine = seg.control(ch.me);
    while (gathered < rounds) {
      bool moved = false;
      while (posted < rounds && posted < gathered + kSlots) {
        uint64_t g = base + posted;
        if (g >= kSlots &&
            !othersReached(ch, &MemberControl::done, uint32_t(g - kSlots + 1)))
          break;
        size_t slot = g % kSlots;
        uint64_t begin = posted * window, len = lengthOf(posted);
        if (posted == 0)
          writeHeader(ch, slot, plan);
        char *staged = seg.input(ch.me, slot);
        for (size_t j = 0; j < n; ++j) {
          uint64_t bj = share(len, j), lj = share(len, j + 1) - bj;
          if (j != ch.me && lj)
            std::memcpy(staged + bj * esize, xData + (begin + bj) * esize,
                        lj * esize);
        }
        seg.publish(mine.posted, uint32_t(g + 1));
        ++posted;
        moved = true;
      }
      while (reduced < posted) {
        uint64_t g = base + reduced;
        if (!othersReached(ch, &MemberControl::posted, uint32_t(g + 1)))
          break;
        size_t slot = g % kSlots;
        if (reduced == 0)
          checkAllReduceAgreement(ch, slot, plan);
        uint64_t begin = reduced * window, len = lengthOf(reduced);
        uint64_t b = share(len, ch.me), l = share(len, ch.me + 1) - b;
        for (size_t j = 0; j < n; ++j)
          pieces[j] = j == ch.me ? xData + (begin + b) * esize
                                 : seg.input(j, slot) + b * esize;
        char *result = seg.reduced(ch.me, slot) + b * esize;
        if (l)
          reducePieces(result, pieces, static_cast<int64_t>(l), x.dtype(), op);
        seg.publish(mine.reduced, uint32_t(g + 1));
        if (l)
          copyOut(outData + (begin + b) * esize, result, l * esize);
        ++reduced;
        moved = true;
      }
      while (gathered < reduced) {
        uint64_t g = base + gathered;
        if (!othersReached(ch, &MemberControl::reduced, uint32_t(g + 1)))
          break;
        size_t slot = g % kSlots;
        uint64_t begin = gathered * window, len = lengthOf(gathered);
        for (size_t j = 0; j < n; ++j) {
          uint64_t bj = share(len, j), lj = share(len, j + 1) - bj;
          if (j != ch.me && lj)
            copyOut(outData + (begin + bj) * esize,
                    seg.reduced(j, slot) + bj * esize, lj * esize);
        }
        seg.publish(mine.done, uint32_t(g + 1));
        ++gathered;
        moved = true;
      }
      if (moved)
        continue;
      // Nothing can move: wait for what the earliest phase needs.
      if (gathered < reduced)
        waitAll(ch, &MemberControl::reduced, uint32_t(base + gathered + 1),
                "all_reduce");
      else if (reduced < posted)
        waitAll(ch, &MemberControl::posted, uint32_t(base + reduced + 1),
                "all_reduce");
      else
        waitAll(ch, &MemberControl::done, uint32_t(base + posted - kSlots + 1),
                "all_reduce");
    }
    if (streaming)
      streamFence();
    ch.round = base + rounds;
  }

  void finishCall(Channel &ch, uint64_t bytes) {
    SegmentHeader &h = ch.segment->header();
    if (ch.me == 0)
      h.calls.fetch_add(1, std::memory_order_relaxed);
    h.bytes.fetch_add(bytes, std::memory_order_relaxed);
    countBytes(1, bytes);
  }

  // ---- point to point ----

  std::string pairKey(int64_t from, int64_t to) const {
    return options_.prefix + "/pair/" + std::to_string(from) + "," +
           std::to_string(to);
  }

  // Only the sender thread creates and uses outgoing rings, only the
  // receiving thread incoming ones; each map has its own lock, so that a
  // receiver waiting for its peer's ring never blocks our own sends.
  PairChannel &outgoing(int64_t peer) {
    std::lock_guard<std::mutex> lock(outgoingMutex_);
    auto &pair = outgoing_[peer];
    if (!pair) {
      // The receiver creates the ring (its data outlives a sender that
      // exits right after sending).
      auto made = std::make_unique<PairChannel>();
      made->segment = Segment::attach(*store_, pairKey(rank_, peer),
                                      SegmentKind::Pair, {rank_, peer},
                                      options_.ringBytes, 0, options_.deadline);
      made->segment->setHealth(options_.health.get());
      pair = std::move(made);
    }
    return *pair;
  }

  PairChannel &incoming(int64_t peer, const std::string &where) {
    std::lock_guard<std::mutex> lock(incomingMutex_);
    auto &pair = incoming_[peer];
    if (!pair) {
      auto made = std::make_unique<PairChannel>();
      try {
        made->segment =
            Segment::create(*store_, pairKey(peer, rank_), SegmentKind::Pair,
                            {peer, rank_}, options_.ringBytes, 1);
        made->segment->setHealth(options_.health.get());
      } catch (const std::exception &error) {
        throw RuntimeError(where + ": " + error.what());
      }
      pair = std::move(made);
    }
    return *pair;
  }

  // Sender: waits for room (the receiver's `done` ticks), copies, publishes
  // the new position and ticks `posted`.
  void writeRing(PairChannel &pair, const char *src, uint64_t len,
                 const std::string &where, int64_t peer) {
    Segment &seg = *pair.segment;
    uint64_t capacity = seg.chunkBytes();
    MemberControl &mine = seg.control(0), &theirs = seg.control(1);
    while (len > 0) {
      auto room = [&] {
        return capacity - (pair.position -
                           theirs.position.load(std::memory_order_acquire));
      };
      if (room() == 0)
        seg.waitFor(
            theirs.done, [&] { return room() > 0; }, options_.deadline,
            [&](const std::string &why) { return where + ": " + why; },
            [&] { return std::to_string(peer); });
      uint64_t at = pair.position % capacity;
      uint64_t n = std::min({len, room(), capacity - at});
      std::memcpy(seg.ring() + at, src, n);
      pair.position += n;
      src += n;
      len -= n;
      mine.position.store(pair.position, std::memory_order_release);
      seg.publish(mine.posted, mine.posted.load() + 1);
    }
  }

  void readRing(PairChannel &pair, char *dst, uint64_t len,
                const std::string &where, int64_t peer) {
    Segment &seg = *pair.segment;
    uint64_t capacity = seg.chunkBytes();
    MemberControl &mine = seg.control(1), &theirs = seg.control(0);
    while (len > 0) {
      auto ready = [&] {
        return theirs.position.load(std::memory_order_acquire) - pair.position;
      };
      if (ready() == 0)
        seg.waitFor(
            theirs.posted, [&] { return ready() > 0; }, options_.deadline,
            [&](const std::string &why) { return where + ": " + why; },
            [&] { return std::to_string(peer); });
      uint64_t at = pair.position % capacity;
      uint64_t n = std::min({len, ready(), capacity - at});
      std::memcpy(dst, seg.ring() + at, n);
      pair.position += n;
      dst += n;
      len -= n;
      mine.position.store(pair.position, std::memory_order_release);
      seg.publish(mine.done, mine.done.load() + 1);
    }
  }

  void sendLoop() {
    std::unique_lock<std::mutex> lock(sendMutex_);
    while (true) {
      sendWake_.wait(lock, [&] { return stopping_ || !pendingSends_.empty(); });
      if (pendingSends_.empty())
        return; // stopping with nothing left
      PendingSend next = std::move(pendingSends_.front());
      pendingSends_.pop_front();
      lock.unlock();
      std::string where = "send on rank " + std::to_string(rank_) +
                          " to rank " + std::to_string(next.peer) + " (tag " +
                          std::to_string(next.tag) + ")";
      std::string failure;
      try {
        PairChannel &pair = outgoing(next.peer);
        int64_t frame[2] = {next.tag, static_cast<int64_t>(next.data.nbytes())};
        writeRing(pair, reinterpret_cast<const char *>(frame), sizeof(frame),
                  where, next.peer);
        writeRing(pair, static_cast<const char *>(next.data.data()),
                  next.data.nbytes(), where, next.peer);
        countBytes(0, next.data.nbytes());
      } catch (const std::exception &error) {
        failure = error.what();
      }
      lock.lock();
      if (!failure.empty() && sendFailure_.empty())
        sendFailure_ = failure;
    }
  }

  int rank_;
  std::shared_ptr<KeyValueStore> store_;
  HostSharedMemoryOptions options_;
  std::map<int64_t, std::string> hosts_;
  std::mutex channelsMutex_; // guards channels_ (not the channels)
  std::map<Group, std::unique_ptr<Channel>> channels_;
  // Other members' shared arenas mapped here, by (pid, process start time,
  // descriptor).
  std::mutex arenasMutex_;
  std::map<std::tuple<int32_t, uint64_t, int32_t>, std::unique_ptr<MappedArena>>
      arenas_;
  std::mutex outgoingMutex_, incomingMutex_;
  std::map<int64_t, std::unique_ptr<PairChannel>> outgoing_, incoming_;
  mutable std::mutex statsMutex_;
  HostSharedMemoryStats stats_;
  std::mutex sendMutex_; // guards the members below
  std::condition_variable sendWake_;
  std::deque<PendingSend> pendingSends_;
  std::atomic<bool> stopping_{false};
  std::string sendFailure_;
  std::thread sender_;
};

} // namespace

std::string localHostIdentity() {
  if (const char *forced = std::getenv("DTORCH_HOST_ID"); forced && *forced)
    return forced;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "|" +
         readFirstLine("/proc/sys/kernel/random/boot_id") + "|" +
         readLink("/proc/self/ns/ipc") + "|" + readLink("/proc/self/ns/mnt") +
         "|" + readLink("/proc/self/ns/pid") + "|" +
         readLink("/proc/self/ns/net") + "|uid " + std::to_string(getuid());
}

std::unique_ptr<HostSharedMemoryCommunicator>
makeHostSharedMemoryCommunicator(int rank, std::shared_ptr<KeyValueStore> store,
                                 const HostSharedMemoryOptions &options) {
  if (!store)
    throw RuntimeError("the shared-memory communicator needs a store");
  return std::make_unique<HostShmCommunicator>(rank, std::move(store), options);
}

// ---- FileKeyValueStore
// ---------------------------------------------------------

FileKeyValueStore::FileKeyValueStore(std::string directory)
    : directory_(std::move(directory)) {}

std::string FileKeyValueStore::pathOf(const std::string &key) const {
  static const char *hex = "0123456789abcdef";
  std::string name;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += hex[c >> 4];
      name += hex[c & 15];
    }
  }
  return directory_ + "/" + name;
}

void FileKeyValueStore::set(const std::string &key, const std::string &value) {
  std::string path = pathOf(key);
  std::string temporary =
      path + ".tmp." + std::to_string(getpid()) + "." +
      std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file << value;
    if (!file)
      throw RuntimeError("file store: cannot write " + temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0)
    throw RuntimeError("file store: cannot rename " + temporary);
}

std::string FileKeyValueStore::get(const std::string &key,
                                   std::chrono::milliseconds timeout) {
  std::string path = pathOf(key);
  auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::ifstream file(path, std::ios::binary);
    if (file)
      return std::string((std::istreambuf_iterator<char>(file)),
                         std::istreambuf_iterator<char>());
    if (std::chrono::steady_clock::now() >= until)
      throw RuntimeError("file store: key '" + key + "' did not appear in " +
                         std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

} // namespace dtorch::rt
