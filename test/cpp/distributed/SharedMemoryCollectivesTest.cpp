// The shared-memory communicator against FakeCollectiveHub (the oracle) and
// against reference values computed in the test, on every collective and
// every dtype, uneven and empty pieces included.
#include "CollectiveReference.h"
#include "TestSupport.h"

#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/Shape.h"
#include "dtorch/runtime/SharedMemoryCollectives.h"

#include <cstring>
#include <random>

namespace dtorch::rt::test {
namespace {

Tensor randomTensor(DType dtype, std::vector<int64_t> shape, unsigned seed) {
  return sampleTensor(dtype, shape, seed);
}

// Runs `body(comm, rank)` on 4 threads with both backends and compares what
// each rank's body returns.
void compareBackends(
    const std::function<std::vector<Tensor>(Communicator &, int)> &body) {
  const int world = 4;
  FakeCollectiveHub fake(world, std::chrono::seconds(5));
  SharedMemoryHub shm({0, 1, 2, 3}, world, std::chrono::seconds(5));
  std::vector<std::vector<Tensor>> expected(world), actual(world);
  runRanks(world, [&](int rank) {
    expected[rank] = body(*fake.communicator(rank), rank);
  });
  runRanks(world, [&](int rank) {
    actual[rank] = body(*shm.communicator(rank), rank);
  });
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(expected[rank].size(), actual[rank].size());
    for (size_t i = 0; i < expected[rank].size(); ++i)
      EXPECT_TRUE(sameBits(expected[rank][i], actual[rank][i]))
          << "rank " << rank << " result " << i;
  }
}

TEST(SharedMemoryCollectives, EveryCollectiveOnEveryDtype) {
  for (DType dtype : everyDtype())
    compareBackends([&](Communicator &comm, int rank) {
      return runEveryCollective(comm, rank, dtype);
    });
}

TEST(SharedMemoryCollectives, AllReduceEveryOp) {
  for (DType dtype : everyDtype())
    for (ReduceOp op : reductionsOf(dtype))
      compareBackends([&](Communicator &comm, int rank) {
        std::vector<Tensor> results;
        for (int64_t n : {0, 1, 3, 1027, 20011}) {
          Tensor x = randomTensor(dtype, {n}, 17 * rank + n);
          Tensor out = Tensor::empty(dtype, {n});
          comm.all_reduce(x, out, {0, 1, 2, 3}, op);
          results.push_back(out);
        }
        if (rank == 1 || rank == 3) { // a sub-group, not in rank order
          Tensor x = randomTensor(dtype, {2, 3}, rank),
                 out = Tensor::empty(dtype, {2, 3});
          comm.all_reduce(x, out, {3, 1}, op);
          results.push_back(out);
        }
        return results;
      });
}

TEST(SharedMemoryCollectives, GatherScatterAllToAllBroadcastUneven) {
  for (DType dtype : everyDtype())
    compareBackends([&](Communicator &comm, int rank) {
      std::vector<Tensor> results;
      Group g{0, 1, 2, 3};
      std::vector<int64_t> sizes{2, 0, 1, 3};
      for (int64_t dim : {0, 1}) {
        Shape shape{3, 3};
        shape[dim] = sizes[rank];
        Tensor x = randomTensor(dtype, shape, rank + 5);
        Shape outShape{3, 3};
        outShape[dim] = 6;
        Tensor out = Tensor::empty(dtype, outShape);
        comm.all_gather(x, out, g, dim, sizes);
        results.push_back(out);
        Tensor whole = randomTensor(dtype, outShape, rank + 9);
        for (ReduceOp op : reductionsOf(dtype)) {
          Tensor piece = Tensor::empty(dtype, shape);
          comm.reduce_scatter(whole, piece, g, op, dim, sizes);
          results.push_back(piece);
        }
      }
      // all_to_all: rank r sends (j + r) % 3 rows to member j, concatenated
      // along dim 1.
      std::vector<int64_t> split, concat;
      for (int j = 0; j < 4; ++j)
        split.push_back((j + rank) % 3);
      for (int j = 0; j < 4; ++j)
        concat.push_back((rank + j) % 3);
      int64_t rows = 0, cols = 0;
      for (int j = 0; j < 4; ++j)
        rows += split[j];
      for (int j = 0; j < 4; ++j)
        cols += concat[j];
      // Pieces keep the split dim (0) extent split[j] from sender; we need
      // equal extents elsewhere, so split along dim 0 and concatenate along dim
      // 0.
      Tensor x = randomTensor(dtype, {rows, 2}, rank + 11);
      Tensor out = Tensor::empty(dtype, {cols, 2});
      comm.all_to_all(x, out, g, 0, split, 0, concat);
      results.push_back(out);
      Tensor b = rank == 2 ? randomTensor(dtype, {4}, 3) : Tensor();
      Tensor bout = Tensor::empty(dtype, {4});
      if (rank != 0)
        comm.broadcast(b, bout, {1, 2, 3}, 2);
      else
        std::memset(bout.data(), 0, bout.nbytes());
      results.push_back(bout);
      if (rank == 1)
        comm.send(randomTensor(dtype, {3}, 1), 2, 7);
      if (rank == 2) {
        Tensor got = Tensor::empty(dtype, {3});
        comm.recv(got, 1, 7);
        results.push_back(got);
      }
      return results;
    });
}

// The output may be the input itself (one buffer): each rank reduces its
// chunk while the others still read theirs from the same memory.
TEST(SharedMemoryCollectives, AllReduceInPlace) {
  for (DType dtype : everyDtype())
    for (ReduceOp op : reductionsOf(dtype))
      compareBackends([&](Communicator &comm, int rank) {
        const Group group = {3, 1, 0, 2};
        Tensor x = randomTensor(dtype, {20011}, 3 * rank + 1);
        comm.all_reduce(x, x, group, op);
        std::vector<Tensor> inputs;
        for (int64_t member : group)
          inputs.push_back(randomTensor(dtype, {20011}, 3 * member + 1));
        expectSameBits(x, referenceReduce(inputs, op),
                       std::string("in-place all_reduce of ") +
                           dtypeName(dtype) + " " + reduceOpName(op));
        return std::vector<Tensor>{x};
      });
}

TEST(SharedMemoryCollectives, MissingPeerIsNamed) {
  SharedMemoryHub shm({0, 1, 2}, 3, std::chrono::milliseconds(200));
  runRanks(2, [&](int rank) {
    auto comm = shm.communicator(rank);
    Tensor x = Tensor::empty(::dtorch::wire::F32, {2}),
           out = Tensor::empty(::dtorch::wire::F32, {2});
    expectRuntimeError(
        [&] { comm->all_reduce(x, out, {0, 1, 2}, ReduceOp::Sum); },
        {"timed out", "rank(s) 2"});
  });
}

} // namespace
} // namespace dtorch::rt::test
