#include "dtorch/runtime/GlooCollectives.h"

#include "CollectiveSupport.h"
#include "GlooPairAuthentication.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace dtorch::rt {

using namespace detail;

namespace {

using Clock = std::chrono::steady_clock;
using UnboundBuffer = ::gloo::transport::UnboundBuffer;

// Gloo's store interface on top of ours, with keys under a prefix.
class StoreAdapter final : public ::gloo::rendezvous::Store {
public:
  StoreAdapter(std::shared_ptr<KeyValueStore> store, std::string prefix,
               std::chrono::milliseconds timeout)
      : store_(std::move(store)), prefix_(std::move(prefix)),
        timeout_(timeout) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    store_->set(prefix_ + "/" + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string &key) override {
    std::string value = fetch(key, timeout_);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string> &keys) override {
    wait(keys, timeout_);
  }
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override {
    for (const auto &key : keys)
      fetch(key, std::min(timeout, timeout_));
  }

private:
  std::string fetch(const std::string &key, std::chrono::milliseconds timeout) {
    try {
      return store_->get(prefix_ + "/" + key, timeout);
    } catch (const RuntimeError &error) {
      // Gloo's keys are the ranks' numbers.
      bool numeric = !key.empty() &&
                     key.find_first_not_of("0123456789") == std::string::npos;
      throw RuntimeError("gloo rendezvous: " +
                         (numeric ? "rank " + key + " did not join"
                                  : "key '" + key + "' missing") +
                         ": " + error.what());
    }
  }

  std::shared_ptr<KeyValueStore> store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

std::shared_ptr<::gloo::transport::Device>
deviceFor(const std::string &hostname) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<::gloo::transport::Device>>
      devices;
  std::lock_guard<std::mutex> lock(mutex);
  auto &device = devices[hostname];
  if (!device) {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = hostname;
    device = ::gloo::transport::tcp::CreateDevice(attr);
  }
  return device;
}

uint64_t hashGroup(const Group &group) {
  uint64_t hash = 1469598103934665603ull;
  for (int64_t rank : group) {
    hash ^= static_cast<uint64_t>(rank) + 0x9E3779B97F4A7C15ull;
    hash *= 1099511628211ull;
  }
  return hash;
}

class GlooCommunicator;

// The transfers of one step of a collective: one unbound buffer per transfer
// so that each completion is known by peer; waits with the deadline.
class Exchange {
public:
  Exchange(GlooCommunicator &comm, std::string what, const Group &group)
      : comm_(comm), what_(std::move(what)), group_(group) {}
  void send(const void *data, size_t nbytes, int64_t peer, uint64_t slot);
  void recv(void *data, size_t nbytes, int64_t peer, uint64_t slot);
  void wait();

private:
  struct Transfer {
    std::unique_ptr<UnboundBuffer> buffer;
    int64_t peer;
    bool isSend;
  };
  GlooCommunicator &comm_;
  std::string what_;
  const Group &group_;
  std::vector<Transfer> transfers_;
};

class GlooCommunicator final : public Communicator {
public:
  GlooCommunicator(std::shared_ptr<::gloo::rendezvous::Context> context,
                   int rank, std::chrono::milliseconds deadline,
                   std::shared_ptr<PeerHealth> health)
      : context_(std::move(context)), rank_(rank), deadline_(deadline),
        health_(std::move(health)) {
    if (health_)
      listener_ = health_->subscribe(
          [this](const std::set<int64_t> &lost, const std::string &) {
            interruptWaitsFor(lost);
          });
  }

  ~GlooCommunicator() override {
    if (health_)
      health_->unsubscribe(listener_);
    {
      std::lock_guard<std::mutex> lock(reaperMutex_);
      stopReaper_ = true;
      if (reaping_)
        reaping_->abortWaitSend();
    }
    reaperWake_.notify_all();
    if (reaper_.joinable())
      reaper_.join();
  }

  int rank() const override { return rank_; }

  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override {
    size_t me = groupIndexOf(group, rank_);
    if (!x.defined())
      throw RuntimeError("all_reduce input is undefined");
    requireShape(out, x.dtype(), x.shape(), "all_reduce output");
    checkReducible(x.dtype(), op);
    uint64_t slot = begin(group, "all_reduce");
    size_t n = group.size();
    int64_t count = x.numel();
    size_t esize = dtypeSize(x.dtype());
    auto chunk = [&](size_t j) {
      return count * static_cast<int64_t>(j) / static_cast<int64_t>(n);
    };
    int64_t b = chunk(me), l = chunk(me + 1) - b;
    // Step 1: every member sends me its piece of my chunk.
    Tensor pieces = Tensor::empty(x.dtype(), {static_cast<int64_t>(n), l});
    char *piecesData = static_cast<char *>(pieces.data());
    const char *xData = static_cast<const char *>(x.data());
    char *outData = static_cast<char *>(out.data());
    Exchange step1(*this, where("all_reduce", group), group);
    for (size_t j = 0; j < n; ++j) {
      if (j == me)
        continue;
      step1.send(xData + chunk(j) * esize, (chunk(j + 1) - chunk(j)) * esize,
                 group[j], slot);
      step1.recv(piecesData + j * l * esize, l * esize, group[j], slot);
    }
    step1.wait();
    std::vector<const void *> reduced(n); // in group order
    for (size_t j = 0; j < n; ++j)
      reduced[j] = j == me ? xData + b * esize : piecesData + j * l * esize;
    reducePieces(outData + b * esize, reduced, l, x.dtype(), op);
    // Step 2: all-gather of the reduced chunks.
    Exchange step2(*this, where("all_reduce", group), group);
    for (size_t j = 0; j < n; ++j) {
      if (j == me)
        continue;
      step2.send(outData + b * esize, l * esize, group[j], slot + 1);
      step2.recv(outData + chunk(j) * esize, (chunk(j + 1) - chunk(j)) * esize,
                 group[j], slot + 1);
    }
    step2.wait();
  }

  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkAllGather(x, out, group, me, dim, sizes);
    uint64_t slot = begin(group, "all_gather");
    size_t esize = dtypeSize(x.dtype());
    bool contiguous = outerCount(out.shape(), dim) == 1;
    int64_t unit = innerCount(out.shape(), dim);
    std::vector<int64_t> offsets = exclusivePrefixSums(sizes);
    std::vector<Tensor> received(group.size());
    Exchange step(*this, where("all_gather", group), group);
    for (size_t j = 0; j < group.size(); ++j) {
      if (j == me)
        continue;
      step.send(x.data(), x.nbytes(), group[j], slot);
      Shape pieceShape = withExtent(out.shape(), dim, sizes[j]);
      if (contiguous) {
        step.recv(static_cast<char *>(out.data()) + offsets[j] * unit * esize,
                  sizes[j] * unit * esize, group[j], slot);
      } else {
        received[j] = Tensor::empty(x.dtype(), pieceShape);
        step.recv(received[j].data(), received[j].nbytes(), group[j], slot);
      }
    }
    received[me] = x;
    if (contiguous) {
      if (x.nbytes())
        std::memcpy(static_cast<char *>(out.data()) +
                        offsets[me] * unit * esize,
                    x.data(), x.nbytes());
    }
    step.wait();
    if (contiguous)
      return;
    for (size_t j = 0; j < group.size(); ++j) {
      const Shape &extent = received[j].shape();
      copyBox(received[j].data(), extent, zeros(extent.size()), out.data(),
              out.shape(), offsetAlong(extent.size(), dim, offsets[j]), extent,
              esize);
    }
  }

  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkReduceScatter(x, out, group, me, op, dim, sizes);
    uint64_t slot = begin(group, "reduce_scatter");
    size_t n = group.size();
    std::vector<Tensor> mine = cut(x, dim, sizes); // piece j goes to member j
    Tensor received =
        Tensor::empty(x.dtype(), {static_cast<int64_t>(n), out.numel()});
    char *recvData = static_cast<char *>(received.data());
    Exchange step(*this, where("reduce_scatter", group), group);
    for (size_t j = 0; j < n; ++j) {
      if (j == me)
        continue;
      step.send(mine[j].data(), mine[j].nbytes(), group[j], slot);
      step.recv(recvData + j * out.nbytes(), out.nbytes(), group[j], slot);
    }
    step.wait();
    std::vector<const void *> pieces(n); // in group order
    for (size_t j = 0; j < n; ++j)
      pieces[j] = j == me ? mine[me].data() : recvData + j * out.nbytes();
    reducePieces(out.data(), pieces, out.numel(), out.dtype(), op);
  }

  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override {
    size_t me = groupIndexOf(group, rank_);
    checkAllToAll(x, out, group, splitDim, splitSizes, concatDim, concatSizes);
    uint64_t slot = begin(group, "all_to_all");
    std::vector<Tensor> pieces = cut(x, splitDim, splitSizes);
    std::vector<Tensor> received(group.size());
    Exchange step(*this, where("all_to_all", group), group);
    for (size_t j = 0; j < group.size(); ++j) {
      Shape slotShape = withExtent(out.shape(), concatDim, concatSizes[j]);
      if (j == me) {
        if (pieces[j].shape() != slotShape)
          throw RuntimeError("all_to_all: own piece " + pieces[j].describe() +
                             " does not fit the output slot " +
                             shapeToString(slotShape));
        received[j] = pieces[j];
        continue;
      }
      step.send(pieces[j].data(), pieces[j].nbytes(), group[j], slot);
      received[j] = Tensor::empty(x.dtype(), slotShape);
      step.recv(received[j].data(), received[j].nbytes(), group[j], slot);
    }
    step.wait();
    std::vector<int64_t> offsets = exclusivePrefixSums(concatSizes);
    for (size_t j = 0; j < group.size(); ++j) {
      const Shape &extent = received[j].shape();
      copyBox(received[j].data(), extent, zeros(extent.size()), out.data(),
              out.shape(), offsetAlong(extent.size(), concatDim, offsets[j]),
              extent, dtypeSize(out.dtype()));
    }
  }

  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override {
    size_t me = groupIndexOf(group, rank_);
    size_t rootIndex = groupIndexOf(group, root);
    if (!out.defined())
      throw RuntimeError("broadcast output is undefined");
    uint64_t slot = begin(group, "broadcast");
    Exchange step(*this, where("broadcast", group), group);
    if (me == rootIndex) {
      requireShape(x, out.dtype(), out.shape(), "broadcast input on the root");
      for (size_t j = 0; j < group.size(); ++j)
        if (j != me)
          step.send(x.data(), x.nbytes(), group[j], slot);
      if (out.nbytes() && out.data() != x.data())
        std::memcpy(out.data(), x.data(), out.nbytes());
    } else {
      step.recv(out.data(), out.nbytes(), root, slot);
    }
    step.wait();
  }

  void send(const Tensor &x, int64_t peer, int64_t tag) override {
    checkUsable();
    checkPeer(peer);
    Tensor copy = x.clone();
    auto buffer = context_->createUnboundBuffer(copy.data(), copy.nbytes());
    buffer->send(static_cast<int>(peer), p2pSlot(tag), 0, copy.nbytes());
    // The buffer must live until the peer took the data; a reaper thread
    // waits for that (Gloo has no non-destructive completion test).
    std::lock_guard<std::mutex> lock(reaperMutex_);
    if (!reaper_.joinable())
      reaper_ = std::thread([this] { reapLoop(); });
    pendingSends_.push_back(
        PendingSend{std::move(copy), std::move(buffer), peer});
    reaperWake_.notify_all();
  }

  void recv(Tensor &out, int64_t peer, int64_t tag) override {
    checkUsable();
    checkPeer(peer);
    if (!out.defined())
      throw RuntimeError("recv output is undefined");
    auto buffer = context_->createUnboundBuffer(out.data(), out.nbytes());
    buffer->recv(static_cast<int>(peer), p2pSlot(tag), 0, out.nbytes());
    std::string lost;
    bool received = false;
    try {
      received = waitTransfer(*buffer, false, Group{peer}, deadline_, lost);
    } catch (const std::exception &error) {
      markBroken(error.what());
      throw RuntimeError("recv on rank " + std::to_string(rank_) +
                         " from rank " + std::to_string(peer) + " (tag " +
                         std::to_string(tag) +
                         "): failed waiting for rank(s) " +
                         std::to_string(peer) + ": " + error.what());
    }
    if (!received) {
      markBroken("gave up: peer " + lost);
      throw RuntimeError("recv on rank " + std::to_string(rank_) +
                         " from rank " + std::to_string(peer) + " (tag " +
                         std::to_string(tag) + "): gave up: peer " + lost);
    }
  }

  std::chrono::milliseconds deadline() const { return deadline_; }

  // Waits for one transfer of a call that needs the ranks `needed`. False
  // when the wait was given up because the controller declared one of them
  // dead (then `lost` says which and why); Gloo's own errors throw.
  bool waitTransfer(UnboundBuffer &buffer, bool isSend, const Group &needed,
                    std::chrono::milliseconds timeout, std::string &lost) {
    {
      std::lock_guard<std::mutex> lock(waitingMutex_);
      if (health_) {
        lost = health_->deadAmong(needed);
        if (!lost.empty())
          return false;
      }
      waiting_[&buffer] = Waiting{isSend, &needed};
    }
    bool done = false;
    try {
      done = isSend ? buffer.waitSend(nullptr, timeout)
                    : buffer.waitRecv(nullptr, timeout);
    } catch (...) {
      std::lock_guard<std::mutex> lock(waitingMutex_);
      waiting_.erase(&buffer);
      throw;
    }
    std::lock_guard<std::mutex> lock(waitingMutex_);
    waiting_.erase(&buffer);
    if (!done) {
      lost = health_ ? health_->deadAmong(needed) : "";
      if (lost.empty())
        lost = "the wait was interrupted";
    }
    return done;
  }
  std::shared_ptr<::gloo::rendezvous::Context> &context() { return context_; }

  void markBroken(const std::string &why) {
    std::lock_guard<std::mutex> lock(reaperMutex_);
    if (broken_.empty())
      broken_ = why;
  }

private:
  struct PendingSend {
    Tensor data;
    std::unique_ptr<UnboundBuffer> buffer;
    int64_t peer;
  };

  void reapLoop() {
    std::unique_lock<std::mutex> lock(reaperMutex_);
    while (true) {
      reaperWake_.wait(lock,
                       [&] { return stopReaper_ || !pendingSends_.empty(); });
      if (stopReaper_)
        return;
      PendingSend pending = std::move(pendingSends_.front());
      pendingSends_.pop_front();
      reaping_ = pending.buffer.get();
      lock.unlock();
      std::string failure;
      try {
        pending.buffer->waitSend(nullptr, deadline_);
      } catch (const std::exception &error) {
        failure = "send to rank " + std::to_string(pending.peer) +
                  " was not received within " +
                  std::to_string(deadline_.count()) + " ms: " + error.what();
      }
      lock.lock();
      reaping_ = nullptr;
      if (!failure.empty() && broken_.empty())
        broken_ = failure;
    }
  }

  void checkUsable() {
    std::lock_guard<std::mutex> lock(reaperMutex_);
    if (!broken_.empty())
      throw RuntimeError("gloo communicator of rank " + std::to_string(rank_) +
                         " is unusable after an earlier failure: " + broken_);
  }

  void checkPeer(int64_t peer) const {
    if (peer < 0 || peer >= context_->size || peer == rank_)
      throw RuntimeError("invalid peer rank " + std::to_string(peer) +
                         " for rank " + std::to_string(rank_) +
                         " in a world of " + std::to_string(context_->size));
  }

  uint64_t p2pSlot(int64_t tag) const {
    return static_cast<uint64_t>(tag) & ((1ull << 62) - 1);
  }

  uint64_t begin(const Group &group, const char *op) {
    checkUsable();
    for (int64_t member : group)
      if (member < 0 || member >= context_->size)
        throw RuntimeError(std::string(op) + ": group " + groupToString(group) +
                           " names a rank outside the world of " +
                           std::to_string(context_->size));
    uint64_t sequence = sequence_[group]++;
    lastSequence_ = sequence;
    uint64_t mixed = hashGroup(group) ^ (sequence * 0xBF58476D1CE4E5B9ull);
    return (1ull << 63) |
           ((mixed << 2) & ((1ull << 63) - 1)); // low 2 bits: step
  }

  std::string where(const char *op, const Group &group) const {
    return std::string(op) + " on group " + groupToString(group) + " (call " +
           std::to_string(lastSequence_) + ") on rank " + std::to_string(rank_);
  }

  // x cut along `dim` into contiguous pieces of `sizes`.
  static std::vector<Tensor> cut(const Tensor &x, int64_t dim,
                                 const std::vector<int64_t> &sizes) {
    std::vector<Tensor> pieces;
    std::vector<int64_t> offsets = exclusivePrefixSums(sizes);
    for (size_t j = 0; j < sizes.size(); ++j) {
      Shape extent = withExtent(x.shape(), dim, sizes[j]);
      Tensor piece = Tensor::empty(x.dtype(), extent);
      copyBox(x.data(), x.shape(), offsetAlong(extent.size(), dim, offsets[j]),
              piece.data(), extent, zeros(extent.size()), extent,
              dtypeSize(x.dtype()));
      pieces.push_back(std::move(piece));
    }
    return pieces;
  }

  // Called by PeerHealth when ranks are declared dead: interrupts every
  // transfer wait of a call that needs one of them.
  void interruptWaitsFor(const std::set<int64_t> &lost) {
    std::lock_guard<std::mutex> lock(waitingMutex_);
    for (auto &[buffer, waiting] : waiting_) {
      bool needsLost = false;
      for (int64_t rank : *waiting.needed)
        needsLost |= lost.count(rank) != 0;
      if (!needsLost)
        continue;
      if (waiting.isSend)
        buffer->abortWaitSend();
      else
        buffer->abortWaitRecv();
    }
  }

  struct Waiting {
    bool isSend;
    const Group *needed;
  };

  std::shared_ptr<::gloo::rendezvous::Context> context_;
  int rank_;
  std::chrono::milliseconds deadline_;
  std::shared_ptr<PeerHealth> health_;
  int listener_ = 0;
  std::mutex waitingMutex_; // guards waiting_
  std::map<UnboundBuffer *, Waiting> waiting_;
  std::map<Group, uint64_t> sequence_;
  uint64_t lastSequence_ = 0;
  std::mutex reaperMutex_; // guards the members below
  std::condition_variable reaperWake_;
  std::deque<PendingSend> pendingSends_;
  UnboundBuffer *reaping_ = nullptr;
  bool stopReaper_ = false;
  std::thread reaper_;
  std::string broken_;
};

void Exchange::send(const void *data, size_t nbytes, int64_t peer,
                    uint64_t slot) {
  if (nbytes == 0)
    return;
  auto buffer =
      comm_.context()->createUnboundBuffer(const_cast<void *>(data), nbytes);
  buffer->send(static_cast<int>(peer), slot, 0, nbytes);
  transfers_.push_back(Transfer{std::move(buffer), peer, true});
}

void Exchange::recv(void *data, size_t nbytes, int64_t peer, uint64_t slot) {
  if (nbytes == 0)
    return;
  auto buffer = comm_.context()->createUnboundBuffer(data, nbytes);
  buffer->recv(static_cast<int>(peer), slot, 0, nbytes);
  transfers_.push_back(Transfer{std::move(buffer), peer, false});
}

void Exchange::wait() {
  auto deadline = Clock::now() + comm_.deadline();
  // Receives first: a missing peer shows up there.
  for (bool sends : {false, true}) {
    for (auto &transfer : transfers_) {
      if (transfer.isSend != sends)
        continue;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - Clock::now());
      if (left.count() < 1)
        left = std::chrono::milliseconds(1);
      std::string lost;
      bool done = false;
      try {
        done = comm_.waitTransfer(*transfer.buffer, sends, group_, left, lost);
      } catch (const std::exception &error) {
        comm_.markBroken(error.what());
        throw RuntimeError(what_ + ": failed after waiting for rank(s) " +
                           std::to_string(transfer.peer) + " (deadline " +
                           std::to_string(comm_.deadline().count()) +
                           " ms): " + error.what());
      }
      if (!done) {
        comm_.markBroken("gave up: peer " + lost);
        throw RuntimeError(what_ + ": gave up: peer " + lost);
      }
    }
  }
}

} // namespace

std::unique_ptr<Communicator> connectGloo(int rank, int worldSize,
                                          std::shared_ptr<KeyValueStore> store,
                                          const GlooOptions &options) {
  if (rank < 0 || rank >= worldSize)
    throw RuntimeError("gloo: rank " + std::to_string(rank) +
                       " outside a world of " + std::to_string(worldSize));
  try {
    auto device = deviceFor(options.hostname);
    auto context =
        std::make_shared<::gloo::rendezvous::Context>(rank, worldSize);
    context->setTimeout(options.deadline);
    StoreAdapter adapter(std::move(store), options.prefix, options.deadline);
    context->connectFullMesh(adapter, device);
    if (!options.pairSecret.empty())
      authenticateGlooPairs(*context, rank, options.pairSecret,
                            options.deadline);
    return std::make_unique<GlooCommunicator>(std::move(context), rank,
                                              options.deadline, options.health);
  } catch (const RuntimeError &) {
    throw;
  } catch (const std::exception &error) {
    throw RuntimeError("gloo: rank " + std::to_string(rank) +
                       " failed to connect: " + error.what());
  }
}

} // namespace dtorch::rt
