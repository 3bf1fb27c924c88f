// The Gloo communicator (4 ranks as threads of this process, connected over
// loopback TCP) against reference values computed in the test, and against
// the fake and shared-memory backends bit for bit, on every collective and
// every dtype. ClusterTest runs Gloo between worker processes as well.
#include "CollectiveReference.h"
#include "TestSupport.h"

#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/InMemoryKeyValueStore.h"
#include "dtorch/runtime/SharedMemoryCollectives.h"

#include <condition_variable>
#include <map>
#include <mutex>

namespace dtorch::rt::test {
namespace {

constexpr int kWorld = 4;

// One Gloo communicator per rank, connected concurrently.
std::vector<std::unique_ptr<Communicator>> connectWorld() {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  std::vector<std::unique_ptr<Communicator>> comms(kWorld);
  GlooOptions options;
  options.deadline = std::chrono::seconds(20);
  runRanks(kWorld, [&](int rank) {
    comms[rank] = connectGloo(rank, kWorld, store, options);
  });
  return comms;
}

using Body = std::function<std::vector<Tensor>(Communicator &, int)>;

std::vector<std::vector<Tensor>>
runOn(const std::vector<std::unique_ptr<Communicator>> &comms,
      const Body &body) {
  std::vector<std::vector<Tensor>> results(kWorld);
  runRanks(kWorld, [&](int rank) { results[rank] = body(*comms[rank], rank); });
  return results;
}

void expectSameResults(const std::vector<std::vector<Tensor>> &expected,
                       const std::vector<std::vector<Tensor>> &actual,
                       const std::string &what) {
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_EQ(expected[rank].size(), actual[rank].size()) << what;
    for (size_t i = 0; i < expected[rank].size(); ++i)
      expectSameBits(actual[rank][i], expected[rank][i],
                     what + ", rank " + std::to_string(rank) + " result " +
                         std::to_string(i));
  }
}

TEST(GlooCollectives, EveryCollectiveOnEveryDtypeMatchesFakeAndSharedMemory) {
  auto gloo = connectWorld();
  FakeCollectiveHub fakeHub(kWorld, std::chrono::seconds(10));
  SharedMemoryHub shmHub({0, 1, 2, 3}, kWorld, std::chrono::seconds(10));
  std::vector<std::unique_ptr<Communicator>> fake, shm;
  for (int rank = 0; rank < kWorld; ++rank) {
    fake.push_back(fakeHub.communicator(rank));
    shm.push_back(shmHub.communicator(rank));
  }
  for (DType dtype : everyDtype()) {
    Body body = [dtype](Communicator &comm, int rank) {
      return runEveryCollective(comm, rank, dtype);
    };
    auto expected = runOn(fake, body);
    expectSameResults(expected, runOn(gloo, body),
                      std::string("gloo vs fake, ") + dtypeName(dtype));
    expectSameResults(expected, runOn(shm, body),
                      std::string("shared memory vs fake, ") +
                          dtypeName(dtype));
  }
}

// Large all_reduce and reduce_scatter (many blocks per chunk), in place and
// not, on every dtype and reduction.
TEST(GlooCollectives, LargeReductionsMatchTheReference) {
  auto gloo = connectWorld();
  for (DType dtype : everyDtype())
    for (ReduceOp op : reductionsOf(dtype)) {
      std::string what = std::string(dtypeName(dtype)) + " " + reduceOpName(op);
      runOn(gloo, [&](Communicator &comm, int rank) {
        const Group group = {1, 0, 3, 2};
        const int64_t n = 50021;
        std::vector<Tensor> inputs;
        for (int64_t member : group)
          inputs.push_back(sampleTensor(dtype, {n}, 7 * member + 3));
        Tensor expected = referenceReduce(inputs, op);
        Tensor x = sampleTensor(dtype, {n}, 7 * rank + 3);
        Tensor out = Tensor::empty(dtype, {n});
        comm.all_reduce(x, out, group, op);
        expectSameBits(out, expected, what + " all_reduce");
        comm.all_reduce(x, x, group, op); // in place
        expectSameBits(x, expected, what + " in-place all_reduce");
        const std::vector<int64_t> sizes = {20000, 1, 0, 30020};
        const std::vector<int64_t> offsets = {0, 20000, 20001, 20001};
        size_t me = groupIndexOf(group, rank);
        Tensor whole = sampleTensor(dtype, {n}, 7 * rank + 3);
        Tensor piece = Tensor::empty(dtype, {sizes[me]});
        comm.reduce_scatter(whole, piece, group, op, 0, sizes);
        expectSameBits(piece, sliceAlong(expected, 0, offsets[me], sizes[me]),
                       what + " reduce_scatter");
        return std::vector<Tensor>{};
      });
    }
}

} // namespace
} // namespace dtorch::rt::test
