#include "dtorch/runtime/SharedMemoryCollectives.h"

#include "CollectiveSupport.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <tuple>

namespace dtorch::rt {

using namespace detail;

namespace {

using Clock = std::chrono::steady_clock;

// What a member publishes: pointers into its own tensors, valid until every
// member has left the rendezvous.
struct Member {
  bool arrived = false;
  const Tensor *x = nullptr; // may be undefined (non-root broadcast)
  Tensor *out = nullptr;
  int64_t splitDim = 0;
  const std::vector<int64_t> *splitSizes = nullptr;
};

struct Slot {
  std::string op;
  DType dtype = ::dtorch::wire::DTYPE_INVALID;
  std::vector<Member> members; // by group index
  size_t arrived = 0;
  size_t phase[2] = {0, 0}; // members past each barrier
  size_t departed = 0;
  std::string failure;
};

using SlotKey = std::pair<Group, uint64_t>;

} // namespace

struct SharedMemoryHub::State {
  std::set<int64_t> localRanks;
  int worldSize = 0;
  std::chrono::milliseconds deadline{0};
  std::mutex mutex;
  std::condition_variable changed;
  std::map<SlotKey, std::shared_ptr<Slot>> slots;
  Mailboxes mailboxes;
};

namespace {

std::string missingOf(const Group &group, const Slot &slot) {
  std::vector<int64_t> missing;
  for (size_t j = 0; j < group.size(); ++j)
    if (!slot.members[j].arrived)
      missing.push_back(group[j]);
  return ranksToString(missing);
}

class ShmCommunicator final : public Communicator {
public:
  ShmCommunicator(std::shared_ptr<SharedMemoryHub::State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }

  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override {
    size_t me = groupIndexOf(group, rank_);
    if (!x.defined())
      throw RuntimeError("all_reduce input is undefined");
    requireShape(out, x.dtype(), x.shape(), "all_reduce output");
    checkReducible(x.dtype(), op);
    Session s(*this, "all_reduce", x.dtype(), group, me,
              Member{true, &x, &out});
    size_t n = group.size();
    for (size_t j = 0; j < n; ++j)
      requireShape(*s.member(j).x, x.dtype(), x.shape(),
                   "all_reduce input of rank " + std::to_string(group[j]));
    int64_t count = x.numel();
    size_t esize = dtypeSize(x.dtype());
    auto chunkBegin = [&](size_t j) {
      return count * static_cast<int64_t>(j) / static_cast<int64_t>(n);
    };
    // Phase 1: reduce my chunk over every member's input, in group order
    // (reducePieces goes block by block, so the accumulator stays in cache
    // while every member's piece streams through it once).
    int64_t begin = chunkBegin(me), length = chunkBegin(me + 1) - begin;
    std::vector<const void *> pieces(n);
    for (size_t j = 0; j < n; ++j)
      pieces[j] =
          static_cast<const char *>(s.member(j).x->data()) + begin * esize;
    reducePieces(static_cast<char *>(out.data()) + begin * esize, pieces,
                 length, x.dtype(), op);
    s.barrier(0);
    // Phase 2: gather the other members' reduced chunks.
    for (size_t j = 0; j < n; ++j) {
      if (j == me)
        continue;
      int64_t b = chunkBegin(j), l = chunkBegin(j + 1) - b;
      if (l > 0)
        std::memcpy(static_cast<char *>(out.data()) + b * esize,
                    static_cast<const char *>(s.member(j).out->data()) +
                        b * esize,
                    l * esize);
    }
  }

  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkAllGather(x, out, group, me, dim, sizes);
    Session s(*this, "all_gather", x.dtype(), group, me,
              Member{true, &x, &out});
    std::vector<int64_t> offsets = exclusivePrefixSums(sizes);
    for (size_t j = 0; j < group.size(); ++j) {
      const Tensor &piece = *s.member(j).x;
      Shape extent = withExtent(out.shape(), dim, sizes[j]);
      requireShape(piece, out.dtype(), extent,
                   "all_gather piece of rank " + std::to_string(group[j]));
      copyBox(piece.data(), extent, zeros(extent.size()), out.data(),
              out.shape(), offsetAlong(extent.size(), dim, offsets[j]), extent,
              dtypeSize(out.dtype()));
    }
  }

  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkReduceScatter(x, out, group, me, op, dim, sizes);
    Session s(*this, "reduce_scatter", x.dtype(), group, me,
              Member{true, &x, &out});
    size_t n = group.size();
    for (size_t j = 0; j < n; ++j)
      requireShape(*s.member(j).x, x.dtype(), x.shape(),
                   "reduce_scatter input of rank " + std::to_string(group[j]));
    // My piece is `outer` contiguous runs of `run` elements, `stride` apart
    // in every member's input (one run when nothing precedes `dim`); each run
    // is reduced straight from the members' memory, in group order.
    int64_t outer = outerCount(x.shape(), dim),
            unit = innerCount(x.shape(), dim);
    int64_t run = sizes[me] * unit, stride = x.shape()[dim] * unit;
    int64_t first = exclusivePrefixSums(sizes)[me] * unit;
    size_t esize = dtypeSize(x.dtype());
    std::vector<const void *> pieces(n);
    for (int64_t o = 0; run > 0 && o < outer; ++o) {
      for (size_t j = 0; j < n; ++j)
        pieces[j] = static_cast<const char *>(s.member(j).x->data()) +
                    (o * stride + first) * esize;
      reducePieces(static_cast<char *>(out.data()) + o * run * esize, pieces,
                   run, out.dtype(), op);
    }
  }

  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkAllToAll(x, out, group, splitDim, splitSizes, concatDim, concatSizes);
    Member published{true, &x, &out, splitDim, &splitSizes};
    Session s(*this, "all_to_all", x.dtype(), group, me, published);
    std::vector<int64_t> concatOffsets = exclusivePrefixSums(concatSizes);
    for (size_t j = 0; j < group.size(); ++j) {
      const Member &from = s.member(j);
      const Tensor &source = *from.x;
      if (from.splitSizes->size() != group.size())
        throw RuntimeError("all_to_all: rank " + std::to_string(group[j]) +
                           " used a different group size");
      Shape pieceShape =
          withExtent(source.shape(), from.splitDim, (*from.splitSizes)[me]);
      Shape slotShape = withExtent(out.shape(), concatDim, concatSizes[j]);
      if (pieceShape != slotShape)
        throw RuntimeError("all_to_all: piece " + shapeToString(pieceShape) +
                           " from rank " + std::to_string(group[j]) +
                           " does not fit the output slot " +
                           shapeToString(slotShape));
      Shape sourceOffset =
          offsetAlong(pieceShape.size(), from.splitDim,
                      exclusivePrefixSums(*from.splitSizes)[me]);
      copyBox(source.data(), source.shape(), sourceOffset, out.data(),
              out.shape(),
              offsetAlong(pieceShape.size(), concatDim, concatOffsets[j]),
              pieceShape, dtypeSize(out.dtype()));
    }
  }

  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override {
    size_t me = groupIndexOf(group, rank_);
    size_t rootIndex = groupIndexOf(group, root);
    if (!out.defined())
      throw RuntimeError("broadcast output is undefined");
    if (rank_ == root)
      requireShape(x, out.dtype(), out.shape(), "broadcast input on the root");
    Session s(*this, "broadcast", out.dtype(), group, me,
              Member{true, &x, &out});
    const Tensor &source = *s.member(rootIndex).x;
    requireShape(source, out.dtype(), out.shape(),
                 "broadcast data of root " + std::to_string(root));
    if (out.nbytes() && out.data() != source.data())
      std::memcpy(out.data(), source.data(), out.nbytes());
  }

  void send(const Tensor &x, int64_t peer, int64_t tag) override {
    checkPeer(peer);
    state_->mailboxes.post(rank_, peer, tag, x);
  }

  void recv(Tensor &out, int64_t peer, int64_t tag) override {
    checkPeer(peer);
    state_->mailboxes.take(peer, rank_, tag, state_->deadline, out);
  }

private:
  // One member's participation in one rendezvous. The destructor is the
  // final barrier: nobody leaves (and frees its tensors) while another member
  // may still read them. A member that throws marks the slot failed, so the
  // others stop waiting for it.
  class Session {
  public:
    Session(ShmCommunicator &comm, const char *op, DType dtype,
            const Group &group, size_t me, Member published)
        : comm_(comm), group_(group), me_(me),
          exceptions_(std::uncaught_exceptions()) {
      auto &st = *comm.state_;
      for (int64_t member : group)
        if (!st.localRanks.count(member))
          throw RuntimeError(std::string(op) + ": group " +
                             groupToString(group) + " has rank " +
                             std::to_string(member) +
                             " outside this process's shared-memory ranks");
      std::unique_lock<std::mutex> lock(st.mutex);
      uint64_t sequence = comm.nextSequence_[group]++;
      key_ = SlotKey(group, sequence);
      where_ = std::string(op) + " on group " + groupToString(group) +
               " (call " + std::to_string(sequence) + ") on rank " +
               std::to_string(comm.rank_);
      auto &entry = st.slots[key_];
      if (!entry) {
        entry = std::make_shared<Slot>();
        entry->op = op;
        entry->dtype = dtype;
        entry->members.resize(group.size());
      }
      slot_ = entry;
      slot_->members[me] = published;
      slot_->members[me].arrived = true;
      ++slot_->arrived;
      st.changed.notify_all();
      if (slot_->op != op || slot_->dtype != dtype) {
        fail(lock, "members disagree: " + slot_->op + " of " +
                       dtypeName(slot_->dtype) + " vs " + op + " of " +
                       dtypeName(dtype));
      }
      waitUntil(lock, [&] { return slot_->arrived == group.size(); }, true);
    }

    ~Session() {
      auto &st = *comm_.state_;
      std::unique_lock<std::mutex> lock(st.mutex);
      if (std::uncaught_exceptions() > exceptions_ && slot_->failure.empty()) {
        slot_->failure = "rank " + std::to_string(comm_.rank_) + " failed";
      }
      ++slot_->departed;
      st.changed.notify_all();
      // Everyone who arrived may be reading our tensors: wait for them.
      st.changed.wait_until(lock, Clock::now() + st.deadline,
                            [&] { return slot_->departed >= slot_->arrived; });
      if (slot_->departed >= slot_->arrived) {
        auto it = st.slots.find(key_);
        if (it != st.slots.end() && it->second == slot_ &&
            slot_->departed == group_.size())
          st.slots.erase(it);
      }
    }

    const Member &member(size_t j) const { return slot_->members[j]; }

    void barrier(int phase) {
      auto &st = *comm_.state_;
      std::unique_lock<std::mutex> lock(st.mutex);
      ++slot_->phase[phase];
      st.changed.notify_all();
      waitUntil(
          lock, [&] { return slot_->phase[phase] == group_.size(); }, false);
    }

  private:
    template <class Pred>
    void waitUntil(std::unique_lock<std::mutex> &lock, Pred done,
                   bool arrival) {
      auto &st = *comm_.state_;
      bool ok = st.changed.wait_until(lock, Clock::now() + st.deadline, [&] {
        return done() || !slot_->failure.empty();
      });
      if (!slot_->failure.empty() && !done())
        throw RuntimeError(where_ + ": " + slot_->failure);
      if (!ok) {
        std::string missing =
            arrival ? missingOf(group_, *slot_) : "(a member stalled)";
        fail(lock, "timed out after " + std::to_string(st.deadline.count()) +
                       " ms waiting for rank(s) " + missing);
      }
    }

    [[noreturn]] void fail(std::unique_lock<std::mutex> &,
                           const std::string &why) {
      if (slot_->failure.empty())
        slot_->failure = why;
      comm_.state_->changed.notify_all();
      throw RuntimeError(where_ + ": " + why);
    }

    ShmCommunicator &comm_;
    const Group &group_;
    size_t me_;
    int exceptions_;
    SlotKey key_;
    std::string where_;
    std::shared_ptr<Slot> slot_;
  };

  void checkPeer(int64_t peer) const {
    if (!state_->localRanks.count(peer))
      throw RuntimeError("peer rank " + std::to_string(peer) +
                         " is not hosted in this process's shared memory");
  }

  std::shared_ptr<SharedMemoryHub::State> state_;
  int rank_;
  std::map<Group, uint64_t> nextSequence_; // guarded by state_->mutex
};

} // namespace

SharedMemoryHub::SharedMemoryHub(std::set<int64_t> localRanks, int worldSize,
                                 std::chrono::milliseconds deadline)
    : state_(std::make_shared<State>()) {
  if (localRanks.empty())
    throw RuntimeError("SharedMemoryHub needs at least one rank");
  if (deadline.count() <= 0)
    throw RuntimeError("SharedMemoryHub deadline must be positive");
  for (int64_t rank : localRanks)
    if (rank < 0 || rank >= worldSize)
      throw RuntimeError("rank " + std::to_string(rank) +
                         " is outside the world of " +
                         std::to_string(worldSize));
  state_->localRanks = std::move(localRanks);
  state_->worldSize = worldSize;
  state_->deadline = deadline;
}

SharedMemoryHub::~SharedMemoryHub() = default;

const std::set<int64_t> &SharedMemoryHub::localRanks() const {
  return state_->localRanks;
}

bool SharedMemoryHub::hostsAll(const Group &group) const {
  for (int64_t rank : group)
    if (!state_->localRanks.count(rank))
      return false;
  return !group.empty();
}

std::chrono::milliseconds SharedMemoryHub::deadline() const {
  return state_->deadline;
}

std::unique_ptr<Communicator> SharedMemoryHub::communicator(int rank) {
  if (!state_->localRanks.count(rank))
    throw RuntimeError("rank " + std::to_string(rank) +
                       " is not hosted by this SharedMemoryHub");
  return std::make_unique<ShmCommunicator>(state_, rank);
}

// ---- RoutingCommunicator
// ------------------------------------------------------

RoutingCommunicator::RoutingCommunicator(int rank, std::set<int64_t> localRanks,
                                         std::unique_ptr<Communicator> local,
                                         std::function<Communicator *()> remote)
    : rank_(rank), localRanks_(std::move(localRanks)), local_(std::move(local)),
      remoteFactory_(std::move(remote)) {}

void RoutingCommunicator::setHostTransport(
    Communicator *host, std::function<bool(const Group &)> onHost) {
  host_ = host;
  onHost_ = std::move(onHost);
  hostGroups_.clear();
}

RoutingCommunicator::Routes RoutingCommunicator::routes() const {
  return Routes{localCalls_.load(), hostCalls_.load(), remoteCalls_.load()};
}

Communicator &RoutingCommunicator::pick(const Group &group) {
  bool allLocal = !group.empty();
  for (int64_t member : group)
    allLocal = allLocal && localRanks_.count(member) > 0;
  if (allLocal) {
    ++localCalls_;
    return *local_;
  }
  if (host_) {
    auto known = hostGroups_.find(group);
    if (known == hostGroups_.end())
      known = hostGroups_.emplace(group, onHost_(group)).first;
    if (known->second) {
      ++hostCalls_;
      return *host_;
    }
  }
  ++remoteCalls_;
  if (!remote_) {
    if (!remoteFactory_)
      throw RuntimeError(
          "group " + groupToString(group) +
          " spans processes but no cross-process backend is configured");
    remote_ = remoteFactory_();
  }
  return *remote_;
}

Communicator &RoutingCommunicator::pickPeer(int64_t peer) {
  return pick(Group{static_cast<int64_t>(rank_), peer});
}

void RoutingCommunicator::all_reduce(const Tensor &x, Tensor &out,
                                     const Group &group, ReduceOp op) {
  pick(group).all_reduce(x, out, group, op);
}
void RoutingCommunicator::all_gather(const Tensor &x, Tensor &out,
                                     const Group &group, int64_t dim,
                                     const std::vector<int64_t> &sizes) {
  pick(group).all_gather(x, out, group, dim, sizes);
}
void RoutingCommunicator::reduce_scatter(const Tensor &x, Tensor &out,
                                         const Group &group, ReduceOp op,
                                         int64_t dim,
                                         const std::vector<int64_t> &sizes) {
  pick(group).reduce_scatter(x, out, group, op, dim, sizes);
}
void RoutingCommunicator::all_to_all(const Tensor &x, Tensor &out,
                                     const Group &group, int64_t splitDim,
                                     const std::vector<int64_t> &splitSizes,
                                     int64_t concatDim,
                                     const std::vector<int64_t> &concatSizes) {
  pick(group).all_to_all(x, out, group, splitDim, splitSizes, concatDim,
                         concatSizes);
}
void RoutingCommunicator::broadcast(const Tensor &x, Tensor &out,
                                    const Group &group, int64_t root) {
  pick(group).broadcast(x, out, group, root);
}
void RoutingCommunicator::send(const Tensor &x, int64_t peer, int64_t tag) {
  pickPeer(peer).send(x, peer, tag);
}
void RoutingCommunicator::recv(Tensor &out, int64_t peer, int64_t tag) {
  pickPeer(peer).recv(out, peer, tag);
}

} // namespace dtorch::rt
