#include "dtorch/runtime/FakeCollectives.h"

#include "dtorch/runtime/Shape.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

namespace dtorch::rt {

namespace {

using Clock = std::chrono::steady_clock;

// What one member brings to a rendezvous: a private copy of its input and
// the parameters the others need to interpret it.
struct Contribution {
  Contribution() = default;
  explicit Contribution(Tensor snapshot, int64_t dim = 0,
                        std::vector<int64_t> sizes = {})
      : data(std::move(snapshot)), splitDim(dim), splitSizes(std::move(sizes)) {
  }
  Tensor data; // undefined for non-root broadcast members
  int64_t splitDim = 0;
  std::vector<int64_t> splitSizes;
};

struct Rendezvous {
  std::string op;
  DType dtype = ::dtorch::wire::DTYPE_INVALID;
  std::map<int64_t, Contribution> arrived; // by global rank
  size_t departed = 0;
  std::string failure; // set when the rendezvous can no longer complete
};

using RendezvousKey = std::pair<Group, uint64_t>;

std::string missingRanks(const Group &group,
                         const std::map<int64_t, Contribution> &arrived) {
  std::string text;
  for (int64_t rank : group) {
    if (arrived.count(rank))
      continue;
    if (!text.empty())
      text += ", ";
    text += std::to_string(rank);
  }
  return text;
}

Shape withExtent(Shape shape, int64_t dim, int64_t extent) {
  shape[dim] = extent;
  return shape;
}

void requireShape(const Tensor &tensor, DType dtype, const Shape &shape,
                  const std::string &what) {
  if (!tensor.defined() || tensor.dtype() != dtype || tensor.shape() != shape)
    throw RuntimeError(what + ": expected " + dtypeName(dtype) +
                       shapeToString(shape) + ", got " + tensor.describe());
}

void checkSizes(const std::vector<int64_t> &sizes, const Group &group,
                const char *what) {
  if (sizes.size() != group.size())
    throw RuntimeError(
        std::string(what) + " has " + std::to_string(sizes.size()) +
        " entries for a group of " + std::to_string(group.size()));
  for (int64_t size : sizes)
    if (size < 0)
      throw RuntimeError(std::string(what) + " has a negative entry");
}

int64_t sumOf(const std::vector<int64_t> &sizes) {
  int64_t total = 0;
  for (int64_t size : sizes)
    total += size;
  return total;
}

} // namespace

// A member's handle on a rendezvous it joined.
struct Joined {
  std::shared_ptr<Rendezvous> slot;
  uint64_t sequence = 0;
};

struct FakeCollectiveHub::State {
  int worldSize = 0;
  std::chrono::milliseconds deadline{0};
  std::mutex mutex;
  std::condition_variable changed;
  std::map<RendezvousKey, std::shared_ptr<Rendezvous>> rendezvous;
  Mailboxes mailboxes;
};

namespace {

class FakeCommunicator final : public Communicator {
public:
  FakeCommunicator(std::shared_ptr<FakeCollectiveHub::State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  int rank() const override { return rank_; }

  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override {
    groupIndexOf(group, rank_);
    requireShape(out, x.dtype(), x.shape(), "all_reduce output");
    checkReducible(x.dtype(), op); // before arriving: every member throws
    Contribution mine{x.clone()};
    auto joined = arrive("all_reduce", x.dtype(), group, std::move(mine));
    LeaveOnExit leave(*this, group, joined);
    const Rendezvous *slot = leave.joined.slot.get();
    std::vector<const void *> pieces; // in group order
    for (size_t j = 0; j < group.size(); ++j) {
      const Tensor &piece = slot->arrived.at(group[j]).data;
      requireShape(piece, out.dtype(), out.shape(),
                   "all_reduce input of rank " + std::to_string(group[j]));
      pieces.push_back(piece.data());
    }
    reducePieces(out.data(), pieces, out.numel(), out.dtype(), op);
  }

  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkSizes(sizes, group, "all_gather sizes");
    dim = normalizeDim(dim, x.dim(), "all_gather dim");
    requireShape(x, x.dtype(), withExtent(x.shape(), dim, sizes[me]),
                 "all_gather input");
    requireShape(out, x.dtype(), withExtent(x.shape(), dim, sumOf(sizes)),
                 "all_gather output");
    auto joined =
        arrive("all_gather", x.dtype(), group, Contribution{x.clone()});
    LeaveOnExit leave(*this, group, joined);
    const Rendezvous *slot = leave.joined.slot.get();
    std::vector<int64_t> offsets = exclusivePrefixSums(sizes);
    for (size_t j = 0; j < group.size(); ++j) {
      const Tensor &piece = slot->arrived.at(group[j]).data;
      Shape extent = withExtent(out.shape(), dim, sizes[j]);
      requireShape(piece, out.dtype(), extent,
                   "all_gather piece of rank " + std::to_string(group[j]));
      copyBox(piece.data(), extent, Shape(extent.size(), 0), out.data(),
              out.shape(), withExtent(Shape(extent.size(), 0), dim, offsets[j]),
              extent, dtypeSize(out.dtype()));
    }
  }

  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkSizes(sizes, group, "reduce_scatter sizes");
    dim = normalizeDim(dim, x.dim(), "reduce_scatter dim");
    requireShape(x, x.dtype(), withExtent(x.shape(), dim, sumOf(sizes)),
                 "reduce_scatter input");
    requireShape(out, x.dtype(), withExtent(x.shape(), dim, sizes[me]),
                 "reduce_scatter output");
    checkReducible(x.dtype(), op); // before arriving: every member throws
    auto joined =
        arrive("reduce_scatter", x.dtype(), group, Contribution{x.clone()});
    LeaveOnExit leave(*this, group, joined);
    const Rendezvous *slot = leave.joined.slot.get();
    Shape sourceOffset = withExtent(Shape(x.shape().size(), 0), dim,
                                    exclusivePrefixSums(sizes)[me]);
    Shape zero(x.shape().size(), 0);
    // Every member's piece me, copied side by side, then reduced in group
    // order.
    std::vector<Tensor> copies;
    std::vector<const void *> pieces;
    for (size_t j = 0; j < group.size(); ++j) {
      const Tensor &whole = slot->arrived.at(group[j]).data;
      requireShape(whole, x.dtype(), x.shape(),
                   "reduce_scatter input of rank " + std::to_string(group[j]));
      copies.push_back(Tensor::empty(out.dtype(), out.shape()));
      copyBox(whole.data(), whole.shape(), sourceOffset, copies.back().data(),
              out.shape(), zero, out.shape(), dtypeSize(out.dtype()));
      pieces.push_back(copies.back().data());
    }
    reducePieces(out.data(), pieces, out.numel(), out.dtype(), op);
  }

  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkSizes(splitSizes, group, "all_to_all split_sizes");
    checkSizes(concatSizes, group, "all_to_all concat_sizes");
    splitDim = normalizeDim(splitDim, x.dim(), "all_to_all split_dim");
    concatDim = normalizeDim(concatDim, x.dim(), "all_to_all concat_dim");
    if (x.shape()[splitDim] != sumOf(splitSizes))
      throw RuntimeError("all_to_all input " + x.describe() + " has extent " +
                         std::to_string(x.shape()[splitDim]) +
                         " along split_dim, split_sizes sum to " +
                         std::to_string(sumOf(splitSizes)));
    if (!out.defined() || out.dtype() != x.dtype() || out.dim() != x.dim() ||
        out.shape()[concatDim] != sumOf(concatSizes))
      throw RuntimeError("all_to_all output " + out.describe() +
                         " does not match input " + x.describe() +
                         " and concat_sizes");
    Contribution mine{x.clone(), splitDim, splitSizes};
    auto joined = arrive("all_to_all", x.dtype(), group, std::move(mine));
    LeaveOnExit leave(*this, group, joined);
    const Rendezvous *slot = leave.joined.slot.get();
    std::vector<int64_t> concatOffsets = exclusivePrefixSums(concatSizes);
    for (size_t j = 0; j < group.size(); ++j) {
      const Contribution &from = slot->arrived.at(group[j]);
      if (from.splitSizes.size() != group.size())
        throw RuntimeError("all_to_all: rank " + std::to_string(group[j]) +
                           " used a different group size");
      Shape pieceShape =
          withExtent(from.data.shape(), from.splitDim, from.splitSizes[me]);
      Shape slotShape = withExtent(out.shape(), concatDim, concatSizes[j]);
      if (pieceShape != slotShape)
        throw RuntimeError("all_to_all: piece " + shapeToString(pieceShape) +
                           " from rank " + std::to_string(group[j]) +
                           " does not fit the output slot " +
                           shapeToString(slotShape));
      Shape sourceOffset =
          withExtent(Shape(pieceShape.size(), 0), from.splitDim,
                     exclusivePrefixSums(from.splitSizes)[me]);
      Shape targetOffset =
          withExtent(Shape(pieceShape.size(), 0), concatDim, concatOffsets[j]);
      copyBox(from.data.data(), from.data.shape(), sourceOffset, out.data(),
              out.shape(), targetOffset, pieceShape, dtypeSize(out.dtype()));
    }
  }

  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override {
    groupIndexOf(group, rank_);
    groupIndexOf(group, root);
    if (!out.defined())
      throw RuntimeError("broadcast output is undefined");
    Contribution mine;
    if (rank_ == root) {
      requireShape(x, out.dtype(), out.shape(), "broadcast input on the root");
      mine.data = x.clone();
    }
    auto joined = arrive("broadcast", out.dtype(), group, std::move(mine));
    LeaveOnExit leave(*this, group, joined);
    const Rendezvous *slot = leave.joined.slot.get();
    const Tensor &source = slot->arrived.at(root).data;
    requireShape(source, out.dtype(), out.shape(),
                 "broadcast data of root " + std::to_string(root));
    if (out.nbytes())
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
  // Leaves the rendezvous when the caller is done reading the others' data.
  struct LeaveOnExit {
    FakeCommunicator &self;
    const Group &group;
    Joined joined;
    LeaveOnExit(FakeCommunicator &s, const Group &g, Joined j)
        : self(s), group(g), joined(std::move(j)) {}
    ~LeaveOnExit() { self.depart(group, joined); }
  };

  void checkPeer(int64_t peer) const {
    if (peer < 0 || peer >= state_->worldSize)
      throw RuntimeError("peer rank " + std::to_string(peer) +
                         " is outside the world of " +
                         std::to_string(state_->worldSize));
  }

  Joined arrive(const char *op, DType dtype, const Group &group,
                Contribution contribution) {
    for (int64_t member : group)
      if (member < 0 || member >= state_->worldSize)
        throw RuntimeError(std::string(op) + ": group " + groupToString(group) +
                           " names a rank outside the world of " +
                           std::to_string(state_->worldSize));
    std::unique_lock<std::mutex> lock(state_->mutex);
    uint64_t sequence = nextSequence_[group]++;
    std::string where = std::string(op) + " on group " + groupToString(group) +
                        " (call " + std::to_string(sequence) +
                        " on this group) from rank " + std::to_string(rank_);
    auto &entry = state_->rendezvous[RendezvousKey(group, sequence)];
    if (!entry) {
      entry = std::make_shared<Rendezvous>();
      entry->op = op;
      entry->dtype = dtype;
    }
    std::shared_ptr<Rendezvous> slot = entry;
    if (!slot->failure.empty())
      throw RuntimeError(where + ": " + slot->failure);
    if (slot->op != op || slot->dtype != dtype) {
      slot->failure = "members disagree: " + slot->op + " of " +
                      dtypeName(slot->dtype) + " vs " + op + " of " +
                      dtypeName(dtype);
      state_->changed.notify_all();
      throw RuntimeError(where + ": " + slot->failure);
    }
    slot->arrived.emplace(rank_, std::move(contribution));
    state_->changed.notify_all();
    bool complete =
        state_->changed.wait_until(lock, Clock::now() + state_->deadline, [&] {
          return slot->arrived.size() == group.size() || !slot->failure.empty();
        });
    if (!slot->failure.empty() && slot->arrived.size() != group.size())
      throw RuntimeError(where + ": " + slot->failure);
    if (!complete) {
      std::string missing = missingRanks(group, slot->arrived);
      slot->failure = "rank " + std::to_string(rank_) + " gave up after " +
                      std::to_string(state_->deadline.count()) +
                      " ms waiting for rank(s) " + missing;
      state_->changed.notify_all();
      throw RuntimeError(where + ": timed out after " +
                         std::to_string(state_->deadline.count()) +
                         " ms waiting for rank(s) " + missing);
    }
    return Joined{slot, sequence};
  }

  void depart(const Group &group, const Joined &joined) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (++joined.slot->departed == group.size())
      state_->rendezvous.erase(RendezvousKey(group, joined.sequence));
  }

  std::shared_ptr<FakeCollectiveHub::State> state_;
  int rank_;
  std::map<Group, uint64_t> nextSequence_; // guarded by state_->mutex
};

} // namespace

FakeCollectiveHub::FakeCollectiveHub(int worldSize,
                                     std::chrono::milliseconds deadline)
    : state_(std::make_shared<State>()) {
  if (worldSize < 1)
    throw RuntimeError("FakeCollectiveHub needs at least one rank");
  if (deadline.count() <= 0)
    throw RuntimeError("FakeCollectiveHub deadline must be positive");
  state_->worldSize = worldSize;
  state_->deadline = deadline;
}

FakeCollectiveHub::~FakeCollectiveHub() = default;

int FakeCollectiveHub::worldSize() const { return state_->worldSize; }
std::chrono::milliseconds FakeCollectiveHub::deadline() const {
  return state_->deadline;
}

std::unique_ptr<Communicator> FakeCollectiveHub::communicator(int rank) {
  if (rank < 0 || rank >= state_->worldSize)
    throw RuntimeError("rank " + std::to_string(rank) +
                       " is outside the world of " +
                       std::to_string(state_->worldSize));
  return std::make_unique<FakeCommunicator>(state_, rank);
}

} // namespace dtorch::rt
