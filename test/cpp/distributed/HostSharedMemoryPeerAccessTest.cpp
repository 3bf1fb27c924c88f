// all_reduce through peer access (the members read each other's inputs and
// write into each other's outputs, in place in their shared arenas or with
// process_vm_readv/writev): every dtype and reduction bit for bit against
// the reference on 2 and 4 processes and on 2 processes of 2 rank threads,
// either way, sizes below, at and far above the chunk and not multiples of
// it, in place, interleaved with the staged collectives on the same group;
// one member's buffers outside its arena (system calls, or the rounds when
// those are off); the staged path forced by $DTORCH_HOSTSHM_PEER_ACCESS=0 in
// one member only; a dead or missing peer named; the arena itself.
#include "CollectiveReference.h"
#include "HostSharedMemoryTestSupport.h"
#include "TestSupport.h"

#include "dtorch/runtime/Allocator.h"
#include "dtorch/runtime/HostSharedMemoryCollectives.h"
#include "dtorch/runtime/SharedHostArena.h"

namespace dtorch::rt::test {
namespace {

// How a member reaches the others' buffers: its tensors in its shared arena
// (mapped by the others), or with system calls.
enum class Reach { Arena, SystemCalls };

// Tensors of more than 32 KiB (blocks of at least 64 KiB: in the arena) or,
// by system calls, of more than 1 KiB go through peer access; chunks are 16
// KiB (the smallest the runtime cuts); from 256 KiB outputs are streamed.
// Call in the member's process before its first tensor.
HostSharedMemoryOptions
peerAccessOptions(Reach reach, std::chrono::milliseconds deadline = 20s) {
  HostSharedMemoryOptions options = smallChunks(deadline);
  options.peerAccessBytes = reach == Reach::Arena ? 32 << 10 : 1024;
  // The largest tensors of kCounts write with non-temporal stores.
  options.streamingBytes = 256 << 10;
  if (reach == Reach::Arena)
    EXPECT_TRUE(enableSharedHostArena(size_t(1) << 30));
  else
    options.crossMemoryAttach = true;
  return options;
}

// Elements: under the threshold (staged), one partial chunk, several chunks
// and a remainder, about 25 chunks of float32.
const std::vector<int64_t> kCounts = {100, 3001, 40961, 100003};

unsigned seedOf(int64_t rank, int64_t count, DType dtype) {
  return static_cast<unsigned>(17 * rank + count % 89 + 3 * dtype);
}

// Every reduction of every dtype in `dtypes` at every size of kCounts, out
// of place and in place; returns how many calls were above `threshold`
// bytes.
uint64_t allReduceEverywhere(Communicator &comm, int64_t rank,
                             const Group &group,
                             const std::vector<DType> &dtypes,
                             size_t threshold) {
  uint64_t large = 0;
  for (DType dtype : dtypes)
    for (ReduceOp op : reductionsOf(dtype))
      for (int64_t count : kCounts) {
        std::string what = std::string(dtypeName(dtype)) + " " +
                           reduceOpName(op) + " of " + std::to_string(count) +
                           " on rank " + std::to_string(rank);
        std::vector<Tensor> inputs;
        for (int64_t member : group)
          inputs.push_back(
              sampleTensor(dtype, {count}, seedOf(member, count, dtype)));
        Tensor expected = referenceReduce(inputs, op);
        Tensor x = sampleTensor(dtype, {count}, seedOf(rank, count, dtype));
        Tensor out = Tensor::empty(dtype, {count});
        comm.all_reduce(x, out, group, op);
        expectSameBits(out, expected, what);
        comm.all_reduce(x, x, group, op);
        expectSameBits(x, expected, what + " in place");
        if (x.nbytes() > threshold)
          large += 2;
      }
  return large;
}

void everyDtypeOnProcesses(int processes, const Group &group, Reach reach) {
  StoreDirectory dir;
  auto codes = runProcesses(
      processes,
      [&](int rank) {
        auto store = std::make_shared<FileKeyValueStore>(dir.path);
        HostSharedMemoryOptions options = peerAccessOptions(reach);
        auto comm = makeHostSharedMemoryCommunicator(rank, store, options);
        uint64_t large = allReduceEverywhere(*comm, rank, group, everyDtype(),
                                             options.peerAccessBytes);
        EXPECT_GT(large, 0u);
        EXPECT_EQ(comm->stats().peerAccessCalls, large);
      },
      120s);
  expectAllSucceeded(codes);
}

TEST(HostSharedMemoryPeerAccess, EveryDtypeOnTwoProcessesInTheArenas) {
  everyDtypeOnProcesses(2, {1, 0}, Reach::Arena);
}

TEST(HostSharedMemoryPeerAccess, EveryDtypeOnFourProcessesInTheArenas) {
  everyDtypeOnProcesses(4, {2, 0, 3, 1}, Reach::Arena);
}

TEST(HostSharedMemoryPeerAccess, EveryDtypeOnTwoProcessesBySystemCalls) {
  everyDtypeOnProcesses(2, {1, 0}, Reach::SystemCalls);
}

TEST(HostSharedMemoryPeerAccess, EveryDtypeOnFourProcessesBySystemCalls) {
  everyDtypeOnProcesses(4, {2, 0, 3, 1}, Reach::SystemCalls);
}

// Rank 0's tensors are in its arena, rank 1's are not: with system calls
// allowed the others reach rank 1 through them; without, the group takes
// the rounds for every call, with the same results.
TEST(HostSharedMemoryPeerAccess, OneMemberOutsideItsArena) {
  for (bool systemCalls : {true, false}) {
    StoreDirectory dir;
    auto codes = runProcesses(2, [&](int rank) {
      auto store = std::make_shared<FileKeyValueStore>(dir.path);
      HostSharedMemoryOptions options =
          peerAccessOptions(rank == 0 ? Reach::Arena : Reach::SystemCalls);
      options.crossMemoryAttach = systemCalls;
      options.peerAccessBytes = 32 << 10; // the same on both
      auto comm = makeHostSharedMemoryCommunicator(rank, store, options);
      uint64_t large = allReduceEverywhere(
          *comm, rank, {0, 1}, {::dtorch::wire::F32, ::dtorch::wire::I32},
          options.peerAccessBytes);
      EXPECT_GT(large, 0u);
      EXPECT_EQ(comm->stats().peerAccessCalls, systemCalls ? large : 0u);
    });
    expectAllSucceeded(codes);
  }
}

// Two rank threads in each of two processes: a member reaches the other
// rank of its process directly and the others through their arenas.
TEST(HostSharedMemoryPeerAccess, TwoProcessesOfTwoRanks) {
  StoreDirectory dir;
  auto codes = runProcesses(2, [&](int process) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    std::vector<std::unique_ptr<HostSharedMemoryCommunicator>> comms;
    for (int r = 0; r < 2; ++r)
      comms.push_back(makeHostSharedMemoryCommunicator(
          2 * process + r, store, peerAccessOptions(Reach::Arena)));
    runRanks(2, [&](int r) {
      int64_t rank = 2 * process + r;
      uint64_t large = allReduceEverywhere(
          *comms[r], rank, {3, 0, 2, 1},
          {::dtorch::wire::F32, ::dtorch::wire::BF16, ::dtorch::wire::I64},
          32 << 10);
      EXPECT_EQ(comms[r]->stats().peerAccessCalls, large);
    });
  });
  expectAllSucceeded(codes);
}

// Peer-access calls between staged collectives of the same group, over
// more rounds than the group has slots: every result right.
TEST(HostSharedMemoryPeerAccess, InterleavedWithStagedCollectives) {
  StoreDirectory dir;
  auto codes = runProcesses(3, [&](int rank) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(
        rank, store, peerAccessOptions(Reach::Arena));
    const Group group = {1, 2, 0};
    size_t me = groupIndexOf(group, rank);
    for (int step = 0; step < 6; ++step) {
      std::string when = "step " + std::to_string(step);
      int64_t large = 30011 + 1000 * step, small = 7 + step;
      for (int64_t count : {large, small}) {
        std::vector<Tensor> inputs;
        for (int64_t member : group)
          inputs.push_back(sampleTensor(::dtorch::wire::F32, {count},
                                        unsigned(member * 31 + step)));
        Tensor x = sampleTensor(::dtorch::wire::F32, {count},
                                unsigned(rank * 31 + step));
        Tensor out = Tensor::empty(::dtorch::wire::F32, {count});
        comm->all_reduce(x, out, group, ReduceOp::Sum);
        expectSameBits(out, referenceReduce(inputs, ReduceOp::Sum),
                       when + " all_reduce of " + std::to_string(count));
      }
      const std::vector<int64_t> widths = {3, 1000 + step, 5};
      Tensor mine = sampleTensor(::dtorch::wire::F64, {widths[me], 4},
                                 unsigned(rank + step));
      Tensor gathered =
          Tensor::empty(::dtorch::wire::F64, {1008 + int64_t(step), 4});
      comm->all_gather(mine, gathered, group, 0, widths);
      std::vector<Tensor> pieces;
      for (size_t j = 0; j < group.size(); ++j)
        pieces.push_back(sampleTensor(::dtorch::wire::F64, {widths[j], 4},
                                      unsigned(group[j] + step)));
      expectSameBits(gathered, concatAlong(pieces, 0), when + " all_gather");
      Tensor whole = sampleTensor(::dtorch::wire::I32, {3000}, unsigned(rank));
      Tensor piece = Tensor::empty(::dtorch::wire::I32, {1000});
      comm->reduce_scatter(whole, piece, group, ReduceOp::Max, 0,
                           {1000, 1000, 1000});
      std::vector<Tensor> wholes;
      for (int64_t member : group)
        wholes.push_back(
            sampleTensor(::dtorch::wire::I32, {3000}, unsigned(member)));
      expectSameBits(piece,
                     sliceAlong(referenceReduce(wholes, ReduceOp::Max), 0,
                                1000 * int64_t(me), 1000),
                     when + " reduce_scatter");
    }
    EXPECT_EQ(comm->stats().peerAccessCalls, 6u);
  });
  expectAllSucceeded(codes);
}

// One member turns peer access off: the whole group agrees on the staged
// path, with the same results.
TEST(HostSharedMemoryPeerAccess, OneMemberForcesTheStagedPath) {
  StoreDirectory dir;
  auto codes = runProcesses(2, [&](int rank) {
    if (rank == 1)
      setenv("DTORCH_HOSTSHM_PEER_ACCESS", "0", 1);
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(
        rank, store, peerAccessOptions(Reach::Arena));
    uint64_t large = allReduceEverywhere(
        *comm, rank, {0, 1}, {::dtorch::wire::F32, ::dtorch::wire::F16},
        32 << 10);
    EXPECT_GT(large, 0u);
    EXPECT_EQ(comm->stats().peerAccessCalls, 0u);
  });
  expectAllSucceeded(codes);
}

// Both members turn it off: the staged path, no negotiation needed to agree.
TEST(HostSharedMemoryPeerAccess, EnvironmentSwitchOffEverywhere) {
  StoreDirectory dir;
  auto codes = runProcesses(2, [&](int rank) {
    setenv("DTORCH_HOSTSHM_PEER_ACCESS", "0", 1);
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(
        rank, store, peerAccessOptions(Reach::Arena));
    uint64_t large = allReduceEverywhere(*comm, rank, {1, 0},
                                         {::dtorch::wire::BOOL}, 32 << 10);
    EXPECT_GT(large, 0u);
    EXPECT_EQ(comm->stats().peerAccessCalls, 0u);
  });
  expectAllSucceeded(codes);
}

TEST(HostSharedMemoryPeerAccess, DeadPeerIsReportedLongBeforeTheDeadline) {
  StoreDirectory dir;
  auto codes = runProcesses(2, [&](int rank) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(
        rank, store, peerAccessOptions(Reach::Arena, 60s));
    Tensor x = sampleTensor(::dtorch::wire::F32, {50000}, 1);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {50000});
    comm->all_reduce(x, out, {0, 1}, ReduceOp::Sum);
    EXPECT_EQ(comm->stats().peerAccessCalls, 1u);
    if (rank == 1)
      _exit(0); // dies between two collectives
    auto start = std::chrono::steady_clock::now();
    expectRuntimeError([&] { comm->all_reduce(x, out, {0, 1}, ReduceOp::Sum); },
                       {"all_reduce", "rank 1", "died"});
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  });
  expectAllSucceeded(codes);
}

TEST(HostSharedMemoryPeerAccess, DeadlineNamesTheMissingRank) {
  StoreDirectory dir;
  auto codes = runProcesses(3, [&](int rank) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(
        rank, store, peerAccessOptions(Reach::Arena, 400ms));
    Tensor x = sampleTensor(::dtorch::wire::F32, {20000}, 1);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {20000});
    if (rank == 2) {
      std::this_thread::sleep_for(1500ms); // never joins
      return;
    }
    expectRuntimeError(
        [&] { comm->all_reduce(x, out, {0, 1, 2}, ReduceOp::Sum); },
        {"all_reduce", "[0, 1, 2]", "timed out", "rank(s) 2"});
    expectRuntimeError(
        [&] { comm->all_reduce(x, out, {0, 1, 2}, ReduceOp::Sum); },
        {"unusable"});
  });
  expectAllSucceeded(codes);
}

// Large blocks of the caching allocator come from the arena once it is on
// (small ones never); a released block gives its pages back and serves the
// next block of its size; a child forked afterwards never reuses a block it
// shares with its parent.
TEST(SharedHostArena, LargeBlocksComeFromTheArena) {
  auto codes = runProcesses(1, [&](int) {
    ASSERT_TRUE(enableSharedHostArena(size_t(1) << 30));
    EXPECT_TRUE(sharedHostArenaEnabled());
    SharedArenaLocation where;
    Tensor large = Tensor::empty(::dtorch::wire::F32, {100000});
    Tensor small = Tensor::empty(::dtorch::wire::F32, {1000});
    ASSERT_TRUE(sharedArenaLocate(large.data(), large.nbytes(), where));
    EXPECT_EQ(where.pid, getpid());
    EXPECT_GE(where.fd, 0);
    EXPECT_EQ(where.arenaBytes, size_t(1) << 30);
    EXPECT_FALSE(sharedArenaLocate(small.data(), small.nbytes(), where));
    SharedArenaLocation elsewhere;
    EXPECT_FALSE(sharedArenaLocate(&where, sizeof(where), elsewhere));
    // Another process sees the block's bytes through the arena's file.
    std::fill_n(large.data_as<float>(), 100000, 2.5f);
    std::string path = "/proc/" + std::to_string(where.pid) + "/fd/" +
                       std::to_string(where.fd);
    FILE *file = std::fopen(path.c_str(), "rb");
    ASSERT_NE(file, nullptr);
    float seen = 0;
    std::fseek(file, static_cast<long>(where.offset + 4 * 99999), SEEK_SET);
    ASSERT_EQ(std::fread(&seen, sizeof(seen), 1, file), 1u);
    std::fclose(file);
    EXPECT_EQ(seen, 2.5f);
    // Released: the same range again, reading zeros.
    void *block = large.data();
    large = Tensor();
    CachingAllocator::instance().releaseCached();
    Tensor again = Tensor::empty(::dtorch::wire::F32, {100000});
    EXPECT_EQ(again.data(), block);
    EXPECT_EQ(again.data_as<float>()[99999], 0.0f);
    // Cached, then inherited by a child: the child allocates elsewhere.
    again = Tensor();
    auto child = runProcesses(1, [&](int) {
      EXPECT_FALSE(sharedHostArenaEnabled());
      EXPECT_TRUE(sharedArenaInherited(block));
      Tensor mine = Tensor::empty(::dtorch::wire::F32, {100000});
      EXPECT_NE(mine.data(), block);
      SharedArenaLocation none;
      EXPECT_FALSE(sharedArenaLocate(mine.data(), mine.nbytes(), none));
    });
    expectAllSucceeded(child);
    Tensor parents = Tensor::empty(::dtorch::wire::F32, {100000});
    EXPECT_EQ(parents.data(), block); // the parent still reuses it
  });
  expectAllSucceeded(codes);
}

} // namespace
} // namespace dtorch::rt::test
