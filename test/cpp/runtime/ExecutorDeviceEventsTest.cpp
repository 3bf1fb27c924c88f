// How the executor orders the compute and communication streams of a device
// (NCCL overlapping compute), without a GPU: a fake device keeps its memory
// in host memory, runs the CPU kernels, and logs what is queued on its
// streams (event records and waits, synchronizations) together with the
// collectives a logging communicator receives and the stream they were
// called on. A collective must wait, on its own stream, for the event the
// compute stream records after the kernel that wrote its input, and the
// compute stream must not be synchronized before the collective (its later
// kernels run beside it); through the host, only the communication stream
// is synchronized before the copies.
#include "TestSupport.h"

#include "dtorch/runtime/Kernels.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::COMM;
using ::dtorch::wire::F32;

struct StreamLog {
  std::mutex mutex;
  std::vector<std::string> lines;
  void add(const std::string &line) {
    std::lock_guard<std::mutex> lock(mutex);
    lines.push_back(line);
  }
  // Index of the first line equal to `line`, or -1.
  int find(const std::string &line) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = std::find(lines.begin(), lines.end(), line);
    return it == lines.end() ? -1 : static_cast<int>(it - lines.begin());
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string s;
    for (const auto &l : lines)
      s += "  " + l + "\n";
    return s;
  }
};

class LoggedEvent final : public Event {
public:
  explicit LoggedEvent(std::string name) : name(std::move(name)) {}
  void synchronize() override {}
  bool done() override { return true; }
  std::string name;
};

class LoggedStream final : public Stream {
public:
  LoggedStream(std::string name, StreamLog &log)
      : name(std::move(name)), log_(log) {}
  void synchronize() override { log_.add(name + " sync"); }
  void record(Event &event) override {
    log_.add(name + " record " + static_cast<LoggedEvent &>(event).name);
  }
  void wait(Event &event) override {
    log_.add(name + " wait " + static_cast<LoggedEvent &>(event).name);
  }
  void *nativeHandle() const override { return nullptr; }
  std::string name;

private:
  StreamLog &log_;
};

// Host memory as device memory (the CPU kernels compute on it at once);
// every stream and event it makes is named s<N> / e<N> and logs to `log`;
// the current stream is per thread, as CUDA's is.
class StreamLoggingDevice final : public Device {
public:
  DeviceKind kind() const override { return DeviceKind::Cuda; }
  const char *name() const override { return "cpu"; }
  std::string describe() const override { return "logged:0"; }
  void *allocate(size_t bytes) override {
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
  }
  void deallocate(void *ptr, size_t) override { std::free(ptr); }
  void *allocateHostStaging(size_t bytes) override { return allocate(bytes); }
  void deallocateHostStaging(void *ptr, size_t) override { std::free(ptr); }
  void releaseCached() override {}
  void copyHostToDevice(void *dst, const void *src, size_t bytes,
                        Stream *) override {
    std::memcpy(dst, src, bytes);
  }
  void copyDeviceToHost(void *dst, const void *src, size_t bytes,
                        Stream *) override {
    std::memcpy(dst, src, bytes);
  }
  void copyDeviceToDevice(void *dst, const void *src, size_t bytes,
                          Stream *) override {
    std::memcpy(dst, src, bytes);
  }
  void fillZero(void *dst, size_t bytes, Stream *) override {
    std::memset(dst, 0, bytes);
  }
  std::unique_ptr<Stream> newStream() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::make_unique<LoggedStream>("s" + std::to_string(streams_++),
                                          log);
  }
  std::unique_ptr<Event> newEvent() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::make_unique<LoggedEvent>("e" + std::to_string(events_++));
  }
  Stream &currentStream() override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = current_.find(std::this_thread::get_id());
    return it != current_.end() && it->second ? *it->second : default_;
  }
  void setCurrentStream(Stream *stream) override {
    std::lock_guard<std::mutex> lock(mutex_);
    current_[std::this_thread::get_id()] = stream;
  }
  void synchronize() override { log.add("device sync"); }

  StreamLog log;

private:
  std::mutex mutex_;
  int streams_ = 0, events_ = 0;
  std::map<std::thread::id, Stream *> current_;
  LoggedStream default_{"default", log};
};

// A one-member all_reduce (out = x) that logs the stream it was called on.
class StreamLoggingCommunicator final : public Communicator {
public:
  StreamLoggingCommunicator(Device &device, const char *name)
      : device_(device), name_(name) {}
  int rank() const override { return 0; }
  void all_reduce(const Tensor &x, Tensor &out, const Group &,
                  ReduceOp) override {
    auto &stream = static_cast<LoggedStream &>(device_.currentStream());
    static_cast<StreamLoggingDevice &>(device_).log.add(
        std::string(name_) + " all_reduce on " + stream.name +
        (x.device().kind() == DeviceKind::Cpu ? " (host tensors)"
                                              : " (device tensors)"));
    std::memcpy(out.data(), x.data(), x.nbytes());
  }
  void all_gather(const Tensor &, Tensor &, const Group &, int64_t,
                  const std::vector<int64_t> &) override {}
  void reduce_scatter(const Tensor &, Tensor &, const Group &, ReduceOp,
                      int64_t, const std::vector<int64_t> &) override {}
  void all_to_all(const Tensor &, Tensor &, const Group &, int64_t,
                  const std::vector<int64_t> &, int64_t,
                  const std::vector<int64_t> &) override {}
  void broadcast(const Tensor &, Tensor &, const Group &, int64_t) override {}
  void send(const Tensor &, int64_t, int64_t) override {}
  void recv(Tensor &, int64_t, int64_t) override {}

private:
  Device &device_;
  const char *name_;
};

// out = all_reduce(neg(x)) + x, and exp(x), which nothing orders with the
// collective.
Program overlapProgram() {
  ProgramBuilder b;
  int x = b.input(F32, {4});
  int a = b.buffer(F32, {4});
  int y = b.buffer(F32, {4});
  int z = b.buffer(F32, {4});
  int out = b.buffer(F32, {4});
  int negated = b.event(), reduced = b.event();
  b.add("neg", {x}, {a}).set_record_event(negated);
  Instruction &reduce = b.add("all_reduce", {a}, {y}, COMM);
  setInts(reduce, "group", {0});
  setString(reduce, "reduce", "sum");
  reduce.add_wait_events(negated);
  reduce.set_record_event(reduced);
  b.add("exp", {x}, {z});
  b.add("add", {y, x}, {out}).add_wait_events(reduced);
  b.output(out);
  b.output(z);
  return onOneRankMesh(b.program());
}

// The name of the stream a line "<stream> <verb> <event>" names for the
// first line ending in " <verb> <event>"; "" when none.
std::string streamThat(StreamLog &log, const std::string &verbAndEvent) {
  std::lock_guard<std::mutex> lock(log.mutex);
  for (const auto &l : log.lines)
    if (l.size() > verbAndEvent.size() + 1 &&
        l.compare(l.size() - verbAndEvent.size(), verbAndEvent.size(),
                  verbAndEvent) == 0)
      return l.substr(0, l.size() - verbAndEvent.size() - 1);
  return "";
}

TEST(ExecutorDeviceEvents, TheCollectiveWaitsForItsInputsKernelOnly) {
  StreamLoggingDevice gpu;
  StreamLoggingCommunicator host(gpu, "host"), device(gpu, "nccl");
  Executor executor(&host);
  executor.setDevice(gpu);
  executor.setDeviceCommunicator(&device);
  Program program = overlapProgram();
  for (int run = 0; run < 2; ++run) {
    gpu.log.lines.clear();
    std::vector<Tensor> got =
        executor.run(program, {makeTensor<float>(F32, {4}, {1, 2, 3, 4})});
    EXPECT_EQ(valuesOf<float>(got[0].to(cpuDevice())),
              (std::vector<float>{0, 0, 0, 0}));
    std::string log = gpu.log.all();
    // One device event: the one the collective waits for (e0), recorded
    // after `neg` on the compute stream, waited for on another stream, on
    // which the device communicator is called.
    std::string compute = streamThat(gpu.log, "record e0");
    std::string comm = streamThat(gpu.log, "wait e0");
    ASSERT_NE(compute, "") << log;
    ASSERT_NE(comm, "") << log;
    EXPECT_NE(compute, comm) << log;
    int recorded = gpu.log.find(compute + " record e0");
    int waited = gpu.log.find(comm + " wait e0");
    int reduced =
        gpu.log.find("nccl all_reduce on " + comm + " (device tensors)");
    ASSERT_GE(reduced, 0) << log;
    EXPECT_LT(recorded, waited) << log;
    EXPECT_LT(waited, reduced) << log;
    // Neither stream is synchronized before the collective (the compute
    // stream only at the end of the run, after it).
    int computeSync = gpu.log.find(compute + " sync");
    EXPECT_GT(computeSync, reduced) << log;
    EXPECT_EQ(gpu.log.find(comm + " sync"), -1) << log;
    EXPECT_EQ(gpu.log.find("host all_reduce on " + comm + " (host tensors)"),
              -1)
        << log;
    // No event for what no collective waits for (the collective's own).
    EXPECT_EQ(streamThat(gpu.log, "record e1"), "") << log;
  }
}

TEST(ExecutorDeviceEvents, ThroughTheHostOnlyTheCommStreamIsSynchronized) {
  StreamLoggingDevice gpu;
  StreamLoggingCommunicator host(gpu, "host");
  Executor executor(&host);
  executor.setDevice(gpu);
  std::vector<Tensor> got = executor.run(
      overlapProgram(), {makeTensor<float>(F32, {4}, {1, 2, 3, 4})});
  EXPECT_EQ(valuesOf<float>(got[0].to(cpuDevice())),
            (std::vector<float>{0, 0, 0, 0}));
  std::string log = gpu.log.all();
  std::string compute = streamThat(gpu.log, "record e0");
  std::string comm = streamThat(gpu.log, "wait e0");
  ASSERT_NE(comm, "") << log;
  int waited = gpu.log.find(comm + " wait e0");
  int synced = gpu.log.find(comm + " sync");
  int reduced = gpu.log.find("host all_reduce on " + comm + " (host tensors)");
  ASSERT_GE(reduced, 0) << log;
  EXPECT_LT(waited, synced) << log;
  EXPECT_LT(synced, reduced) << log;
  EXPECT_GT(gpu.log.find(compute + " sync"), reduced) << log;
}

} // namespace
} // namespace dtorch::rt::test
