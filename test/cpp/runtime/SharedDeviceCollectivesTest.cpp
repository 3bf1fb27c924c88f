// Collectives of ranks that share one device, without a GPU: the ranks are
// threads computing on one device (the CPU device here: its copies are
// memcpy and its kernels the registry's CPU kernels, the same calls a GPU
// takes through the CUDA device), checked against the in-process reference
// backend (FakeCollectiveHub) on the same inputs: every collective, uneven
// pieces along inner dims, in-place calls, a member that never arrives.
// Then which path a group takes (device communicator, device copies, host)
// from its members' hosts, processes and ordinals, and the router that
// sends each group's collectives along its path.
#include "TestSupport.h"

#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/SharedDeviceCollectives.h"

#include <cmath>
#include <cstring>
#include <random>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::F32;
using ::dtorch::wire::I32;

constexpr int kRanks = 4;

Tensor randomFloats(const std::vector<int64_t> &shape, unsigned seed) {
  Tensor t = Tensor::empty(F32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-10, 10);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data_as<float>()[i] = u(rng);
  return t;
}

bool sameBits(const Tensor &a, const Tensor &b) {
  return a.nbytes() == b.nbytes() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Runs `call` on every rank with the shared-device communicator and with
// the reference, and expects the same bits on every rank.
void expectLikeReference(
    const std::string &what,
    const std::function<void(Communicator &, int rank, Tensor &out)> &call,
    const std::function<Tensor(int rank)> &outOf) {
  FakeCollectiveHub reference(kRanks);
  std::vector<Tensor> got(kRanks), want(kRanks);
  runRanks(kRanks, [&](int rank) {
    auto shared = makeSharedDeviceCommunicator(rank, cpuDevice(),
                                               std::chrono::seconds(10));
    got[rank] = outOf(rank);
    call(*shared, rank, got[rank]);
    auto ref = reference.communicator(rank);
    want[rank] = outOf(rank);
    call(*ref, rank, want[rank]);
  });
  for (int r = 0; r < kRanks; ++r)
    EXPECT_TRUE(sameBits(got[r], want[r])) << what << ": rank " << r;
}

const Group kAll = {0, 1, 2, 3};

TEST(SharedDeviceCollectives, AllReduceEveryOpLikeTheReference) {
  for (ReduceOp op :
       {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    expectLikeReference(
        std::string("all_reduce ") + reduceOpName(op),
        [&](Communicator &c, int rank, Tensor &out) {
          c.all_reduce(randomFloats({3, 37}, 10 + rank), out, kAll, op);
        },
        [](int) { return Tensor::empty(F32, {3, 37}); });
  }
  // Integers; a subgroup in another order.
  expectLikeReference(
      "all_reduce i32 sum on {2, 0}",
      [&](Communicator &c, int rank, Tensor &out) {
        if (rank != 0 && rank != 2)
          return;
        Tensor x = Tensor::empty(I32, {5});
        for (int i = 0; i < 5; ++i)
          x.data_as<int32_t>()[i] = (rank + 1) * 1000 - 7 * i;
        c.all_reduce(x, out, {2, 0}, ReduceOp::Sum);
      },
      [](int) {
        Tensor t = Tensor::empty(I32, {5});
        std::memset(t.data(), 0, t.nbytes());
        return t;
      });
}

TEST(SharedDeviceCollectives, UnevenPiecesAlongInnerDims) {
  std::vector<int64_t> sizes = {1, 3, 0, 2};
  expectLikeReference(
      "all_gather dim 1",
      [&](Communicator &c, int rank, Tensor &out) {
        c.all_gather(randomFloats({2, sizes[rank], 3}, 20 + rank), out, kAll, 1,
                     sizes);
      },
      [](int) { return Tensor::empty(F32, {2, 6, 3}); });
  expectLikeReference(
      "reduce_scatter dim 1",
      [&](Communicator &c, int rank, Tensor &out) {
        c.reduce_scatter(randomFloats({2, 6, 3}, 30 + rank), out, kAll,
                         ReduceOp::Sum, 1, sizes);
      },
      [&](int rank) { return Tensor::empty(F32, {2, sizes[rank], 3}); });
  // Split along dim 0 (2 rows to each member), gathered along dim 1.
  expectLikeReference(
      "all_to_all",
      [&](Communicator &c, int rank, Tensor &out) {
        c.all_to_all(randomFloats({8, 3}, 40 + rank), out, kAll, 0,
                     {2, 2, 2, 2}, 1, {3, 3, 3, 3});
      },
      [](int) { return Tensor::empty(F32, {2, 12}); });
  expectLikeReference(
      "broadcast from 2",
      [&](Communicator &c, int rank, Tensor &out) {
        c.broadcast(rank == 2 ? randomFloats({7}, 50) : Tensor(), out, kAll, 2);
      },
      [](int) { return Tensor::empty(F32, {7}); });
}

TEST(SharedDeviceCollectives, InPlaceAllReduceAndPointToPoint) {
  // out is the caller's own input: each member still reads the others'
  // inputs before they are overwritten.
  std::vector<Tensor> got(kRanks);
  runRanks(kRanks, [&](int rank) {
    auto c = makeSharedDeviceCommunicator(rank, cpuDevice(),
                                          std::chrono::seconds(10));
    got[rank] = makeTensor<float>(F32, {3}, {1.0f * rank, 2.0f, -1.0f * rank});
    c->all_reduce(got[rank], got[rank], kAll, ReduceOp::Sum);
    // A ring of sends: each rank sends its result + rank to the next.
    Tensor message = makeTensor<float>(F32, {1}, {100.0f + rank});
    c->send(message, (rank + 1) % kRanks, 7);
    message.data_as<float>()[0] = -1; // the send took a copy
    Tensor received = Tensor::empty(F32, {1});
    c->recv(received, (rank + kRanks - 1) % kRanks, 7);
    EXPECT_EQ(received.data_as<float>()[0],
              100.0f + (rank + kRanks - 1) % kRanks);
  });
  for (int r = 0; r < kRanks; ++r)
    EXPECT_EQ(valuesOf<float>(got[r]), (std::vector<float>{6, 8, -6}));
}

TEST(SharedDeviceCollectives, AMemberThatNeverArrivesIsNamed) {
  // A group of its own: its call counts are not shared with other tests.
  auto c = makeSharedDeviceCommunicator(100, cpuDevice(),
                                        std::chrono::milliseconds(200));
  Tensor out = Tensor::empty(F32, {2});
  auto start = std::chrono::steady_clock::now();
  expectRuntimeError(
      [&] {
        c->all_reduce(makeTensor<float>(F32, {2}, {1, 2}), out, {100, 101},
                      ReduceOp::Sum);
      },
      {"all_reduce", "rank 100", "ranks 101", "did not arrive"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// ---- which path a group takes
// -------------------------------------------------

TEST(SharedDeviceCollectives, PathFromHostsProcessesAndOrdinals) {
  // Host a: process p (ranks 0-3) on GPUs 0,0,1,1; process q (ranks 4-5) on
  // GPU 0. Host b: ranks 6-7 on GPUs 0 and 1.
  std::vector<MemberPlacement> placed = {
      {"a", "p", 0}, {"a", "p", 0}, {"a", "p", 1}, {"a", "p", 1},
      {"a", "q", 0}, {"a", "q", 0}, {"b", "r", 0}, {"b", "r", 1}};
  auto pathOf = [&](const Group &g) {
    return collectivePathOf(g, [&](int64_t r) { return placed[r]; });
  };
  EXPECT_EQ(pathOf({0, 1}), CollectivePath::SharedDevice);
  EXPECT_EQ(pathOf({3, 2}), CollectivePath::SharedDevice);
  EXPECT_EQ(pathOf({5}), CollectivePath::SharedDevice);
  // One GPU each, on one host or across hosts: the device communicator.
  EXPECT_EQ(pathOf({0, 2}), CollectivePath::DeviceCommunicator);
  EXPECT_EQ(pathOf({0, 2, 6, 7}), CollectivePath::DeviceCommunicator);
  // GPU 0 of host a in two processes: device ipc (IpcDeviceCollectives.h).
  EXPECT_EQ(pathOf({0, 4}), CollectivePath::CrossProcessDevice);
  EXPECT_EQ(pathOf({0, 1, 4}), CollectivePath::CrossProcessDevice);
  // Two members on one GPU among others on their own: the host.
  EXPECT_EQ(pathOf({0, 1, 2}), CollectivePath::Host);
  EXPECT_STREQ(collectivePathName(CollectivePath::SharedDevice),
               "device copies");
}

// Counts the all_reduces it is given; the result is the input.
class CountingComm final : public Communicator {
public:
  int rank() const override { return 0; }
  void all_reduce(const Tensor &x, Tensor &out, const Group &,
                  ReduceOp) override {
    ++calls;
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
  void send(const Tensor &, int64_t, int64_t) override { ++calls; }
  void recv(Tensor &, int64_t, int64_t) override { ++calls; }
  int calls = 0;
};

TEST(SharedDeviceCollectives, TheRouterSendsEachGroupAlongItsPath) {
  auto device = std::make_unique<CountingComm>();
  auto shared = std::make_unique<CountingComm>();
  CountingComm host;
  CountingComm &deviceRef = *device, &sharedRef = *shared;
  auto pathOf = [](const Group &g) {
    if (g.size() == 1)
      return CollectivePath::SharedDevice;
    return g[1] == 1 ? CollectivePath::DeviceCommunicator
                     : CollectivePath::Host;
  };
  DeviceCollectiveRouter router(0, pathOf, std::move(device), std::move(shared),
                                &host);
  Tensor x = makeTensor<float>(F32, {2}, {1, 2});
  Tensor out = Tensor::empty(F32, {2});
  router.all_reduce(x, out, {0}, ReduceOp::Sum);
  router.all_reduce(x, out, {0, 1}, ReduceOp::Sum);
  router.all_reduce(x, out, {0, 2}, ReduceOp::Sum);
  router.send(x, 1, 0);
  router.send(x, 2, 0);
  EXPECT_EQ(sharedRef.calls, 1);
  EXPECT_EQ(deviceRef.calls, 2);
  EXPECT_EQ(host.calls, 2);
  EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{1, 2}));
  // Without a device communicator its groups go through the host.
  DeviceCollectiveRouter noDevice(0, pathOf, nullptr, nullptr, &host);
  noDevice.all_reduce(x, out, {0, 1}, ReduceOp::Sum);
  EXPECT_EQ(host.calls, 3);
}

} // namespace
} // namespace dtorch::rt::test
