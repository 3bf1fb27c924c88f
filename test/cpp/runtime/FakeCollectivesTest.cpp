// Every collective on the in-process backend with 4 ranks, including uneven
// sizes, empty pieces, subgroups, every dtype and deadlines.
#include "CollectiveReference.h"
#include "TestSupport.h"

#include "dtorch/runtime/FakeCollectives.h"

#include <atomic>
#include <chrono>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::F32;
using ::dtorch::wire::F64;
using ::dtorch::wire::I64;

const Group kWorld = {0, 1, 2, 3};
constexpr int kRanks = 4;

// Runs fn(rank, communicator) on 4 threads sharing one hub.
void onFourRanks(const std::function<void(int, Communicator &)> &fn,
                 std::chrono::milliseconds deadline = std::chrono::seconds(5)) {
  FakeCollectiveHub hub(kRanks, deadline);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int rank = 0; rank < kRanks; ++rank)
    comms.push_back(hub.communicator(rank));
  runRanks(kRanks, [&](int rank) {
    EXPECT_EQ(comms[rank]->rank(), rank);
    fn(rank, *comms[rank]);
  });
}

template <class T> void checkAllReduce(DType dtype) {
  onFourRanks([dtype](int rank, Communicator &comm) {
    // x_r = (r, 10 - r, 2r)
    Tensor x = makeTensor<T>(dtype, {3}, {T(rank), T(10 - rank), T(2 * rank)});
    Tensor out = Tensor::empty(dtype, {3});
    comm.all_reduce(x, out, kWorld, ReduceOp::Sum);
    EXPECT_EQ(valuesOf<T>(out), (std::vector<T>{6, 34, 12}));
    comm.all_reduce(x, out, kWorld, ReduceOp::Max);
    EXPECT_EQ(valuesOf<T>(out), (std::vector<T>{3, 10, 6}));
    comm.all_reduce(x, out, kWorld, ReduceOp::Min);
    EXPECT_EQ(valuesOf<T>(out), (std::vector<T>{0, 7, 0}));
    if constexpr (std::is_integral_v<T>) {
      expectRuntimeError(
          [&] { comm.all_reduce(x, out, kWorld, ReduceOp::Avg); },
          {"reduction 'avg' is not defined for int64"});
    } else {
      comm.all_reduce(x, out, kWorld, ReduceOp::Avg);
      EXPECT_EQ(valuesOf<T>(out), (std::vector<T>{1.5, 8.5, 3}));
    }
    EXPECT_EQ(valuesOf<T>(x),
              (std::vector<T>{T(rank), T(10 - rank), T(2 * rank)}));
  });
}

TEST(FakeCollectives, AllReduceEveryOpAndDtype) {
  checkAllReduce<float>(F32);
  checkAllReduce<double>(F64);
  checkAllReduce<int64_t>(I64);
}

TEST(FakeCollectives, EveryCollectiveOnEveryDtype) {
  for (DType dtype : everyDtype())
    onFourRanks([dtype](int rank, Communicator &comm) {
      std::vector<Tensor> results = runEveryCollective(comm, rank, dtype);
      EXPECT_GE(results.size(), 19u); // rank 0, an integer dtype: the fewest
    });
}

// One element per rank, reduced over the 4 ranks in rank order.
template <class T>
Tensor reduceOneElement(DType dtype, const std::vector<T> &perRank,
                        ReduceOp op) {
  std::vector<Tensor> outs(kRanks);
  onFourRanks([&](int rank, Communicator &comm) {
    Tensor x = makeTensor<T>(dtype, {1}, {perRank[rank]});
    outs[rank] = Tensor::empty(dtype, {1});
    comm.all_reduce(x, outs[rank], kWorld, op);
  });
  for (int rank = 1; rank < kRanks; ++rank)
    EXPECT_TRUE(sameBits(outs[rank], outs[0])) << "rank " << rank;
  return outs[0];
}

template <class H> float reducedValue(const Tensor &t) {
  return static_cast<float>(t.data_as<H>()[0]);
}

// 16-bit sums accumulate in float32 and round once: 2048 + 1 + 1 + 1 is 2051,
// which rounds (to even) to 2052 in float16; rounding after every step would
// stay at 2048. The same with 256 in bfloat16 (260, not 256).
TEST(FakeCollectives, SixteenBitSumAndAverageRoundOnce) {
  using ::dtorch::wire::BF16;
  using ::dtorch::wire::F16;
  std::vector<Half> halves = {Half(2048.f), Half(1.f), Half(1.f), Half(1.f)};
  EXPECT_EQ(reducedValue<Half>(reduceOneElement(F16, halves, ReduceOp::Sum)),
            2052.f);
  // 2051 / 4 = 512.75, halfway between float16 neighbours 512.5 and 513.
  EXPECT_EQ(reducedValue<Half>(reduceOneElement(F16, halves, ReduceOp::Avg)),
            513.f);
  std::vector<BFloat16> brains = {BFloat16(256.f), BFloat16(1.f), BFloat16(1.f),
                                  BFloat16(1.f)};
  EXPECT_EQ(
      reducedValue<BFloat16>(reduceOneElement(BF16, brains, ReduceOp::Sum)),
      260.f);
  // 259 / 4 = 64.75, halfway between bfloat16 neighbours 64.5 and 65.
  EXPECT_EQ(
      reducedValue<BFloat16>(reduceOneElement(BF16, brains, ReduceOp::Avg)),
      65.f);
  // max and min keep the winner's bits.
  std::vector<Half> mixed = {Half(-0.f), Half(3.5f), Half(-7.f), Half(0.25f)};
  EXPECT_EQ(reduceOneElement(F16, mixed, ReduceOp::Max).data_as<Half>()[0].bits,
            Half(3.5f).bits);
  EXPECT_EQ(reduceOneElement(F16, mixed, ReduceOp::Min).data_as<Half>()[0].bits,
            Half(-7.f).bits);
}

TEST(FakeCollectives, MaxAndMinPropagateNaN) {
  using ::dtorch::wire::BF16;
  using ::dtorch::wire::F16;
  float nan = std::numeric_limits<float>::quiet_NaN();
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum}) {
    EXPECT_TRUE(std::isnan(valuesOf<float>(
        reduceOneElement<float>(F32, {1.f, nan, 5.f, -2.f}, op))[0]));
    EXPECT_TRUE(std::isnan(reducedValue<Half>(reduceOneElement<Half>(
        F16, {Half(1.f), Half(2.f), Half(nan), Half(-2.f)}, op))));
    EXPECT_TRUE(std::isnan(reducedValue<BFloat16>(reduceOneElement<BFloat16>(
        BF16, {BFloat16(nan), BFloat16(2.f), BFloat16(3.f), BFloat16(4.f)},
        op))));
  }
}

// bool: sum and max are or, min is and; avg is rejected.
TEST(FakeCollectives, BoolReductionsAreOrAndAnd) {
  using ::dtorch::wire::BOOL;
  auto reduced = [](std::vector<bool> perRank, ReduceOp op) {
    std::vector<uint8_t> bytes(perRank.begin(), perRank.end());
    return valuesOf<uint8_t>(reduceOneElement<uint8_t>(BOOL, bytes, op))[0];
  };
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    EXPECT_EQ(reduced({false, false, true, false}, op), 1);
    EXPECT_EQ(reduced({true, true, true, true}, op), 1);
    EXPECT_EQ(reduced({false, false, false, false}, op), 0);
  }
  EXPECT_EQ(reduced({true, true, false, true}, ReduceOp::Min), 0);
  EXPECT_EQ(reduced({true, true, true, true}, ReduceOp::Min), 1);
  onFourRanks([](int, Communicator &comm) {
    Tensor x = Tensor::empty(BOOL, {2}), out = Tensor::empty(BOOL, {2});
    expectRuntimeError([&] { comm.all_reduce(x, out, kWorld, ReduceOp::Avg); },
                       {"reduction 'avg' is not defined for bool"});
    Tensor whole = Tensor::empty(BOOL, {4});
    Tensor piece = Tensor::empty(BOOL, {1});
    expectRuntimeError(
        [&] {
          comm.reduce_scatter(whole, piece, kWorld, ReduceOp::Avg, 0,
                              {1, 1, 1, 1});
        },
        {"reduction 'avg' is not defined for bool"});
  });
}

// Integer sums wrap around (two's complement), in int32 and int64.
TEST(FakeCollectives, IntegerSumsWrapAround) {
  using ::dtorch::wire::I32;
  int32_t big = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(valuesOf<int32_t>(reduceOneElement<int32_t>(I32, {big, 1, 0, 2},
                                                        ReduceOp::Sum))[0],
            std::numeric_limits<int32_t>::min() + 2);
  int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(valuesOf<int64_t>(reduceOneElement<int64_t>(I64, {1, huge, 0, 0},
                                                        ReduceOp::Sum))[0],
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(valuesOf<int32_t>(reduceOneElement<int32_t>(I32, {-5, 9, 3, -8},
                                                        ReduceOp::Max))[0],
            9);
  EXPECT_EQ(valuesOf<int32_t>(reduceOneElement<int32_t>(I32, {-5, 9, 3, -8},
                                                        ReduceOp::Min))[0],
            -8);
}

TEST(FakeCollectives, AllReduceEmptyTensor) {
  onFourRanks([](int, Communicator &comm) {
    Tensor x = Tensor::empty(F32, {0, 3});
    Tensor out = Tensor::empty(F32, {0, 3});
    comm.all_reduce(x, out, kWorld, ReduceOp::Sum);
    EXPECT_EQ(out.numel(), 0);
  });
}

// value encoding (rank, i, j) for pieces.
int64_t code(int64_t rank, int64_t i, int64_t j) {
  return rank * 100 + i * 10 + j;
}

TEST(FakeCollectives, AllGatherUnevenWithEmptyPieceAlongDim1) {
  const std::vector<int64_t> sizes = {2, 0, 3, 1};
  onFourRanks([&](int rank, Communicator &comm) {
    int64_t mine = sizes[rank];
    Tensor x = Tensor::empty(I64, {2, mine});
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < mine; ++j)
        x.data_as<int64_t>()[i * mine + j] = code(rank, i, j);
    Tensor out = Tensor::empty(I64, {2, 6});
    comm.all_gather(x, out, kWorld, 1, sizes);
    std::vector<int64_t> want;
    for (int64_t i = 0; i < 2; ++i)
      for (int r = 0; r < kRanks; ++r)
        for (int64_t j = 0; j < sizes[r]; ++j)
          want.push_back(code(r, i, j));
    EXPECT_EQ(valuesOf<int64_t>(out), want);
  });
}

TEST(FakeCollectives, AllGatherAlongDim0) {
  const std::vector<int64_t> sizes = {1, 2, 0, 1};
  onFourRanks([&](int rank, Communicator &comm) {
    std::vector<float> mine;
    for (int64_t i = 0; i < sizes[rank]; ++i)
      mine.push_back(float(rank * 10 + i));
    Tensor x = makeTensor<float>(F32, {sizes[rank]}, mine);
    Tensor out = Tensor::empty(F32, {4});
    comm.all_gather(x, out, kWorld, 0, sizes);
    EXPECT_EQ(valuesOf<float>(out), (std::vector<float>{0, 10, 11, 30}));
  });
}

TEST(FakeCollectives, ReduceScatterUnevenWithEmptyPiece) {
  const std::vector<int64_t> sizes = {1, 0, 2, 3};
  const std::vector<int64_t> offsets = {0, 1, 1, 3};
  onFourRanks([&](int rank, Communicator &comm) {
    Tensor x = Tensor::empty(I64, {6, 2});
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 2; ++j)
        x.data_as<int64_t>()[i * 2 + j] = code(rank, i, j);
    Tensor out = Tensor::empty(I64, {sizes[rank], 2});
    comm.reduce_scatter(x, out, kWorld, ReduceOp::Sum, 0, sizes);
    std::vector<int64_t> want;
    for (int64_t i = 0; i < sizes[rank]; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        int64_t total = 0;
        for (int r = 0; r < kRanks; ++r)
          total += code(r, offsets[rank] + i, j);
        want.push_back(total);
      }
    EXPECT_EQ(valuesOf<int64_t>(out), want);
    // max along dim 1 with an even split.
    Tensor half = Tensor::empty(I64, {6, 1});
    Group pair = {rank % 2, rank % 2 + 2}; // groups {0,2} and {1,3}
    comm.reduce_scatter(x, half, pair, ReduceOp::Max, 1, {1, 1});
    int64_t column = rank < 2 ? 0 : 1;
    for (int64_t i = 0; i < 6; ++i)
      EXPECT_EQ(half.data_as<int64_t>()[i], code(pair[1], i, column));
  });
}

TEST(FakeCollectives, ReduceScatterAverageFloat) {
  onFourRanks([](int rank, Communicator &comm) {
    Tensor x = makeTensor<double>(F64, {4}, {double(rank), 1, 2, 3});
    Tensor out = Tensor::empty(F64, {1});
    comm.reduce_scatter(x, out, kWorld, ReduceOp::Avg, 0, {1, 1, 1, 1});
    std::vector<double> want = {1.5, 1, 2, 3};
    EXPECT_EQ(valuesOf<double>(out)[0], want[rank]);
  });
}

TEST(FakeCollectives, AllToAllUnevenWithEmptyPieces) {
  // Split rows (dim 0), gather columns (dim 1). Rank r owns x_r of shape
  // [sum(split), concat[r]]; it receives rows [splitOffset[r], +split[r]) of
  // everyone, concatenated along columns.
  const std::vector<int64_t> split = {1, 0, 2, 1};
  const std::vector<int64_t> splitOffsets = {0, 1, 1, 3};
  const std::vector<int64_t> concat = {2, 1, 0, 3};
  onFourRanks([&](int rank, Communicator &comm) {
    int64_t cols = concat[rank];
    Tensor x = Tensor::empty(I64, {4, cols});
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < cols; ++j)
        x.data_as<int64_t>()[i * cols + j] = code(rank, i, j);
    Tensor out = Tensor::empty(I64, {split[rank], 6});
    comm.all_to_all(x, out, kWorld, 0, split, 1, concat);
    std::vector<int64_t> want;
    for (int64_t i = 0; i < split[rank]; ++i)
      for (int r = 0; r < kRanks; ++r)
        for (int64_t j = 0; j < concat[r]; ++j)
          want.push_back(code(r, splitOffsets[rank] + i, j));
    EXPECT_EQ(valuesOf<int64_t>(out), want);
  });
}

TEST(FakeCollectives, AllToAllSameDimIsATranspose) {
  onFourRanks([](int rank, Communicator &comm) {
    std::vector<float> row;
    for (int j = 0; j < 4; ++j)
      row.push_back(float(rank * 4 + j));
    Tensor x = makeTensor<float>(F32, {4}, row);
    Tensor out = Tensor::empty(F32, {4});
    comm.all_to_all(x, out, kWorld, 0, {1, 1, 1, 1}, 0, {1, 1, 1, 1});
    std::vector<float> want;
    for (int r = 0; r < kRanks; ++r)
      want.push_back(float(r * 4 + rank));
    EXPECT_EQ(valuesOf<float>(out), want);
  });
}

TEST(FakeCollectives, BroadcastFromNonZeroRoot) {
  onFourRanks([](int rank, Communicator &comm) {
    Tensor x =
        rank == 2 ? makeTensor<double>(F64, {2, 2}, {1, 2, 3, 4}) : Tensor();
    Tensor out = Tensor::empty(F64, {2, 2});
    comm.broadcast(x, out, kWorld, 2);
    EXPECT_EQ(valuesOf<double>(out), (std::vector<double>{1, 2, 3, 4}));
  });
}

TEST(FakeCollectives, SendRecvRingAndOrderPerTag) {
  onFourRanks([](int rank, Communicator &comm) {
    int next = (rank + 1) % kRanks, previous = (rank + kRanks - 1) % kRanks;
    comm.send(makeTensor<int64_t>(I64, {2}, {rank, 1}), next, 5);
    comm.send(makeTensor<int64_t>(I64, {2}, {rank, 2}), next, 5);
    comm.send(makeTensor<int64_t>(I64, {1}, {rank * 7}), next, 9);
    Tensor tagged = Tensor::empty(I64, {1});
    comm.recv(tagged, previous, 9); // tags are matched independently
    EXPECT_EQ(valuesOf<int64_t>(tagged), (std::vector<int64_t>{previous * 7}));
    Tensor first = Tensor::empty(I64, {2}), second = Tensor::empty(I64, {2});
    comm.recv(first, previous, 5);
    comm.recv(second, previous, 5);
    EXPECT_EQ(valuesOf<int64_t>(first), (std::vector<int64_t>{previous, 1}));
    EXPECT_EQ(valuesOf<int64_t>(second), (std::vector<int64_t>{previous, 2}));
    Tensor empty = Tensor::empty(F32, {0});
    comm.send(empty, next, 6);
    Tensor received = Tensor::empty(F32, {0});
    comm.recv(received, previous, 6);
  });
}

TEST(FakeCollectives, ManySequentialCallsAndDisjointSubgroups) {
  onFourRanks([](int rank, Communicator &comm) {
    Group mine = rank % 2 == 0 ? Group{0, 2} : Group{3, 1};
    for (int step = 0; step < 50; ++step) {
      Tensor x = makeTensor<int64_t>(I64, {1}, {rank + step});
      Tensor out = Tensor::empty(I64, {1});
      comm.all_reduce(x, out, mine, ReduceOp::Sum);
      EXPECT_EQ(out.data_as<int64_t>()[0], mine[0] + mine[1] + 2 * step);
      comm.all_reduce(x, out, kWorld, ReduceOp::Max);
      EXPECT_EQ(out.data_as<int64_t>()[0], 3 + step);
    }
  });
}

TEST(FakeCollectives, DeadlineNamesTheMissingRank) {
  using namespace std::chrono;
  FakeCollectiveHub hub(kRanks, milliseconds(200));
  std::atomic<int> failures{0};
  auto start = steady_clock::now();
  runRanks(kRanks, [&](int rank) {
    if (rank == 3)
      return; // never arrives
    auto comm = hub.communicator(rank);
    Tensor x = Tensor::empty(F32, {2});
    Tensor out = Tensor::empty(F32, {2});
    expectRuntimeError(
        [&] { comm->all_reduce(x, out, kWorld, ReduceOp::Sum); },
        {"all_reduce", "group [0, 1, 2, 3]", "rank(s) 3", "200 ms"});
    ++failures;
  });
  EXPECT_EQ(failures.load(), 3);
  EXPECT_LT(duration_cast<milliseconds>(steady_clock::now() - start).count(),
            3000);
}

TEST(FakeCollectives, DeadlineNamesSeveralMissingRanks) {
  FakeCollectiveHub hub(kRanks, std::chrono::milliseconds(200));
  runRanks(2, [&](int rank) {
    auto comm = hub.communicator(rank);
    Tensor x = Tensor::empty(F32, {1});
    Tensor out = Tensor::empty(F32, {4});
    expectRuntimeError(
        [&] { comm->all_gather(x, out, kWorld, 0, {1, 1, 1, 1}); },
        {"rank(s) 2, 3"});
  });
}

TEST(FakeCollectives, RecvDeadlineNamesThePeer) {
  FakeCollectiveHub hub(kRanks, std::chrono::milliseconds(200));
  auto comm = hub.communicator(0);
  Tensor out = Tensor::empty(F32, {1});
  expectRuntimeError([&] { comm->recv(out, 2, 0); }, {"recv", "rank(s) 2"});
}

TEST(FakeCollectives, MismatchedCollectivesFail) {
  FakeCollectiveHub hub(2, std::chrono::seconds(5));
  runRanks(2, [&](int rank) {
    auto comm = hub.communicator(rank);
    Tensor x = Tensor::empty(F32, {2});
    Tensor out = Tensor::empty(F32, {2});
    Tensor gathered = Tensor::empty(F32, {4});
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      expectRuntimeError(
          [&] { comm->all_reduce(x, out, {0, 1}, ReduceOp::Sum); },
          {"members disagree"});
    } else {
      expectRuntimeError(
          [&] { comm->all_gather(x, gathered, {0, 1}, 0, {2, 2}); },
          {"members disagree"});
    }
  });
}

TEST(FakeCollectives, RejectsBadArguments) {
  FakeCollectiveHub hub(kRanks);
  auto comm = hub.communicator(1);
  Tensor x = Tensor::empty(F32, {2});
  Tensor out = Tensor::empty(F32, {3});
  expectRuntimeError([&] { comm->all_reduce(x, out, kWorld, ReduceOp::Sum); },
                     {"all_reduce output"});
  expectRuntimeError([&] { comm->all_reduce(x, x, {0, 2}, ReduceOp::Sum); },
                     {"rank 1 is not in collective group [0, 2]"});
  expectRuntimeError([&] { comm->send(x, 9, 0); }, {"outside the world"});
  EXPECT_THROW(hub.communicator(4), RuntimeError);
}

} // namespace
} // namespace dtorch::rt::test
