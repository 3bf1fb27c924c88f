// Collectives of ranks sharing one device in one process (device-to-device
// copies), the choice of a group's path, and the router that applies it
// (SharedDeviceCollectives.h).
#include "dtorch/runtime/SharedDeviceCollectives.h"

#include "dtorch/runtime/Attrs.h"
#include "dtorch/runtime/DevicePlacement.h"
#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/Kernels.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <tuple>

namespace dtorch::rt {

namespace {

using Clock = std::chrono::steady_clock;

// One collective call of a group: each member's input, by member index.
struct Meeting {
  Meeting(std::pair<Group, uint64_t> key, size_t members)
      : key(std::move(key)), inputs(members), present(members, false) {}
  std::pair<Group, uint64_t> key;
  std::vector<Tensor> inputs;
  std::vector<bool> present;
  size_t arrived = 0, finished = 0;
};

std::string missingMembers(const Group &group, const std::vector<bool> &here) {
  std::string names;
  for (size_t i = 0; i < group.size(); ++i)
    if (!here[i])
      names += (names.empty() ? "" : ", ") + std::to_string(group[i]);
  return names;
}

// Where the members of one device's groups meet (one per device, for the
// life of the process).
class SharedDeviceHub {
public:
  // Member `me` of `group` hands over `x` for its next call on the group;
  // returns once every member has (their inputs in the meeting).
  std::shared_ptr<Meeting> meet(const Group &group, size_t me, const Tensor &x,
                                Clock::time_point deadline, const char *what) {
    std::unique_lock<std::mutex> lock(mutex_);
    uint64_t call = calls_[{group, group[me]}]++;
    std::pair<Group, uint64_t> key{group, call};
    std::shared_ptr<Meeting> &slot = meetings_[key];
    if (!slot)
      slot = std::make_shared<Meeting>(key, group.size());
    std::shared_ptr<Meeting> meeting = slot;
    meeting->inputs[me] = x;
    meeting->present[me] = true;
    ++meeting->arrived;
    changed_.notify_all();
    if (!changed_.wait_until(lock, deadline,
                             [&] { return meeting->arrived == group.size(); }))
      throw RuntimeError(std::string("device-copy ") + what + " of rank " +
                         std::to_string(group[me]) + " on group " +
                         groupToString(group) + ": ranks " +
                         missingMembers(group, meeting->present) +
                         " did not arrive in time");
    return meeting;
  }

  // Returns once every member has finished reading the others' inputs (so
  // none overwrites its input while another still reads it).
  void leave(const std::shared_ptr<Meeting> &meeting,
             Clock::time_point deadline, const char *what) {
    std::unique_lock<std::mutex> lock(mutex_);
    size_t members = meeting->inputs.size();
    if (++meeting->finished == members)
      meetings_.erase(meeting->key);
    changed_.notify_all();
    if (!changed_.wait_until(lock, deadline,
                             [&] { return meeting->finished == members; }))
      throw RuntimeError(std::string("device-copy ") + what + " on group " +
                         groupToString(meeting->key.first) +
                         ": a member did not finish in time");
  }

  void post(int64_t from, int64_t to, int64_t tag, Tensor message) {
    std::lock_guard<std::mutex> lock(mutex_);
    mail_[{from, to, tag}].push_back(std::move(message));
    changed_.notify_all();
  }

  Tensor take(int64_t from, int64_t to, int64_t tag,
              Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto &queue = mail_[{from, to, tag}];
    if (!changed_.wait_until(lock, deadline, [&] { return !queue.empty(); }))
      throw RuntimeError("device-copy recv of rank " + std::to_string(to) +
                         ": rank " + std::to_string(from) +
                         " sent nothing in time (tag " + std::to_string(tag) +
                         ")");
    Tensor message = std::move(queue.front());
    queue.pop_front();
    return message;
  }

private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::pair<Group, uint64_t>, std::shared_ptr<Meeting>> meetings_;
  std::map<std::pair<Group, int64_t>, uint64_t> calls_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::deque<Tensor>> mail_;
};

SharedDeviceHub &hubOf(Device &device) {
  static std::mutex mutex;
  static auto *hubs = new std::map<Device *, std::unique_ptr<SharedDeviceHub>>;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<SharedDeviceHub> &hub = (*hubs)[&device];
  if (!hub)
    hub = std::make_unique<SharedDeviceHub>();
  return *hub;
}

const AttrReader &noAttrs() {
  static const AttrReader::AttrMap empty;
  static const AttrReader reader(empty);
  return reader;
}

class SharedDeviceCommunicator final : public Communicator {
public:
  SharedDeviceCommunicator(int rank, Device &device,
                           std::chrono::milliseconds deadline)
      : rank_(rank), device_(device), deadline_(deadline), hub_(hubOf(device)) {
  }

  int rank() const override { return rank_; }

  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override {
    checkReducible(x.dtype(), op);
    Call call(*this, group, x, out, "all_reduce");
    reduceMembers(call.meeting->inputs, call.target(), op, group.size());
    call.done();
  }

  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override {
    Call call(*this, group, x, out, "all_gather");
    int64_t offset = 0;
    for (size_t j = 0; j < group.size(); ++j) {
      copyAlong(call.meeting->inputs[j], 0, call.target(), offset, dim,
                sizes.at(j));
      offset += sizes.at(j);
    }
    call.done();
  }

  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override {
    checkReducible(x.dtype(), op);
    Call call(*this, group, x, out, "reduce_scatter");
    size_t me = call.me;
    int64_t offset = std::accumulate(sizes.begin(), sizes.begin() + me,
                                     static_cast<int64_t>(0));
    std::vector<Tensor> pieces;
    for (const Tensor &input : call.meeting->inputs) {
      Tensor piece = Tensor::empty(out.dtype(), out.shape(), device_);
      copyAlong(input, offset, piece, 0, dim, sizes.at(me));
      pieces.push_back(std::move(piece));
    }
    reduceMembers(pieces, call.target(), op, group.size());
    call.done();
  }

  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override {
    Call call(*this, group, x, out, "all_to_all");
    size_t me = call.me;
    int64_t from = std::accumulate(splitSizes.begin(), splitSizes.begin() + me,
                                   static_cast<int64_t>(0));
    int64_t to = 0;
    for (size_t j = 0; j < group.size(); ++j) {
      // Member j's piece for this member, then its place in `out`.
      const Tensor &input = call.meeting->inputs[j];
      std::vector<int64_t> shape = input.shape();
      shape.at(static_cast<size_t>(splitDim)) = splitSizes.at(me);
      Tensor piece = Tensor::empty(input.dtype(), shape, device_);
      copyAlong(input, from, piece, 0, splitDim, splitSizes.at(me));
      copyAlong(piece, 0, call.target(), to, concatDim, concatSizes.at(j));
      to += concatSizes.at(j);
    }
    call.done();
  }

  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override {
    size_t rootIndex = groupIndexOf(group, root);
    Call call(*this, group, x, out, "broadcast");
    const Tensor &source = call.meeting->inputs[rootIndex];
    if (!source.defined() || source.nbytes() != out.nbytes())
      throw RuntimeError("device-copy broadcast on group " +
                         groupToString(group) + ": the root's tensor has " +
                         std::to_string(source.nbytes()) + " bytes, " +
                         std::to_string(out.nbytes()) + " expected");
    if (call.target().data() != source.data())
      device_.copyDeviceToDevice(call.target().data(), source.data(),
                                 out.nbytes(), &stream());
    call.done();
  }

  void send(const Tensor &x, int64_t peer, int64_t tag) override {
    // A copy of its own: the sender may reuse x at once.
    Tensor message = Tensor::empty(x.dtype(), x.shape(), device_);
    device_.copyDeviceToDevice(message.data(), x.data(), x.nbytes(), &stream());
    stream().synchronize();
    hub_.post(rank_, peer, tag, std::move(message));
  }

  void recv(Tensor &out, int64_t peer, int64_t tag) override {
    Tensor message = hub_.take(peer, rank_, tag, Clock::now() + deadline_);
    if (message.nbytes() != out.nbytes())
      throw RuntimeError("device-copy recv of rank " + std::to_string(rank_) +
                         " from rank " + std::to_string(peer) + ": " +
                         std::to_string(message.nbytes()) + " bytes sent, " +
                         std::to_string(out.nbytes()) + " expected");
    device_.copyDeviceToDevice(out.data(), message.data(), out.nbytes(),
                               &stream());
    stream().synchronize();
  }

private:
  // One collective: the caller's input is written (its stream so far has
  // finished) before it is handed over; done() waits for this member's
  // copies and kernels, then for the other members'.
  // An `out` that shares memory with the caller's own input (an in-place
  // collective) is written only after every member has read that input:
  // the result goes to a scratch tensor (target()), copied over in done().
  struct Call {
    Call(SharedDeviceCommunicator &self, const Group &group, const Tensor &x,
         Tensor &out, const char *what)
        : self(self), what(what), me(groupIndexOf(group, self.rank_)),
          deadline(Clock::now() + self.deadline_), out(out) {
      if (x.defined() && overlaps(x, out))
        scratch = Tensor::empty(out.dtype(), out.shape(), self.device_);
      self.stream().synchronize();
      meeting = self.hub_.meet(group, me, x, deadline, what);
    }
    Tensor &target() { return scratch.defined() ? scratch : out; }
    void done() {
      self.stream().synchronize();
      self.hub_.leave(meeting, deadline, what);
      if (scratch.defined()) {
        self.device_.copyDeviceToDevice(out.data(), scratch.data(),
                                        out.nbytes(), &self.stream());
        self.stream().synchronize();
      }
    }
    static bool overlaps(const Tensor &a, const Tensor &b) {
      auto *a0 = static_cast<const char *>(a.data());
      auto *b0 = static_cast<const char *>(b.data());
      return a.nbytes() != 0 && b.nbytes() != 0 && a0 < b0 + b.nbytes() &&
             b0 < a0 + a.nbytes();
    }
    SharedDeviceCommunicator &self;
    const char *what;
    size_t me;
    Clock::time_point deadline;
    Tensor &out;
    Tensor scratch;
    std::shared_ptr<Meeting> meeting;
  };

  Stream &stream() { return device_.currentStream(); }

  // Copies `extent` slices along `dim` from `src` (from slice `srcOffset`)
  // to `dst` (from slice `dstOffset`); the two have the same dims but
  // `dim`'s extent.
  void copyAlong(const Tensor &src, int64_t srcOffset, Tensor &dst,
                 int64_t dstOffset, int64_t dim, int64_t extent) {
    if (extent == 0 || src.numel() == 0)
      return;
    const std::vector<int64_t> &shape = src.shape();
    if (dim < 0 || dim >= static_cast<int64_t>(shape.size()) ||
        shape.size() != dst.shape().size())
      throw RuntimeError("device-copy: dim " + std::to_string(dim) +
                         " does not fit a tensor of rank " +
                         std::to_string(shape.size()));
    int64_t outer = 1, inner = static_cast<int64_t>(dtypeSize(src.dtype()));
    for (int64_t d = 0; d < dim; ++d)
      outer *= shape[d];
    for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d)
      inner *= shape[d];
    int64_t srcRows = shape[dim], dstRows = dst.shape()[dim];
    if (srcOffset + extent > srcRows || dstOffset + extent > dstRows)
      throw RuntimeError("device-copy: a piece exceeds its tensor along dim " +
                         std::to_string(dim));
    const char *from = static_cast<const char *>(src.data());
    char *to = static_cast<char *>(dst.data());
    for (int64_t i = 0; i < outer; ++i)
      device_.copyDeviceToDevice(to + (i * dstRows + dstOffset) * inner,
                                 from + (i * srcRows + srcOffset) * inner,
                                 static_cast<size_t>(extent * inner),
                                 &stream());
  }

  void runKernel(const char *op, const Tensor &a, const Tensor &b,
                 Tensor &out) {
    const Kernel *kernel = lookupKernel(op, a.dtype(), device_.name());
    if (!kernel)
      throw RuntimeError(std::string("device-copy reduction: no ") +
                         device_.name() + " kernel '" + op + "' for " +
                         dtypeName(a.dtype()));
    kernel->run(noAttrs(), {&a, &b}, {&out});
  }

  // out = pieces[0] op pieces[1] op ... (group order); avg divides by
  // `members` once at the end.
  void reduceMembers(const std::vector<Tensor> &pieces, Tensor &out,
                     ReduceOp op, size_t members) {
    const bool isBool = out.dtype() == ::dtorch::wire::BOOL;
    const char *kernel = op == ReduceOp::Max   ? "maximum"
                         : op == ReduceOp::Min ? "minimum"
                         : isBool              ? "maximum" // logical or
                                               : "add";
    if (pieces.size() == 1 || out.numel() == 0) {
      if (out.data() != pieces[0].data())
        device_.copyDeviceToDevice(out.data(), pieces[0].data(), out.nbytes(),
                                   &stream());
    } else {
      // Alternates between `out` and a scratch tensor, ending in `out`.
      Tensor scratch = Tensor::empty(out.dtype(), out.shape(), device_);
      bool inOut = (pieces.size() - 1) % 2 == 1;
      Tensor *acc = inOut ? &out : &scratch, *next = inOut ? &scratch : &out;
      runKernel(kernel, pieces[0], pieces[1], *acc);
      for (size_t j = 2; j < pieces.size(); ++j) {
        runKernel(kernel, *acc, pieces[j], *next);
        std::swap(acc, next);
      }
    }
    if (op == ReduceOp::Avg) {
      Tensor count = Tensor::empty(out.dtype(), out.shape());
      fillWith(count, static_cast<double>(members));
      Tensor onDevice = copyToDeviceStaged(count, device_);
      Tensor sum = Tensor::empty(out.dtype(), out.shape(), device_);
      device_.copyDeviceToDevice(sum.data(), out.data(), out.nbytes(),
                                 &stream());
      runKernel("div", sum, onDevice, out);
    }
  }

  static void fillWith(Tensor &t, double v) {
    switch (t.dtype()) {
    case ::dtorch::wire::F32:
      std::fill_n(t.data_as<float>(), t.numel(), static_cast<float>(v));
      break;
    case ::dtorch::wire::F64:
      std::fill_n(t.data_as<double>(), t.numel(), v);
      break;
    case ::dtorch::wire::F16:
      std::fill_n(t.data_as<Half>(), t.numel(), Half(static_cast<float>(v)));
      break;
    case ::dtorch::wire::BF16:
      std::fill_n(t.data_as<BFloat16>(), t.numel(),
                  BFloat16(static_cast<float>(v)));
      break;
    default:
      throw RuntimeError(std::string("device-copy avg of ") +
                         dtypeName(t.dtype()));
    }
  }

  int rank_;
  Device &device_;
  std::chrono::milliseconds deadline_;
  SharedDeviceHub &hub_;
};

} // namespace

std::unique_ptr<Communicator>
makeSharedDeviceCommunicator(int rank, Device &device,
                             std::chrono::milliseconds deadline) {
  return std::make_unique<SharedDeviceCommunicator>(rank, device, deadline);
}

const char *collectivePathName(CollectivePath path) {
  switch (path) {
  case CollectivePath::DeviceCommunicator:
    return "device communicator";
  case CollectivePath::SharedDevice:
    return "device copies";
  case CollectivePath::Host:
    return "host";
  case CollectivePath::CrossProcessDevice:
    return "device ipc";
  }
  return "?";
}

CollectivePath collectivePathOf(
    const Group &group,
    const std::function<MemberPlacement(int64_t rank)> &placement) {
  if (group.empty())
    throw RuntimeError("collectivePathOf: empty group");
  std::vector<MemberPlacement> members;
  for (int64_t rank : group)
    members.push_back(placement(rank));
  bool oneDevice = true;
  for (const MemberPlacement &m : members)
    oneDevice &= m.host == members[0].host && m.process == members[0].process &&
                 m.ordinal == members[0].ordinal;
  if (oneDevice)
    return CollectivePath::SharedDevice;
  bool oneHostDevice = true;
  for (const MemberPlacement &m : members)
    oneHostDevice &=
        m.host == members[0].host && m.ordinal == members[0].ordinal;
  if (oneHostDevice)
    return CollectivePath::CrossProcessDevice;
  std::set<std::pair<std::string, int32_t>> devices;
  for (const MemberPlacement &m : members)
    devices.insert({m.host, m.ordinal});
  return devices.size() == members.size() ? CollectivePath::DeviceCommunicator
                                          : CollectivePath::Host;
}

DeviceCollectiveRouter::DeviceCollectiveRouter(
    int rank, std::function<CollectivePath(const Group &)> pathOf,
    std::unique_ptr<Communicator> deviceComm,
    std::unique_ptr<Communicator> shared, Communicator *host,
    std::unique_ptr<Communicator> ipc)
    : rank_(rank), pathOf_(std::move(pathOf)),
      deviceComm_(std::move(deviceComm)), shared_(std::move(shared)),
      ipc_(std::move(ipc)), host_(host) {}

Communicator *DeviceCollectiveRouter::onDevice(const Group &group) {
  switch (pathOf_(group)) {
  case CollectivePath::DeviceCommunicator:
    return deviceComm_.get();
  case CollectivePath::SharedDevice:
    return shared_.get();
  case CollectivePath::Host:
    return nullptr;
  case CollectivePath::CrossProcessDevice:
    return ipc_.get();
  }
  return nullptr;
}

void DeviceCollectiveRouter::throughHost(
    const Tensor &x, Tensor &out,
    const std::function<void(const Tensor &, Tensor &)> &call) {
  if (!host_)
    throw RuntimeError("rank " + std::to_string(rank_) +
                       ": a collective needs the host path, which has no "
                       "communicator");
  // The device's work on the calling thread's stream (x) first.
  out.device().currentStream().synchronize();
  Tensor hostX = x.defined() ? copyToHostStaged(x) : Tensor();
  Tensor hostOut = Tensor::empty(out.dtype(), out.shape());
  call(hostX, hostOut);
  copyIntoDeviceStaged(hostOut, out);
}

void DeviceCollectiveRouter::all_reduce(const Tensor &x, Tensor &out,
                                        const Group &group, ReduceOp op) {
  if (Communicator *c = onDevice(group))
    return c->all_reduce(x, out, group, op);
  throughHost(x, out, [&](const Tensor &hx, Tensor &ho) {
    host_->all_reduce(hx, ho, group, op);
  });
}

void DeviceCollectiveRouter::all_gather(const Tensor &x, Tensor &out,
                                        const Group &group, int64_t dim,
                                        const std::vector<int64_t> &sizes) {
  if (Communicator *c = onDevice(group))
    return c->all_gather(x, out, group, dim, sizes);
  throughHost(x, out, [&](const Tensor &hx, Tensor &ho) {
    host_->all_gather(hx, ho, group, dim, sizes);
  });
}

void DeviceCollectiveRouter::reduce_scatter(const Tensor &x, Tensor &out,
                                            const Group &group, ReduceOp op,
                                            int64_t dim,
                                            const std::vector<int64_t> &sizes) {
  if (Communicator *c = onDevice(group))
    return c->reduce_scatter(x, out, group, op, dim, sizes);
  throughHost(x, out, [&](const Tensor &hx, Tensor &ho) {
    host_->reduce_scatter(hx, ho, group, op, dim, sizes);
  });
}

void DeviceCollectiveRouter::all_to_all(
    const Tensor &x, Tensor &out, const Group &group, int64_t splitDim,
    const std::vector<int64_t> &splitSizes, int64_t concatDim,
    const std::vector<int64_t> &concatSizes) {
  if (Communicator *c = onDevice(group))
    return c->all_to_all(x, out, group, splitDim, splitSizes, concatDim,
                         concatSizes);
  throughHost(x, out, [&](const Tensor &hx, Tensor &ho) {
    host_->all_to_all(hx, ho, group, splitDim, splitSizes, concatDim,
                      concatSizes);
  });
}

void DeviceCollectiveRouter::broadcast(const Tensor &x, Tensor &out,
                                       const Group &group, int64_t root) {
  if (Communicator *c = onDevice(group))
    return c->broadcast(x, out, group, root);
  throughHost(x, out, [&](const Tensor &hx, Tensor &ho) {
    host_->broadcast(hx, ho, group, root);
  });
}

void DeviceCollectiveRouter::send(const Tensor &x, int64_t peer, int64_t tag) {
  if (Communicator *c = onDevice(Group{rank_, peer}))
    return c->send(x, peer, tag);
  if (!host_)
    throw RuntimeError("rank " + std::to_string(rank_) +
                       ": a send needs the host path, which has no "
                       "communicator");
  x.device().currentStream().synchronize();
  host_->send(copyToHostStaged(x), peer, tag);
}

void DeviceCollectiveRouter::recv(Tensor &out, int64_t peer, int64_t tag) {
  if (Communicator *c = onDevice(Group{peer, rank_}))
    return c->recv(out, peer, tag);
  if (!host_)
    throw RuntimeError("rank " + std::to_string(rank_) +
                       ": a recv needs the host path, which has no "
                       "communicator");
  Tensor hostOut = Tensor::empty(out.dtype(), out.shape());
  host_->recv(hostOut, peer, tag);
  copyIntoDeviceStaged(hostOut, out);
}

} // namespace dtorch::rt
