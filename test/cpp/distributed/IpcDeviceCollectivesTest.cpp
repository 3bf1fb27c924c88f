// The communicator of ranks in different processes that share one device
// (IpcDeviceCollectives.h), on the fake device of DeviceIpc.h (host memory
// in memfd blocks standing for device memory): ranks as threads of this
// process and as forked processes, every collective and dtype bit for bit
// against the reference, streams of many rounds (both all_reduce ways),
// point to point larger than the sender's buffer with tags out of order, a
// missing member named at the deadline, a dead process and a peer declared
// dead reported at once, members that disagree, a new prefix after a world
// restart, device work that never finishes, a device whose streams run
// their work late (the ordering by events), and the router's choice of the
// path.
//
// Its own binary: fork() is only safe while the process has one thread.
#include "CollectiveReference.h"
#include "HostSharedMemoryTestSupport.h"
#include "TestSupport.h"

#include "dtorch/runtime/DeviceIpc.h"
#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/InMemoryKeyValueStore.h"
#include "dtorch/runtime/IpcDeviceCollectives.h"
#include "dtorch/runtime/SharedDeviceCollectives.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <random>
#include <thread>

namespace dtorch::rt::test {
namespace {

// Small rounds: the reference workload's tensors take many of them, and
// all_reduce above 1 KiB goes through the owners of each chunk.
IpcDeviceOptions smallRounds(std::chrono::milliseconds deadline = 20s) {
  IpcDeviceOptions options;
  options.deadline = deadline;
  options.chunkBytes = 4096;
  options.directReduceBytes = 1024;
  options.p2pChunkBytes = 4096;
  return options;
}

std::vector<std::unique_ptr<IpcDeviceCommunicator>>
threadComms(int world, std::shared_ptr<KeyValueStore> store,
            const IpcDeviceOptions &options, int first = 0) {
  std::vector<std::unique_ptr<IpcDeviceCommunicator>> comms;
  for (int r = 0; r < world; ++r)
    comms.push_back(
        makeIpcDeviceCommunicator(first + r, hostDeviceIpc(), store, options));
  return comms;
}

TEST(IpcDeviceCollectives, EveryCollectiveAndDtypeOnFourThreads) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  auto comms = threadComms(4, store, smallRounds());
  for (DType dtype : everyDtype())
    runRanks(4,
             [&](int rank) { runEveryCollective(*comms[rank], rank, dtype); });
  IpcDeviceStats stats = comms[0]->stats();
  EXPECT_GT(stats.collectives, 100u);
  EXPECT_GT(stats.rounds, stats.collectives);
  // Threads of one process use each other's arenas as they are.
  EXPECT_EQ(stats.peersOpened, 0u);
  EXPECT_EQ(stats.peersInProcess, 3u);
  EXPECT_GT(comms[1]->stats().messages, 0u);
}

// Two processes of two ranks each (as dtorch-worker hosts several ranks):
// a member in the same process is used as it is, the others are opened.
TEST(IpcDeviceCollectives, EveryCollectiveOnTwoProcessesOfTwoRanks) {
  StoreDirectory dir;
  auto codes = runProcesses(2, [&](int process) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comms = threadComms(2, store, smallRounds(), 2 * process);
    for (DType dtype : everyDtype())
      runRanks(2, [&](int r) {
        runEveryCollective(*comms[r], 2 * process + r, dtype);
      });
    IpcDeviceStats stats = comms[0]->stats();
    EXPECT_EQ(stats.peersInProcess, 1u);
    EXPECT_EQ(stats.peersOpened, 2u);
  });
  expectAllSucceeded(codes);
}

TEST(IpcDeviceCollectives, EveryCollectiveOnFourProcesses) {
  StoreDirectory dir;
  auto codes = runProcesses(4, [&](int process) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeIpcDeviceCommunicator(process, hostDeviceIpc(), store,
                                          smallRounds());
    for (DType dtype : everyDtype()) {
      FakeCollectiveHub fake(4, 10s);
      std::vector<std::vector<Tensor>> expected(4);
      runRanks(4, [&](int rank) {
        expected[rank] =
            runEveryCollective(*fake.communicator(rank), rank, dtype);
      });
      std::vector<Tensor> actual = runEveryCollective(*comm, process, dtype);
      EXPECT_EQ(comm->stats().peersOpened, 3u);
      ASSERT_EQ(actual.size(), expected[process].size());
      for (size_t i = 0; i < actual.size(); ++i)
        expectSameBits(actual[i], expected[process][i],
                       std::string("vs fake, ") + dtypeName(dtype) +
                           " result " + std::to_string(i));
    }
  });
  expectAllSucceeded(codes);
}

// Tensors of many rounds: all_reduce through owners and directly, in place
// too; reduce_scatter and all_gather along an inner dim; broadcast; point
// to point of messages larger than the sender's four chunks, tags out of
// order.
TEST(IpcDeviceCollectives, LongStreamsAndPointToPoint) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  auto comms = threadComms(3, store, smallRounds());
  const Group group = {2, 0, 1};
  runRanks(3, [&](int rank) {
    Communicator &c = *comms[rank];
    for (int64_t n : {int64_t(100003), int64_t(200)})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
        unsigned salt = 7 + static_cast<unsigned>(op);
        Tensor x = sampleTensor(::dtorch::wire::F32, {n}, 10 * rank + salt);
        Tensor copy = Tensor::empty(::dtorch::wire::F32, {n});
        std::memcpy(copy.data(), x.data(), x.nbytes());
        std::vector<Tensor> inputs;
        for (int64_t m : group)
          inputs.push_back(sampleTensor(::dtorch::wire::F32, {n},
                                        static_cast<unsigned>(10 * m) + salt));
        Tensor expected = referenceReduce(inputs, op);
        Tensor out = Tensor::empty(::dtorch::wire::F32, {n});
        c.all_reduce(x, out, group, op);
        expectSameBits(out, expected, "all_reduce of " + std::to_string(n));
        c.all_reduce(copy, copy, group, op); // in place
        expectSameBits(copy, expected, "in-place all_reduce");
      }
    // bf16 reduce_scatter along dim 1 of [37, 3 * 700].
    const std::vector<int64_t> sizes = {700, 700, 700};
    Tensor x = sampleTensor(::dtorch::wire::BF16, {37, 2100}, 50 + rank);
    Tensor out = Tensor::empty(::dtorch::wire::BF16, {37, 700});
    c.reduce_scatter(x, out, group, ReduceOp::Sum, 1, sizes);
    std::vector<Tensor> inputs;
    for (int64_t m : group)
      inputs.push_back(sampleTensor(::dtorch::wire::BF16, {37, 2100},
                                    50 + static_cast<unsigned>(m)));
    size_t me = groupIndexOf(group, rank);
    expectSameBits(out,
                   sliceAlong(referenceReduce(inputs, ReduceOp::Sum), 1,
                              700 * static_cast<int64_t>(me), 700),
                   "reduce_scatter along dim 1");
    // all_gather along dim 1, uneven.
    const std::vector<int64_t> widths = {300, 1, 999};
    Tensor piece =
        sampleTensor(::dtorch::wire::F64, {11, widths[me]}, 70 + rank);
    Tensor gathered = Tensor::empty(::dtorch::wire::F64, {11, 1300});
    c.all_gather(piece, gathered, group, 1, widths);
    std::vector<Tensor> pieces;
    for (size_t j = 0; j < group.size(); ++j)
      pieces.push_back(sampleTensor(::dtorch::wire::F64, {11, widths[j]},
                                    70 + static_cast<unsigned>(group[j])));
    expectSameBits(gathered, concatAlong(pieces, 1), "all_gather along dim 1");
    // broadcast of many rounds.
    Tensor b =
        rank == 1 ? sampleTensor(::dtorch::wire::I64, {9999}, 90) : Tensor();
    Tensor bout = Tensor::empty(::dtorch::wire::I64, {9999});
    c.broadcast(b, bout, group, 1);
    expectSameBits(bout, sampleTensor(::dtorch::wire::I64, {9999}, 90),
                   "broadcast");
    // 0 -> 1: tag 5 (7 chunks) then tag 6; 1 takes tag 6 first.
    if (rank == 0) {
      c.send(sampleTensor(::dtorch::wire::F32, {7000}, 5), 1, 5);
      c.send(sampleTensor(::dtorch::wire::F32, {3}, 6), 1, 6);
      c.send(sampleTensor(::dtorch::wire::F32, {0}, 7), 1, 7);
    } else if (rank == 1) {
      Tensor six = Tensor::empty(::dtorch::wire::F32, {3});
      c.recv(six, 0, 6);
      expectSameBits(six, sampleTensor(::dtorch::wire::F32, {3}, 6), "tag 6");
      Tensor five = Tensor::empty(::dtorch::wire::F32, {7000});
      c.recv(five, 0, 5);
      expectSameBits(five, sampleTensor(::dtorch::wire::F32, {7000}, 5),
                     "tag 5");
      Tensor seven = Tensor::empty(::dtorch::wire::F32, {0});
      c.recv(seven, 0, 7);
    }
  });
}

// A sender does not wait for its receiver while its buffer has room: the
// receiver has not touched its communicator when four sends of one chunk
// each return; then both directions at once.
TEST(IpcDeviceCollectives, SendsDoNotWaitForTheReceiver) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  auto comms = threadComms(2, store, smallRounds(10s));
  std::atomic<bool> sent{false};
  runRanks(2, [&](int rank) {
    if (rank == 0) {
      for (int i = 0; i < 4; ++i)
        comms[0]->send(
            sampleTensor(::dtorch::wire::F32, {1000}, static_cast<unsigned>(i)),
            1, i);
      sent = true;
      return;
    }
    auto until = std::chrono::steady_clock::now() + 5s;
    while (!sent && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(1ms);
    EXPECT_TRUE(sent) << "the sends waited for the receiver";
    for (int i = 0; i < 4; ++i) {
      Tensor got = Tensor::empty(::dtorch::wire::F32, {1000});
      comms[1]->recv(got, 0, i);
      expectSameBits(
          got,
          sampleTensor(::dtorch::wire::F32, {1000}, static_cast<unsigned>(i)),
          "message " + std::to_string(i));
    }
  });
  runRanks(2, [&](int rank) {
    int peer = 1 - rank;
    for (int i = 0; i < 4; ++i)
      comms[rank]->send(sampleTensor(::dtorch::wire::F32, {1000},
                                     static_cast<unsigned>(100 * rank + i)),
                        peer, i);
    for (int i = 0; i < 4; ++i) {
      Tensor got = Tensor::empty(::dtorch::wire::F32, {1000});
      comms[rank]->recv(got, peer, i);
      expectSameBits(got,
                     sampleTensor(::dtorch::wire::F32, {1000},
                                  static_cast<unsigned>(100 * peer + i)),
                     "message " + std::to_string(i) + " both ways");
    }
  });
}

TEST(IpcDeviceCollectives, AMissingMemberIsNamedAtTheDeadline) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  auto comms = threadComms(3, store, smallRounds(300ms));
  // Rank 2 takes part in the first call, then never comes back.
  runRanks(3, [&](int rank) {
    Tensor x = sampleTensor(::dtorch::wire::F32, {10}, 1);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {10});
    comms[rank]->all_reduce(x, out, {0, 1, 2}, ReduceOp::Sum);
  });
  runRanks(2, [&](int rank) {
    Tensor x = sampleTensor(::dtorch::wire::F32, {10}, 1);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {10});
    auto start = std::chrono::steady_clock::now();
    expectRuntimeError(
        [&] { comms[rank]->all_reduce(x, out, {0, 1, 2}, ReduceOp::Sum); },
        {"all_reduce on group", "timed out", "rank(s) 2"});
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    // The group is unusable afterwards, with the reason.
    expectRuntimeError(
        [&] { comms[rank]->all_reduce(x, out, {0, 1, 2}, ReduceOp::Sum); },
        {"unusable", "timed out"});
  });
  // A receiver whose sender never sends.
  expectRuntimeError(
      [&] {
        Tensor out = Tensor::empty(::dtorch::wire::F32, {4});
        comms[0]->recv(out, 1, 3);
      },
      {"recv of rank 0", "rank 1"});
}

TEST(IpcDeviceCollectives, ADeadProcessIsReportedAtOnce) {
  StoreDirectory dir;
  auto codes = runProcesses(2, [&](int process) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeIpcDeviceCommunicator(process, hostDeviceIpc(), store,
                                          smallRounds(30s));
    Tensor x = sampleTensor(::dtorch::wire::F32, {100}, 3);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {100});
    comm->all_reduce(x, out, {0, 1}, ReduceOp::Sum);
    if (process == 1)
      _exit(0); // dies between two calls
    auto start = std::chrono::steady_clock::now();
    expectRuntimeError([&] { comm->all_reduce(x, out, {0, 1}, ReduceOp::Sum); },
                       {"rank 1", "died"});
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  });
  expectAllSucceeded(codes);
}

TEST(IpcDeviceCollectives, APeerDeclaredDeadFailsTheCallAtOnce) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  auto health = std::make_shared<PeerHealth>();
  IpcDeviceOptions options = smallRounds(30s);
  options.health = health;
  auto comms = threadComms(2, store, options);
  runRanks(2, [&](int rank) {
    Tensor x = sampleTensor(::dtorch::wire::F32, {10}, 1);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {10});
    comms[rank]->all_reduce(x, out, {0, 1}, ReduceOp::Sum);
  });
  // Rank 0 waits in its call; rank 1 is declared dead meanwhile.
  std::thread declare([&] {
    std::this_thread::sleep_for(100ms);
    health->declareDead({1}, "its worker exited");
  });
  auto start = std::chrono::steady_clock::now();
  Tensor x = sampleTensor(::dtorch::wire::F32, {10}, 1);
  Tensor out = Tensor::empty(::dtorch::wire::F32, {10});
  expectRuntimeError(
      [&] { comms[0]->all_reduce(x, out, {0, 1}, ReduceOp::Sum); },
      {"rank 1", "its worker exited"});
  declare.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  // Later calls fail before waiting.
  expectRuntimeError([&] { comms[0]->all_gather(x, out, {0, 1}, 0, {5, 5}); },
                     {"rank 1", "its worker exited"});
}

// A device whose streams run their work later, each on a thread of its
// own with random pauses, and whose events complete when their stream gets
// there: data that the protocol orders only by events (a member reading
// another's slot, a slot written again, a call's end) comes out wrong when
// an ordering is missing.
class AsyncEvent final : public Event {
public:
  uint64_t issue() {
    std::lock_guard<std::mutex> lock(mutex_);
    return ++issued_;
  }
  uint64_t issued() {
    std::lock_guard<std::mutex> lock(mutex_);
    return issued_;
  }
  void complete(uint64_t ticket) {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = std::max(completed_, ticket);
    changed_.notify_all();
  }
  void waitFor(uint64_t ticket) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return completed_ >= ticket; });
  }
  void synchronize() override { waitFor(issued()); }
  bool done() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ >= issued_;
  }

private:
  std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t issued_ = 0, completed_ = 0;
};

class AsyncStream final : public Stream {
public:
  explicit AsyncStream(unsigned seed) : random_(seed) {
    thread_ = std::thread([this] { loop(); });
  }
  ~AsyncStream() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      changed_.notify_all();
    }
    thread_.join();
  }
  void enqueue(std::function<void()> work) {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
    changed_.notify_all();
  }
  void synchronize() override {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }
  void record(Event &event) override {
    auto &e = static_cast<AsyncEvent &>(event);
    uint64_t ticket = e.issue();
    enqueue([&e, ticket] { e.complete(ticket); });
  }
  void wait(Event &event) override {
    auto &e = static_cast<AsyncEvent &>(event);
    uint64_t ticket = e.issued(); // the last record made so far
    enqueue([&e, ticket] { e.waitFor(ticket); });
  }
  void *nativeHandle() const override { return nullptr; }

private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty())
        return;
      std::function<void()> work = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      bool pause = random_() % 4 == 0;
      unsigned micros = random_() % 300;
      lock.unlock();
      if (pause)
        std::this_thread::sleep_for(std::chrono::microseconds(micros));
      work();
      lock.lock();
      busy_ = false;
      changed_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false, stop_ = false;
  std::minstd_rand random_;
  std::thread thread_;
};

// The CPU's memory; one asynchronous stream per calling thread.
class AsyncDevice final : public Device {
public:
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  const char *name() const override { return "async"; }
  std::string describe() const override { return "async"; }
  void *allocate(size_t bytes) override { return cpu().allocate(bytes); }
  void deallocate(void *p, size_t bytes) override {
    cpu().deallocate(p, bytes);
  }
  void *allocateHostStaging(size_t bytes) override {
    return cpu().allocateHostStaging(bytes);
  }
  void deallocateHostStaging(void *p, size_t bytes) override {
    cpu().deallocateHostStaging(p, bytes);
  }
  void releaseCached() override {}
  void copyHostToDevice(void *d, const void *s, size_t n, Stream *) override {
    sync(d, s, n);
  }
  void copyDeviceToHost(void *d, const void *s, size_t n, Stream *) override {
    sync(d, s, n);
  }
  void copyDeviceToDevice(void *d, const void *s, size_t n, Stream *) override {
    sync(d, s, n);
  }
  void fillZero(void *d, size_t n, Stream *) override {
    currentStream().synchronize();
    std::memset(d, 0, n);
  }
  std::unique_ptr<Stream> newStream() override {
    return std::make_unique<AsyncStream>(17);
  }
  std::unique_ptr<Event> newEvent() override {
    return std::make_unique<AsyncEvent>();
  }
  Stream &currentStream() override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::unique_ptr<AsyncStream> &stream = streams_[std::this_thread::get_id()];
    if (!stream)
      stream = std::make_unique<AsyncStream>(
          static_cast<unsigned>(streams_.size() * 7919));
    return *stream;
  }
  void setCurrentStream(Stream *) override {}
  void synchronize() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto &[thread, stream] : streams_)
      stream->synchronize();
  }

private:
  void sync(void *d, const void *s, size_t n) {
    currentStream().synchronize();
    std::memcpy(d, s, n);
  }
  static Device &cpu() { return cpuDevice(); }
  std::mutex mutex_;
  std::map<std::thread::id, std::unique_ptr<AsyncStream>> streams_;
};

// Exported memory and events of the asynchronous device, shared by handle
// among the ranks (threads) of this process.
class AsyncIpc final : public DeviceIpc {
public:
  Device &device() override { return device_; }
  std::string deviceIdentity() override { return "async"; }
  void *allocateExported(size_t bytes, std::string &handle) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto block = std::make_unique<char[]>(bytes == 0 ? 1 : bytes);
    void *data = block.get();
    handle = "async-memory-" + std::to_string(nextHandle());
    memory_[handle] = std::move(block);
    return data;
  }
  void freeExported(void *, size_t) override {}
  void *openPeer(const std::string &handle, size_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return memory_.at(handle).get();
  }
  void closePeer(void *, size_t) override {}
  class Shared final : public IpcEvent {
  public:
    explicit Shared(std::shared_ptr<AsyncEvent> event)
        : event_(std::move(event)) {}
    void record(Stream &stream) override { stream.record(*event_); }
    void waitOn(Stream &stream) override { stream.wait(*event_); }

  private:
    std::shared_ptr<AsyncEvent> event_;
  };
  std::unique_ptr<IpcEvent> newExportedEvent(std::string &handle) override {
    std::lock_guard<std::mutex> lock(mutex_);
    handle = "async-event-" + std::to_string(nextHandle());
    auto event = std::make_shared<AsyncEvent>();
    events_[handle] = event;
    return std::make_unique<Shared>(event);
  }
  std::unique_ptr<IpcEvent> openPeerEvent(const std::string &handle) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::make_unique<Shared>(events_.at(handle));
  }
  void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch,
              size_t width, size_t height, Stream &stream) override {
    static_cast<AsyncStream &>(stream).enqueue([=] {
      hostDeviceIpc().copy2D(dst, dstPitch, src, srcPitch, width, height,
                             cpuDevice().currentStream());
    });
  }
  void reduce(void *out, const std::vector<const void *> &pieces, int64_t count,
              DType dtype, ReduceOp op, Stream &stream) override {
    static_cast<AsyncStream &>(stream).enqueue(
        [=] { reducePieces(out, pieces, count, dtype, op); });
  }
  size_t maxPieces() const override { return 255; }

private:
  // Unique in the process (the communicators' handle table is
  // process-wide).
  static uint64_t nextHandle() {
    static std::atomic<uint64_t> next{0};
    return next++;
  }
  AsyncDevice device_;
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<char[]>> memory_;
  std::map<std::string, std::shared_ptr<AsyncEvent>> events_;
};

// Every collective and dtype on a device that runs its work late: right
// only if every read waits for the events that order it.
TEST(IpcDeviceCollectives, EveryCollectiveOnADeviceThatRunsLate) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  AsyncIpc ipc;
  std::vector<std::unique_ptr<IpcDeviceCommunicator>> comms;
  for (int r = 0; r < 4; ++r)
    comms.push_back(makeIpcDeviceCommunicator(r, ipc, store, smallRounds()));
  for (DType dtype : {::dtorch::wire::F32, ::dtorch::wire::BF16,
                      ::dtorch::wire::I64, ::dtorch::wire::BOOL})
    runRanks(4,
             [&](int rank) { runEveryCollective(*comms[rank], rank, dtype); });
  comms.clear(); // before the device's streams go
}

// A device whose work never finishes (as work queued behind the event of
// a peer that died): the CPU's, but its events stay pending.
class StuckDevice final : public Device {
public:
  class Pending final : public Event {
  public:
    void synchronize() override {
      throw RuntimeError("synchronize on a stuck device would hang");
    }
    bool done() override { return false; }
  };
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  const char *name() const override { return "stuck"; }
  std::string describe() const override { return "stuck"; }
  void *allocate(size_t bytes) override { return cpu().allocate(bytes); }
  void deallocate(void *p, size_t bytes) override {
    cpu().deallocate(p, bytes);
  }
  void *allocateHostStaging(size_t bytes) override {
    return cpu().allocateHostStaging(bytes);
  }
  void deallocateHostStaging(void *p, size_t bytes) override {
    cpu().deallocateHostStaging(p, bytes);
  }
  void releaseCached() override {}
  void copyHostToDevice(void *d, const void *s, size_t n, Stream *st) override {
    cpu().copyHostToDevice(d, s, n, st);
  }
  void copyDeviceToHost(void *d, const void *s, size_t n, Stream *st) override {
    cpu().copyDeviceToHost(d, s, n, st);
  }
  void copyDeviceToDevice(void *d, const void *s, size_t n,
                          Stream *st) override {
    cpu().copyDeviceToDevice(d, s, n, st);
  }
  void fillZero(void *d, size_t n, Stream *st) override {
    cpu().fillZero(d, n, st);
  }
  std::unique_ptr<Stream> newStream() override { return cpu().newStream(); }
  std::unique_ptr<Event> newEvent() override {
    return std::make_unique<Pending>();
  }
  Stream &currentStream() override { return cpu().currentStream(); }
  void setCurrentStream(Stream *stream) override {
    cpu().setCurrentStream(stream);
  }
  void synchronize() override {}

private:
  static Device &cpu() { return cpuDevice(); }
};

// The host fake, on the stuck device.
class StuckIpc final : public DeviceIpc {
public:
  Device &device() override { return device_; }
  std::string deviceIdentity() override { return fake().deviceIdentity(); }
  void *allocateExported(size_t bytes, std::string &handle) override {
    return fake().allocateExported(bytes, handle);
  }
  void freeExported(void *data, size_t bytes) override {
    fake().freeExported(data, bytes);
  }
  void *openPeer(const std::string &handle, size_t bytes) override {
    return fake().openPeer(handle, bytes);
  }
  void closePeer(void *data, size_t bytes) override {
    fake().closePeer(data, bytes);
  }
  std::unique_ptr<IpcEvent> newExportedEvent(std::string &handle) override {
    return fake().newExportedEvent(handle);
  }
  std::unique_ptr<IpcEvent> openPeerEvent(const std::string &handle) override {
    return fake().openPeerEvent(handle);
  }
  void copy2D(void *dst, size_t dstPitch, const void *src, size_t srcPitch,
              size_t width, size_t height, Stream &stream) override {
    fake().copy2D(dst, dstPitch, src, srcPitch, width, height, stream);
  }
  void reduce(void *out, const std::vector<const void *> &pieces, int64_t count,
              DType dtype, ReduceOp op, Stream &stream) override {
    fake().reduce(out, pieces, count, dtype, op, stream);
  }
  size_t maxPieces() const override { return 255; }

private:
  static DeviceIpc &fake() { return hostDeviceIpc(); }
  StuckDevice device_;
};

// Device work that never finishes fails the call at the deadline (polled,
// never a blocking synchronize).
TEST(IpcDeviceCollectives, StuckDeviceWorkIsAnErrorAtTheDeadline) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  StuckIpc stuck;
  std::vector<std::unique_ptr<IpcDeviceCommunicator>> comms;
  for (int r = 0; r < 2; ++r)
    comms.push_back(
        makeIpcDeviceCommunicator(r, stuck, store, smallRounds(300ms)));
  runRanks(2, [&](int rank) {
    Tensor x = sampleTensor(::dtorch::wire::F32, {10}, 1);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {10});
    auto start = std::chrono::steady_clock::now();
    expectRuntimeError(
        [&] { comms[rank]->all_reduce(x, out, {0, 1}, ReduceOp::Sum); },
        {"all_reduce on group", "did not finish", "300 ms"});
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  });
}

TEST(IpcDeviceCollectives, MembersThatDisagreeFail) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  auto comms = threadComms(2, store, smallRounds(5s));
  std::vector<std::string> errors(2);
  runRanks(2, [&](int rank) {
    Tensor x = sampleTensor(::dtorch::wire::F32, {8}, 1);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {8});
    try {
      if (rank == 0)
        comms[0]->all_reduce(x, out, {0, 1}, ReduceOp::Sum);
      else
        comms[1]->all_reduce(x, out, {0, 1}, ReduceOp::Max);
    } catch (const RuntimeError &error) {
      errors[rank] = error.what();
    }
  });
  for (const std::string &error : errors)
    EXPECT_NE(error.find("another collective"), std::string::npos) << error;
}

// A world restart changes the prefix: the next calls meet under the new
// keys (the old group's counters are forgotten).
TEST(IpcDeviceCollectives, ANewPrefixStartsAfresh) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  auto generation = std::make_shared<std::atomic<int>>(1);
  IpcDeviceOptions options = smallRounds();
  options.currentPrefix = [generation] {
    return "gpuipc-g" + std::to_string(generation->load());
  };
  auto comms = threadComms(2, store, options);
  auto allReduce = [&](int rank, unsigned seed) {
    Tensor x = sampleTensor(::dtorch::wire::F32, {5000}, seed + rank);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {5000});
    comms[rank]->all_reduce(x, out, {0, 1}, ReduceOp::Sum);
    expectSameBits(
        out,
        referenceReduce({sampleTensor(::dtorch::wire::F32, {5000}, seed),
                         sampleTensor(::dtorch::wire::F32, {5000}, seed + 1)},
                        ReduceOp::Sum),
        "after generation " + std::to_string(generation->load()));
  };
  runRanks(2, [&](int rank) { allReduce(rank, 10); });
  generation->store(2);
  runRanks(2, [&](int rank) { allReduce(rank, 20); });
  bool sawNew = false;
  for (const std::string &key : store->keys())
    sawNew = sawNew || key.rfind("gpuipc-g2/group/", 0) == 0;
  EXPECT_TRUE(sawNew);
}

// The path of a group from where its members compute, and the router
// sending each group along it: device ipc for members of different
// processes of one host on one device.
TEST(IpcDeviceCollectives, TheRouterSendsCrossProcessGroupsOfOneDeviceHere) {
  std::vector<MemberPlacement> placed = {
      {"h", "p0", 0}, {"h", "p1", 0}, {"h", "p1", 1}, {"g", "p2", 0}};
  auto pathOf = [&](const Group &g) {
    return collectivePathOf(g, [&](int64_t r) { return placed[r]; });
  };
  EXPECT_EQ(pathOf({0, 1}), CollectivePath::CrossProcessDevice);
  EXPECT_EQ(pathOf({1, 2}), CollectivePath::DeviceCommunicator);
  EXPECT_EQ(pathOf({0, 1, 2}), CollectivePath::Host);
  EXPECT_EQ(pathOf({0, 3}), CollectivePath::DeviceCommunicator);
  EXPECT_STREQ(collectivePathName(CollectivePath::CrossProcessDevice),
               "device ipc");

  auto store = std::make_shared<InMemoryKeyValueStore>();
  FakeCollectiveHub host(2, 10s);
  std::vector<std::unique_ptr<Communicator>> hostComms;
  for (int r = 0; r < 2; ++r)
    hostComms.push_back(host.communicator(r));
  auto ipcPath = [](const Group &) {
    return CollectivePath::CrossProcessDevice;
  };
  std::vector<std::unique_ptr<DeviceCollectiveRouter>> routers;
  for (int r = 0; r < 2; ++r)
    routers.push_back(std::make_unique<DeviceCollectiveRouter>(
        r, ipcPath, nullptr, nullptr, hostComms[r].get(),
        makeIpcDeviceCommunicator(r, hostDeviceIpc(), store, smallRounds())));
  runRanks(2, [&](int rank) {
    Tensor x = sampleTensor(::dtorch::wire::F32, {3000}, 4 + rank);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {3000});
    routers[rank]->all_reduce(x, out, {0, 1}, ReduceOp::Sum);
    expectSameBits(
        out,
        referenceReduce({sampleTensor(::dtorch::wire::F32, {3000}, 4),
                         sampleTensor(::dtorch::wire::F32, {3000}, 5)},
                        ReduceOp::Sum),
        "through the router");
  });
  // The segment keys show the call went through device ipc.
  bool viaIpc = false;
  for (const std::string &key : store->keys())
    viaIpc = viaIpc || key == "gpuipc/group/0,1";
  EXPECT_TRUE(viaIpc);
  // Without an ipc communicator such groups go through the host.
  DeviceCollectiveRouter noIpc(0, ipcPath, nullptr, nullptr,
                               hostComms[0].get());
  std::thread other([&] {
    Tensor x = sampleTensor(::dtorch::wire::F32, {4}, 1);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {4});
    hostComms[1]->all_reduce(x, out, {0, 1}, ReduceOp::Sum);
  });
  Tensor x = sampleTensor(::dtorch::wire::F32, {4}, 1);
  Tensor out = Tensor::empty(::dtorch::wire::F32, {4});
  noIpc.all_reduce(x, out, {0, 1}, ReduceOp::Sum);
  other.join();
  expectSameBits(out, referenceReduce({x, x}, ReduceOp::Sum), "via the host");
}

} // namespace
} // namespace dtorch::rt::test
