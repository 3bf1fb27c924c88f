#include "NcclCommunicator.h"

#include "dtorch/runtime/NcclBootstrap.h"

#include <nccl.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace dtorch::rt::cuda {

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t ncclTypeOf(DType dtype) {
  switch (dtype) {
  case ::dtorch::wire::F32:
    return ncclFloat32;
  case ::dtorch::wire::F64:
    return ncclFloat64;
  case ::dtorch::wire::F16:
    return ncclFloat16;
  case ::dtorch::wire::BF16:
    return ncclBfloat16;
  case ::dtorch::wire::I32:
    return ncclInt32;
  case ::dtorch::wire::I64:
    return ncclInt64;
  case ::dtorch::wire::BOOL:
    return ncclUint8;
  default:
    throw RuntimeError("NCCL: no NCCL type for dtype " +
                       std::string(dtypeName(dtype)));
  }
}

// bool: sum and max are a logical or (max of 0/1 bytes), min a logical and.
ncclRedOp_t ncclOpOf(ReduceOp op, DType dtype) {
  checkReducible(dtype, op);
  bool isBool = dtype == ::dtorch::wire::BOOL;
  switch (op) {
  case ReduceOp::Sum:
    return isBool ? ncclMax : ncclSum;
  case ReduceOp::Avg:
    return ncclAvg;
  case ReduceOp::Max:
    return ncclMax;
  case ReduceOp::Min:
    return ncclMin;
  }
  throw RuntimeError("NCCL: unknown reduction");
}

// A tensor seen as [outer, extent along dim, inner bytes].
struct Slabs {
  size_t outer = 1, extent = 1, innerBytes = 1;
  Slabs(const Tensor &t, int64_t dim) {
    if (dim < 0 || dim >= t.dim())
      throw RuntimeError("NCCL: dim " + std::to_string(dim) +
                         " is out of range for " + t.describe());
    for (int64_t d = 0; d < dim; ++d)
      outer *= static_cast<size_t>(t.shape()[d]);
    extent = static_cast<size_t>(t.shape()[dim]);
    innerBytes = dtypeSize(t.dtype());
    for (int64_t d = dim + 1; d < t.dim(); ++d)
      innerBytes *= static_cast<size_t>(t.shape()[d]);
  }
};

std::vector<size_t> prefixSums(const std::vector<int64_t> &sizes) {
  std::vector<size_t> offsets(sizes.size() + 1, 0);
  for (size_t j = 0; j < sizes.size(); ++j) {
    if (sizes[j] < 0)
      throw RuntimeError("NCCL: negative piece size");
    offsets[j + 1] = offsets[j] + static_cast<size_t>(sizes[j]);
  }
  return offsets;
}

// Device scratch memory, returned to the device's cache on destruction.
class DeviceScratch {
public:
  DeviceScratch(CudaDevice &device, size_t bytes)
      : device_(device), bytes_(bytes),
        data_(bytes ? device.allocate(bytes) : nullptr) {}
  ~DeviceScratch() {
    if (data_)
      device_.deallocate(data_, bytes_);
  }
  DeviceScratch(const DeviceScratch &) = delete;
  DeviceScratch &operator=(const DeviceScratch &) = delete;
  char *data() const { return static_cast<char *>(data_); }

private:
  CudaDevice &device_;
  size_t bytes_;
  void *data_;
};

class NcclCommunicator final : public Communicator {
public:
  NcclCommunicator(int rank, CudaDevice &device,
                   std::shared_ptr<KeyValueStore> store, NcclOptions options)
      : rank_(rank), device_(device), store_(std::move(store)),
        options_(std::move(options)), stream_(device.newStream()),
        sendStream_(device.newStream()), recvStream_(device.newStream()),
        callerMark_(device.newEvent()) {}

  ~NcclCommunicator() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto &[group, comm] : comms_)
      ncclCommDestroy(comm);
  }

  int rank() const override { return rank_; }

  void all_reduce(const Tensor &x, Tensor &out, const Group &group,
                  ReduceOp op) override {
    Call call(*this, "all_reduce", group, stream());
    checkSame(x, out, "all_reduce");
    call.check(ncclAllReduce(
        x.data(), out.data(), static_cast<size_t>(x.numel()),
        ncclTypeOf(x.dtype()), ncclOpOf(op, x.dtype()), call.comm, stream()));
    call.finish();
  }

  void broadcast(const Tensor &x, Tensor &out, const Group &group,
                 int64_t root) override {
    Call call(*this, "broadcast", group, stream());
    int rootIndex = static_cast<int>(groupIndexOf(group, root));
    const void *send = root == rank_ ? x.data() : out.data();
    if (root == rank_)
      checkSame(x, out, "broadcast");
    call.check(ncclBroadcast(send, out.data(), out.nbytes(), ncclUint8,
                             rootIndex, call.comm, stream()));
    call.finish();
  }

  void all_gather(const Tensor &x, Tensor &out, const Group &group, int64_t dim,
                  const std::vector<int64_t> &sizes) override {
    Call call(*this, "all_gather", group, stream());
    checkPieces(group, sizes, "all_gather");
    Slabs whole(out, dim);
    std::vector<size_t> offsets = prefixSums(sizes);
    size_t me = groupIndexOf(group, rank_);
    if (whole.outer == 1 && allEqual(sizes)) {
      call.check(ncclAllGather(x.data(), out.data(), x.nbytes(), ncclUint8,
                               call.comm, stream()));
      call.finish();
      return;
    }
    // Each member's piece lands contiguous in scratch, then goes to its
    // place along `dim`.
    DeviceScratch scratch(device_,
                          whole.outer * offsets.back() * whole.innerBytes);
    auto slot = [&](size_t j) {
      return scratch.data() + whole.outer * offsets[j] * whole.innerBytes;
    };
    auto slotBytes = [&](size_t j) {
      return whole.outer * static_cast<size_t>(sizes[j]) * whole.innerBytes;
    };
    check(cudaMemcpyAsync(slot(me), x.data(), x.nbytes(),
                          cudaMemcpyDeviceToDevice, stream()),
          "cudaMemcpyAsync");
    call.check(ncclGroupStart());
    for (size_t j = 0; j < group.size(); ++j) {
      if (j == me)
        continue;
      call.check(ncclSend(x.data(), x.nbytes(), ncclUint8, static_cast<int>(j),
                          call.comm, stream()));
      call.check(ncclRecv(slot(j), slotBytes(j), ncclUint8, static_cast<int>(j),
                          call.comm, stream()));
    }
    call.check(ncclGroupEnd());
    for (size_t j = 0; j < group.size(); ++j)
      copySlab(static_cast<char *>(out.data()), whole, offsets[j], slot(j),
               static_cast<size_t>(sizes[j]));
    call.finish();
  }

  void reduce_scatter(const Tensor &x, Tensor &out, const Group &group,
                      ReduceOp op, int64_t dim,
                      const std::vector<int64_t> &sizes) override {
    Call call(*this, "reduce_scatter", group, stream());
    checkPieces(group, sizes, "reduce_scatter");
    Slabs whole(x, dim);
    std::vector<size_t> offsets = prefixSums(sizes);
    size_t me = groupIndexOf(group, rank_);
    ncclDataType_t type = ncclTypeOf(x.dtype());
    ncclRedOp_t reduce = ncclOpOf(op, x.dtype());
    if (whole.outer == 1 && allEqual(sizes)) {
      call.check(ncclReduceScatter(x.data(), out.data(),
                                   static_cast<size_t>(out.numel()), type,
                                   reduce, call.comm, stream()));
      call.finish();
      return;
    }
    // Uneven pieces or a piece that is not contiguous: the whole reduction,
    // then this member's piece.
    DeviceScratch reduced(device_, x.nbytes());
    call.check(ncclAllReduce(x.data(), reduced.data(),
                             static_cast<size_t>(x.numel()), type, reduce,
                             call.comm, stream()));
    size_t rows = static_cast<size_t>(sizes[me]);
    size_t pieceBytes = rows * whole.innerBytes;
    if (whole.outer > 0 && pieceBytes > 0)
      check(cudaMemcpy2DAsync(out.data(), pieceBytes,
                              reduced.data() + offsets[me] * whole.innerBytes,
                              whole.extent * whole.innerBytes, pieceBytes,
                              whole.outer, cudaMemcpyDeviceToDevice, stream()),
            "cudaMemcpy2DAsync");
    call.finish();
  }

  void all_to_all(const Tensor &x, Tensor &out, const Group &group,
                  int64_t splitDim, const std::vector<int64_t> &splitSizes,
                  int64_t concatDim,
                  const std::vector<int64_t> &concatSizes) override {
    Call call(*this, "all_to_all", group, stream());
    checkPieces(group, splitSizes, "all_to_all");
    checkPieces(group, concatSizes, "all_to_all");
    Slabs from(x, splitDim), to(out, concatDim);
    std::vector<size_t> sendOffsets = prefixSums(splitSizes);
    std::vector<size_t> recvOffsets = prefixSums(concatSizes);
    size_t me = groupIndexOf(group, rank_);
    DeviceScratch sendScratch(device_, x.nbytes());
    DeviceScratch recvScratch(device_, out.nbytes());
    auto sendSlot = [&](size_t j) {
      return sendScratch.data() + from.outer * sendOffsets[j] * from.innerBytes;
    };
    auto recvSlot = [&](size_t j) {
      return recvScratch.data() + to.outer * recvOffsets[j] * to.innerBytes;
    };
    // Pack the pieces contiguous, exchange them, place them along concatDim.
    for (size_t j = 0; j < group.size(); ++j)
      extractSlab(sendSlot(j), static_cast<const char *>(x.data()), from,
                  sendOffsets[j], static_cast<size_t>(splitSizes[j]));
    size_t sendBytesMe = from.outer * splitSizes[me] * from.innerBytes;
    size_t recvBytesMe = to.outer * concatSizes[me] * to.innerBytes;
    if (sendBytesMe != recvBytesMe)
      throw RuntimeError("NCCL all_to_all: this member's own piece has " +
                         std::to_string(sendBytesMe) + " bytes to send and " +
                         std::to_string(recvBytesMe) + " to receive");
    check(cudaMemcpyAsync(recvSlot(me), sendSlot(me), sendBytesMe,
                          cudaMemcpyDeviceToDevice, stream()),
          "cudaMemcpyAsync");
    call.check(ncclGroupStart());
    for (size_t j = 0; j < group.size(); ++j) {
      if (j == me)
        continue;
      call.check(ncclSend(sendSlot(j),
                          from.outer * splitSizes[j] * from.innerBytes,
                          ncclUint8, static_cast<int>(j), call.comm, stream()));
      call.check(ncclRecv(recvSlot(j),
                          to.outer * concatSizes[j] * to.innerBytes, ncclUint8,
                          static_cast<int>(j), call.comm, stream()));
    }
    call.check(ncclGroupEnd());
    for (size_t j = 0; j < group.size(); ++j)
      copySlab(static_cast<char *>(out.data()), to, recvOffsets[j], recvSlot(j),
               static_cast<size_t>(concatSizes[j]));
    call.finish();
  }

  // Point to point goes over a communicator per direction (sender, then
  // receiver), each with its own stream, so a send waiting for its receiver
  // never holds up a receive (two ranks may send to each other first, then
  // receive). Messages of a direction match in issue order, as the contract
  // asks. The data is copied to scratch first, so send returns without
  // waiting for the receiver and the caller may reuse x at once; the
  // scratch is freed once the send stream has passed it.
  void send(const Tensor &x, int64_t peer, int64_t tag) override {
    (void)tag; // NCCL matches a direction's messages in issue order
    Group direction = directionOf(rank_, peer);
    Call call(*this, "send", direction, sendStream());
    releaseFinishedSends();
    auto copy = std::make_shared<DeviceScratch>(device_, x.nbytes());
    check(cudaMemcpyAsync(copy->data(), x.data(), x.nbytes(),
                          cudaMemcpyDeviceToDevice, sendStream()),
          "cudaMemcpyAsync");
    call.check(ncclSend(copy->data(), x.nbytes(), ncclUint8, 1, call.comm,
                        sendStream()));
    std::lock_guard<std::mutex> lock(mutex_);
    inFlightSends_.push_back(std::move(copy));
  }

  void recv(Tensor &out, int64_t peer, int64_t tag) override {
    (void)tag;
    Group direction = directionOf(peer, rank_);
    Call call(*this, "recv", direction, recvStream());
    call.check(ncclRecv(out.data(), out.nbytes(), ncclUint8, 0, call.comm,
                        recvStream()));
    call.finish();
  }

private:
  // One operation on a group: its communicator (made on first use), NCCL
  // results checked, and the wait for the stream with the deadline.
  struct Call {
    NcclCommunicator &self;
    const char *what;
    Group group;
    cudaStream_t stream;
    ncclComm_t comm;
    Clock::time_point deadline;
    Call(NcclCommunicator &owner, const char *op, const Group &members,
         cudaStream_t on)
        : self(owner), what(op), group(members), stream(on),
          deadline(Clock::now() + owner.options_.deadline) {
      self.device_.makeCurrent();
      self.orderAfterCaller(on);
      bool pointToPoint =
          std::string(op) == "send" || std::string(op) == "recv";
      comm = self.communicatorOf(group, pointToPoint);
    }
    void check(ncclResult_t result) {
      while (result == ncclInProgress) {
        if (Clock::now() > deadline)
          self.fail(*this, "did not start");
        std::this_thread::yield();
        ncclCommGetAsyncError(comm, &result);
      }
      if (result != ncclSuccess)
        self.fail(*this, std::string("failed: ") + ncclGetErrorString(result));
    }
    void finish() {
      while (true) {
        cudaError_t done = cudaStreamQuery(stream);
        if (done == cudaSuccess)
          break;
        if (done != cudaErrorNotReady)
          self.fail(*this, std::string("failed on the device: ") +
                               cudaGetErrorString(done));
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(comm, &async);
        if (async != ncclSuccess && async != ncclInProgress)
          self.fail(*this, std::string("failed: ") + ncclGetErrorString(async));
        if (Clock::now() > deadline)
          self.fail(*this, "did not finish");
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  };

  cudaStream_t stream() const {
    return static_cast<cudaStream_t>(stream_->nativeHandle());
  }

  // The work queued next on `on` starts after what the calling thread has
  // queued so far on its current stream (the executor's communication
  // stream, which waits for the kernels that wrote the inputs; the default
  // stream elsewhere): an event, not a wait of the host.
  void orderAfterCaller(cudaStream_t on) {
    Stream &caller = device_.currentStream();
    Stream *target = on == stream()       ? stream_.get()
                     : on == sendStream() ? sendStream_.get()
                                          : recvStream_.get();
    if (&caller == target)
      return;
    std::lock_guard<std::mutex> lock(mutex_);
    caller.record(*callerMark_);
    target->wait(*callerMark_);
  }

  cudaStream_t sendStream() const {
    return static_cast<cudaStream_t>(sendStream_->nativeHandle());
  }
  cudaStream_t recvStream() const {
    return static_cast<cudaStream_t>(recvStream_->nativeHandle());
  }
  // The two-member group of messages from `sender` to `receiver`, in that
  // order (a group of its own in the store: not the pair's collectives').
  Group directionOf(int64_t sender, int64_t receiver) const {
    if (sender == receiver)
      throw RuntimeError("NCCL: rank " + std::to_string(rank_) +
                         " cannot send to or receive from itself");
    return Group{sender, receiver};
  }
  void releaseFinishedSends() {
    if (cudaStreamQuery(sendStream()) != cudaSuccess)
      return;
    std::lock_guard<std::mutex> lock(mutex_);
    inFlightSends_.clear();
  }

  // Aborts the group's communicator and throws, naming the other members.
  [[noreturn]] void fail(Call &call, const std::string &how) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      bool pointToPoint =
          std::string(call.what) == "send" || std::string(call.what) == "recv";
      auto it = comms_.find(CommKey{pointToPoint, call.group});
      if (it != comms_.end()) {
        ncclCommAbort(it->second);
        comms_.erase(it);
      }
      inFlightSends_.clear();
    }
    std::string others;
    for (int64_t member : call.group)
      if (member != rank_)
        others += (others.empty() ? "" : ", ") + std::to_string(member);
    throw RuntimeError(
        "NCCL " + std::string(call.what) + " of rank " + std::to_string(rank_) +
        " on group " + groupToString(call.group) + " " + how + " within " +
        std::to_string(options_.deadline.count()) + " ms (waiting for ranks " +
        others + "); its communicator was aborted");
  }

  ncclComm_t communicatorOf(const Group &group, bool pointToPoint) {
    size_t me = groupIndexOf(group, rank_);
    CommKey key{pointToPoint, group};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (auto it = comms_.find(key); it != comms_.end())
        return it->second;
    }
    std::string id = exchangeNcclUniqueId(
        *store_, options_.prefix + (pointToPoint ? "/p2p" : "/collective"),
        rank_, group,
        [] {
          ncclUniqueId made;
          ncclResult_t result = ncclGetUniqueId(&made);
          if (result != ncclSuccess)
            throw RuntimeError(std::string("ncclGetUniqueId: ") +
                               ncclGetErrorString(result));
          return std::string(made.internal, sizeof(made.internal));
        },
        sizeof(ncclUniqueId::internal), options_.deadline);
    ncclUniqueId unique;
    std::copy(id.begin(), id.end(), unique.internal);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0; // connecting is polled, so it has a deadline
    ncclComm_t comm = nullptr;
    ncclResult_t result =
        ncclCommInitRankConfig(&comm, static_cast<int>(group.size()), unique,
                               static_cast<int>(me), &config);
    auto deadline = Clock::now() + options_.deadline;
    while (result == ncclInProgress && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclCommGetAsyncError(comm, &result);
    }
    if (result != ncclSuccess) {
      if (comm)
        ncclCommAbort(comm);
      std::string others;
      for (int64_t member : group)
        if (member != rank_)
          others += (others.empty() ? "" : ", ") + std::to_string(member);
      throw RuntimeError("NCCL communicator of group " + groupToString(group) +
                         " on rank " + std::to_string(rank_) + ": " +
                         (result == ncclInProgress
                              ? "not connected within " +
                                    std::to_string(options_.deadline.count()) +
                                    " ms (waiting for ranks " + others + ")"
                              : std::string(ncclGetErrorString(result))) +
                         "; aborted");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    comms_[key] = comm;
    return comm;
  }

  static bool allEqual(const std::vector<int64_t> &sizes) {
    return std::adjacent_find(sizes.begin(), sizes.end(),
                              std::not_equal_to<>()) == sizes.end();
  }
  static void checkPieces(const Group &group, const std::vector<int64_t> &sizes,
                          const char *what) {
    if (sizes.size() != group.size())
      throw RuntimeError(std::string("NCCL ") + what + ": " +
                         std::to_string(sizes.size()) + " piece sizes for " +
                         std::to_string(group.size()) + " members");
  }
  static void checkSame(const Tensor &x, const Tensor &out, const char *what) {
    if (x.dtype() != out.dtype() || x.nbytes() != out.nbytes())
      throw RuntimeError(std::string("NCCL ") + what + ": " + x.describe() +
                         " does not match its output " + out.describe());
  }

  // Copies `rows` rows of contiguous `piece` ([outer, rows, inner]) into
  // `whole` at offset `offset` along the dim, and the reverse.
  void copySlab(char *whole, const Slabs &layout, size_t offset,
                const char *piece, size_t rows) {
    size_t width = rows * layout.innerBytes;
    if (width == 0 || layout.outer == 0)
      return;
    check(cudaMemcpy2DAsync(whole + offset * layout.innerBytes,
                            layout.extent * layout.innerBytes, piece, width,
                            width, layout.outer, cudaMemcpyDeviceToDevice,
                            stream()),
          "cudaMemcpy2DAsync");
  }
  void extractSlab(char *piece, const char *whole, const Slabs &layout,
                   size_t offset, size_t rows) {
    size_t width = rows * layout.innerBytes;
    if (width == 0 || layout.outer == 0)
      return;
    check(cudaMemcpy2DAsync(piece, width, whole + offset * layout.innerBytes,
                            layout.extent * layout.innerBytes, width,
                            layout.outer, cudaMemcpyDeviceToDevice, stream()),
          "cudaMemcpy2DAsync");
  }

  int rank_;
  CudaDevice &device_;
  std::shared_ptr<KeyValueStore> store_;
  NcclOptions options_;
  std::unique_ptr<Stream> stream_, sendStream_, recvStream_;
  // Marks the calling thread's stream for orderAfterCaller.
  std::unique_ptr<Event> callerMark_;
  std::mutex mutex_;
  // By kind and group: a point-to-point direction is (true, {sender,
  // receiver}), a collective's group (false, its members in group order).
  using CommKey = std::pair<bool, Group>;
  std::map<CommKey, ncclComm_t> comms_;
  std::vector<std::shared_ptr<DeviceScratch>> inFlightSends_;
};

} // namespace

std::unique_ptr<Communicator>
makeNcclCommunicator(int rank, CudaDevice &device,
                     std::shared_ptr<KeyValueStore> store,
                     const NcclOptions &options) {
  return std::make_unique<NcclCommunicator>(rank, device, std::move(store),
                                            options);
}

std::string ncclVersionString() {
  int version = 0;
  ncclResult_t result = ncclGetVersion(&version);
  if (result != ncclSuccess)
    return std::string("unavailable: ") + ncclGetErrorString(result);
  return std::to_string(version / 10000) + "." +
         std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

} // namespace dtorch::rt::cuda
