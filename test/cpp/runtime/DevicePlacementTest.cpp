// Worker device selection without a GPU: which device each rank of a mesh
// gets (assignDeviceOrdinals), the pinned-staging copies of puts and
// fetches, a rank whose uploads name a device, and collectives of a device
// program carried by the host communicator. The device is a fake that keeps
// its "device memory" in host memory, counts what goes through it and runs
// the CPU kernels (its registry name is "cpu"), so every path a GPU takes
// through the executor and the rank's table is exercised here.
#include "TestSupport.h"

#include "dtorch/runtime/DevicePlacement.h"
#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/RankState.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::COMM;
using ::dtorch::wire::F32;

class FakeStream final : public Stream {
public:
  explicit FakeStream(std::atomic<int> *synchronizations = nullptr)
      : synchronizations_(synchronizations) {}
  void synchronize() override {
    if (synchronizations_)
      ++*synchronizations_;
  }
  void record(Event &) override {}
  void wait(Event &) override {}
  void *nativeHandle() const override { return nullptr; }

private:
  std::atomic<int> *synchronizations_;
};

class FakeEvent final : public Event {
public:
  void synchronize() override {}
  bool done() override { return true; }
};

// A "GPU" whose memory is host memory it tracks: a pointer handed out by
// allocate is device memory, one from allocateHostStaging is pinned host
// memory; copies check that each side is what it claims to be.
class HostBackedDevice final : public Device {
public:
  DeviceKind kind() const override { return DeviceKind::Cuda; }
  const char *name() const override { return "cpu"; } // the CPU kernels
  std::string describe() const override { return "fake:0"; }

  void *allocate(size_t bytes) override {
    void *p = std::aligned_alloc(64, roundUp(bytes));
    std::lock_guard<std::mutex> lock(mutex_);
    device_.insert(p);
    return p;
  }
  void deallocate(void *ptr, size_t) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      device_.erase(ptr);
    }
    std::free(ptr);
  }
  void *allocateHostStaging(size_t bytes) override {
    void *p = std::aligned_alloc(64, roundUp(bytes));
    std::lock_guard<std::mutex> lock(mutex_);
    staging_.insert(p);
    ++stagingAllocations;
    return p;
  }
  void deallocateHostStaging(void *ptr, size_t) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      staging_.erase(ptr);
    }
    std::free(ptr);
  }
  void releaseCached() override {}

  void copyHostToDevice(void *dst, const void *src, size_t bytes,
                        Stream *) override {
    expectDevice(dst);
    expectStaging(src);
    ++hostToDevice;
    std::memcpy(dst, src, bytes);
  }
  void copyDeviceToHost(void *dst, const void *src, size_t bytes,
                        Stream *) override {
    expectStaging(dst);
    expectDevice(src);
    ++deviceToHost;
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
    return std::make_unique<FakeStream>(&streamSynchronizations);
  }
  std::unique_ptr<Event> newEvent() override {
    return std::make_unique<FakeEvent>();
  }
  Stream &currentStream() override { return stream_; }
  void setCurrentStream(Stream *) override {}
  void synchronize() override {}

  bool holds(const void *p) {
    std::lock_guard<std::mutex> lock(mutex_);
    return device_.count(p) != 0;
  }

  std::atomic<int> stagingAllocations{0}, hostToDevice{0}, deviceToHost{0},
      streamSynchronizations{0};

private:
  static size_t roundUp(size_t bytes) { return (bytes + 63) / 64 * 64 + 64; }
  void expectDevice(const void *p) {
    std::lock_guard<std::mutex> lock(mutex_);
    EXPECT_TRUE(device_.count(p)) << "not device memory";
  }
  void expectStaging(const void *p) {
    std::lock_guard<std::mutex> lock(mutex_);
    EXPECT_TRUE(staging_.count(p)) << "not a pinned staging buffer";
  }
  std::mutex mutex_;
  std::set<const void *> device_, staging_;
  FakeStream stream_;
};

// ---- assignDeviceOrdinals
// ----------------------------------------------------

std::vector<int32_t> ordinals(const std::vector<int64_t> &meshRanks,
                              const std::vector<std::string> &hostOfRank,
                              const std::map<std::string, int> &gpusOfHost) {
  return assignDeviceOrdinals(
      meshRanks, static_cast<int>(hostOfRank.size()),
      [&](int rank) { return hostOfRank[rank]; },
      [&](int rank, std::string &why) {
        int n = gpusOfHost.at(hostOfRank[rank]);
        if (n == 0)
          why = "driver: no device on " + hostOfRank[rank];
        return n;
      });
}

TEST(DevicePlacement, EachRankTakesItsIndexOnItsHostModuloItsGpus) {
  // Two hosts of four ranks and four GPUs: LOCAL_RANK.
  std::vector<std::string> hosts = {"a", "a", "a", "a", "b", "b", "b", "b"};
  EXPECT_EQ(ordinals({0, 1, 2, 3, 4, 5, 6, 7}, hosts, {{"a", 4}, {"b", 4}}),
            (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  // Fewer GPUs than ranks: they share, round robin.
  EXPECT_EQ(ordinals({0, 1, 2, 3, 4, 5, 6, 7}, hosts, {{"a", 2}, {"b", 1}}),
            (std::vector<int32_t>{0, 1, 0, 1, 0, 0, 0, 0}));
  // A mesh over some ranks, in its own order: the index is the rank's
  // place on its host in the world, not in the mesh.
  EXPECT_EQ(ordinals({7, 2, 5}, hosts, {{"a", 4}, {"b", 4}}),
            (std::vector<int32_t>{3, 2, 1}));
  // Interleaved hosts.
  EXPECT_EQ(ordinals({0, 1, 2, 3}, {"a", "b", "a", "b"}, {{"a", 8}, {"b", 8}}),
            (std::vector<int32_t>{0, 0, 1, 1}));
}

TEST(DevicePlacement, RanksWithoutADeviceAreAllNamed) {
  std::vector<std::string> hosts = {"a", "a", "b", "c"};
  expectRuntimeError(
      [&] { ordinals({0, 1, 2, 3}, hosts, {{"a", 1}, {"b", 0}, {"c", 0}}); },
      {"no CUDA device for rank 2 on host b (driver: no device on b)",
       "; rank 3 on host c (driver: no device on c)"});
  expectRuntimeError(
      [&] { ordinals({0, 9}, hosts, {{"a", 1}, {"b", 1}, {"c", 1}}); },
      {"rank 9 is outside the world of 4 ranks"});
}

TEST(DevicePlacement, DeviceCollectivesNeedAGpuPerRank) {
  auto hostOf = [](int rank) { return rank < 2 ? "a" : "b"; };
  EXPECT_TRUE(ranksHaveTheirOwnDevices({0, 1, 2, 3}, {0, 1, 0, 1}, hostOf));
  // Ranks 0 and 1 share GPU 0 of host a.
  EXPECT_FALSE(ranksHaveTheirOwnDevices({0, 1, 2, 3}, {0, 0, 0, 1}, hostOf));
  // The same ordinal on two hosts is two GPUs.
  EXPECT_TRUE(ranksHaveTheirOwnDevices({0, 2}, {0, 0}, hostOf));
  EXPECT_FALSE(ranksHaveTheirOwnDevices({0, 2}, {0}, hostOf));
}

// ---- staged copies
// -------------------------------------------------------------

TEST(DevicePlacement, PutsAndFetchesGoThroughPinnedStaging) {
  HostBackedDevice gpu;
  Tensor host = makeTensor<float>(F32, {4}, {1, -2, 3.5f, 4});
  Tensor onGpu = copyToDeviceStaged(host, gpu);
  EXPECT_EQ(&onGpu.device(), &gpu);
  EXPECT_TRUE(gpu.holds(onGpu.data()));
  EXPECT_EQ(gpu.hostToDevice, 1);
  Tensor back = copyToHostStaged(onGpu);
  EXPECT_EQ(back.device().kind(), DeviceKind::Cpu);
  EXPECT_EQ(valuesOf<float>(back), (std::vector<float>{1, -2, 3.5f, 4}));
  EXPECT_EQ(gpu.deviceToHost, 1);
  EXPECT_EQ(gpu.stagingAllocations, 2);
  // Already there: no copy.
  EXPECT_EQ(copyToDeviceStaged(onGpu, gpu).data(), onGpu.data());
  EXPECT_EQ(copyToHostStaged(host).data(), host.data());
  EXPECT_EQ(gpu.hostToDevice, 1);
  // Empty tensors move without staging.
  Tensor empty = copyToDeviceStaged(Tensor::empty(F32, {0}), gpu);
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(gpu.stagingAllocations, 2);
}

// ---- a rank whose upload names a device
// ------------------------------------------

Program negOnMesh() {
  ProgramBuilder b;
  int x = b.input(F32, {3});
  int y = b.buffer(F32, {3});
  b.add("neg", {x}, {y});
  b.output(y);
  return onOneRankMesh(b.program());
}

TEST(DevicePlacement, ARankComputesOnTheDeviceOfItsUpload) {
  HostBackedDevice gpu;
  RankState state(0, nullptr);
  Program program = negOnMesh();
  RankContext context = RankContext::of({1}, {0}, 0);
  state.upload(1, {&program}, context, nullptr, &gpu);
  state.put(10, makeTensor<float>(F32, {3}, {1, 2, 3}));
  EXPECT_EQ(state.fetch(10).device().kind(), DeviceKind::Cpu);
  ASSERT_EQ(state.run(1, {10}, {11}), std::nullopt);
  // The input moved to the device once; the output lives there.
  EXPECT_EQ(&state.fetch(10).device(), &gpu);
  EXPECT_EQ(&state.fetch(11).device(), &gpu);
  EXPECT_TRUE(gpu.holds(state.fetch(11).data()));
  EXPECT_EQ(valuesOf<float>(state.fetchToHost(11)),
            (std::vector<float>{-1, -2, -3}));
  int copiesIn = gpu.hostToDevice;
  ASSERT_EQ(state.run(1, {11}, {12}), std::nullopt);
  EXPECT_EQ(gpu.hostToDevice, copiesIn); // inputs already there
  EXPECT_EQ(valuesOf<float>(state.fetchToHost(12)),
            (std::vector<float>{1, 2, 3}));
  // The same rank's CPU program of another mesh brings its input back.
  state.upload(2, {&program}, context);
  ASSERT_EQ(state.run(2, {12}, {13}), std::nullopt);
  EXPECT_EQ(state.fetch(13).device().kind(), DeviceKind::Cpu);
  EXPECT_EQ(valuesOf<float>(state.fetch(13)), (std::vector<float>{-1, -2, -3}));
}

// ---- collectives of a device program
// ------------------------------------------

TEST(DevicePlacement, CollectivesOfADeviceProgramGoThroughTheHost) {
  // out = all_reduce(neg(x)) + x on two ranks, each on its own fake GPU,
  // the all_reduce carried by the host communicator.
  ProgramBuilder b;
  int x = b.input(F32, {4});
  int a = b.buffer(F32, {4});
  int y = b.buffer(F32, {4});
  int out = b.buffer(F32, {4});
  int negated = b.event(), reduced = b.event();
  b.add("neg", {x}, {a}).set_record_event(negated);
  Instruction &reduce = b.add("all_reduce", {a}, {y}, COMM);
  setInts(reduce, "group", {0, 1});
  setString(reduce, "reduce", "sum");
  reduce.add_wait_events(negated);
  reduce.set_record_event(reduced);
  b.add("add", {y, x}, {out}).add_wait_events(reduced);
  b.output(out);
  Program program = b.program();

  FakeCollectiveHub hub(2);
  HostBackedDevice gpus[2];
  std::vector<float> results[2];
  runRanks(2, [&](int rank) {
    auto comm = hub.communicator(rank);
    Executor executor(comm.get());
    executor.setDevice(gpus[rank]);
    float base = rank == 0 ? 1.0f : 10.0f;
    std::vector<Tensor> got = executor.run(
        program,
        {makeTensor<float>(F32, {4}, {base, 2 * base, 3 * base, 4 * base})});
    EXPECT_EQ(&got[0].device(), &gpus[rank]);
    results[rank] = valuesOf<float>(copyToHostStaged(got[0]));
  });
  // all_reduce(-x0 - x1) + x_rank
  EXPECT_EQ(results[0], (std::vector<float>{-10, -20, -30, -40}));
  EXPECT_EQ(results[1], (std::vector<float>{-1, -2, -3, -4}));
  for (auto &gpu : gpus) {
    // The compute stream finished before the copy out (and at the end).
    EXPECT_GE(gpu.streamSynchronizations, 2);
    EXPECT_GE(gpu.deviceToHost, 1);
  }
}

// Counts the all_reduces it is given and where their tensors live; the sum of
// one member is the input.
class CountingCommunicator final : public Communicator {
public:
  ~CountingCommunicator() override {
    if (destroyed)
      ++*destroyed;
  }
  int rank() const override { return 0; }
  void all_reduce(const Tensor &x, Tensor &out, const Group &,
                  ReduceOp) override {
    ++calls;
    onDevice = x.device().kind() != DeviceKind::Cpu;
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
  int calls = 0;
  bool onDevice = false;
  int *destroyed = nullptr; // counts the destruction when set
};

TEST(DevicePlacement, UploadsWithDeviceCollectivesUseTheDeviceCommunicator) {
  ProgramBuilder b;
  int x = b.input(F32, {2});
  int y = b.buffer(F32, {2});
  Instruction &reduce = b.add("all_reduce", {x}, {y}, COMM);
  setInts(reduce, "group", {0});
  setString(reduce, "reduce", "sum");
  b.output(y);
  Program program = onOneRankMesh(b.program());
  RankContext context = RankContext::of({1}, {0}, 0);

  HostBackedDevice gpu;
  CountingCommunicator host;
  auto owned = std::make_unique<CountingCommunicator>();
  CountingCommunicator &device = *owned;
  RankState state(0, &host);
  state.setDeviceCommunicator(gpu, std::move(owned));
  EXPECT_TRUE(state.hasDeviceCommunicator(gpu));
  state.upload(1, {&program}, context, nullptr, &gpu, true);
  state.upload(2, {&program}, context, nullptr, &gpu, false);
  state.put(10, makeTensor<float>(F32, {2}, {3, 4}));
  ASSERT_EQ(state.run(1, {10}, {11}), std::nullopt);
  EXPECT_EQ(device.calls, 1);
  EXPECT_TRUE(device.onDevice); // given the device tensors
  EXPECT_EQ(host.calls, 0);
  // Without device collectives (ranks share a GPU): the host, host tensors.
  ASSERT_EQ(state.run(2, {10}, {12}), std::nullopt);
  EXPECT_EQ(host.calls, 1);
  EXPECT_FALSE(host.onDevice);
  EXPECT_EQ(device.calls, 1);
  EXPECT_EQ(valuesOf<float>(state.fetchToHost(11)), (std::vector<float>{3, 4}));
  EXPECT_EQ(valuesOf<float>(state.fetchToHost(12)), (std::vector<float>{3, 4}));
}

TEST(DevicePlacement, ARestartRebuildsTheDeviceCommunicators) {
  ProgramBuilder b;
  int x = b.input(F32, {2});
  int y = b.buffer(F32, {2});
  Instruction &reduce = b.add("all_reduce", {x}, {y}, COMM);
  setInts(reduce, "group", {0});
  setString(reduce, "reduce", "sum");
  b.output(y);
  Program program = onOneRankMesh(b.program());
  RankContext context = RankContext::of({1}, {0}, 0);

  HostBackedDevice gpu;
  CountingCommunicator host;
  int destroyed = 0;
  auto first = std::make_unique<CountingCommunicator>();
  first->destroyed = &destroyed;
  CountingCommunicator &old = *first;
  RankState state(0, &host);
  state.setDeviceCommunicator(gpu, std::move(first));
  state.upload(1, {&program}, context, nullptr, &gpu, true);
  state.put(10, makeTensor<float>(F32, {2}, {3, 4}));
  ASSERT_EQ(state.run(1, {10}, {11}), std::nullopt);
  EXPECT_EQ(old.calls, 1);

  // The restart: the old world's communicator goes before the new one is
  // made (an NCCL communicator is torn down before its successor
  // connects), for the same device; the uploaded program uses the new one.
  CountingCommunicator *rebuilt = nullptr;
  int made = 0;
  state.replaceDeviceCommunicators(
      [&](Device &device) -> std::unique_ptr<Communicator> {
        EXPECT_EQ(&device, &gpu);
        EXPECT_EQ(destroyed, 1);
        ++made;
        auto comm = std::make_unique<CountingCommunicator>();
        rebuilt = comm.get();
        return comm;
      });
  EXPECT_EQ(made, 1);
  EXPECT_EQ(destroyed, 1);
  ASSERT_TRUE(state.hasDeviceCommunicator(gpu));
  ASSERT_EQ(state.run(1, {10}, {12}), std::nullopt);
  ASSERT_NE(rebuilt, nullptr);
  EXPECT_EQ(rebuilt->calls, 1);
  EXPECT_EQ(host.calls, 0);

  // A backend that cannot make one now: the collectives go through the host.
  state.replaceDeviceCommunicators(
      [](Device &) -> std::unique_ptr<Communicator> { return nullptr; });
  EXPECT_FALSE(state.hasDeviceCommunicator(gpu));
  ASSERT_EQ(state.run(1, {10}, {13}), std::nullopt);
  EXPECT_EQ(host.calls, 1);
  EXPECT_EQ(valuesOf<float>(state.fetchToHost(13)), (std::vector<float>{3, 4}));
}

} // namespace
} // namespace dtorch::rt::test
