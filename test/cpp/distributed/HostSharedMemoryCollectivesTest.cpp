// The cross-process shared-memory communicator: ranks in 2 to 4 forked
// processes (also several rank threads per process, as in dtorch-worker),
// every collective and dtype bit for bit against the reference and against
// FakeCollectiveHub, tensors many times larger than the chunk, point to point
// through a ring smaller than the message, the deadline naming the missing
// rank, a dead peer reported long before the deadline, members that disagree,
// and the host identity that decides routing.
//
// Its own binary: fork() is only safe while the process has one thread, and
// the other distributed tests leave Gloo's threads running.
#include "AllToAllVCheck.h"
#include "CollectiveReference.h"
#include "DistributedTestSupport.h"
#include "HostSharedMemoryTestSupport.h"
#include "TestSupport.h"

#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/HostSharedMemoryCollectives.h"
#include "dtorch/runtime/MeshContext.h"
#include "dtorch/runtime/SharedMemoryCollectives.h"

namespace dtorch::rt::test {
namespace {

// Ranks 0-3, `perProcess` rank threads in each process; every rank runs
// every collective on every dtype and compares with the fake backend run in
// the same process.
void everyCollectiveAcrossProcesses(int perProcess) {
  StoreDirectory dir;
  const int world = 4;
  auto codes = runProcesses(world / perProcess, [&](int process) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    std::vector<std::unique_ptr<HostSharedMemoryCommunicator>> comms;
    for (int r = 0; r < perProcess; ++r)
      comms.push_back(makeHostSharedMemoryCommunicator(process * perProcess + r,
                                                       store, smallChunks()));
    for (DType dtype : everyDtype()) {
      FakeCollectiveHub fake(world, 10s);
      std::vector<std::vector<Tensor>> expected(world);
      runRanks(world, [&](int rank) {
        expected[rank] =
            runEveryCollective(*fake.communicator(rank), rank, dtype);
      });
      runRanks(perProcess, [&](int r) {
        int rank = process * perProcess + r;
        std::vector<Tensor> actual = runEveryCollective(*comms[r], rank, dtype);
        ASSERT_EQ(actual.size(), expected[rank].size());
        for (size_t i = 0; i < actual.size(); ++i)
          expectSameBits(actual[i], expected[rank][i],
                         std::string("vs fake, ") + dtypeName(dtype) +
                             ", rank " + std::to_string(rank) + " result " +
                             std::to_string(i));
      });
    }
    HostSharedMemoryStats stats = comms[0]->stats();
    EXPECT_GT(stats.collectives, 100u);
    EXPECT_GT(stats.bytes, 0u);
  });
  expectAllSucceeded(codes);
}

TEST(HostSharedMemoryCollectives, EveryCollectiveOnFourProcesses) {
  everyCollectiveAcrossProcesses(1);
}

TEST(HostSharedMemoryCollectives, EveryCollectiveOnTwoProcessesOfTwoRanks) {
  everyCollectiveAcrossProcesses(2);
}

// Tensors of hundreds of chunks: every reduction of all_reduce (in place
// too, output written with non-temporal stores) and reduce_scatter,
// all_gather along an inner dim, broadcast.
// all_to_all with uneven counts (AllToAllV.h), one rank per process.
TEST(HostSharedMemoryCollectives, AllToAllWithUnevenCountsAcrossProcesses) {
  StoreDirectory dir;
  auto codes = runProcesses(4, [&](int process) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(process, store, smallChunks());
    checkAllToAllV(*comm, process);
    checkAllToAllVSegments(*comm, process);
  });
  expectAllSucceeded(codes);
}

TEST(HostSharedMemoryCollectives, LargeTensorsGoThroughTheBoundedBuffer) {
  StoreDirectory dir;
  auto codes = runProcesses(3, [&](int rank) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    HostSharedMemoryOptions options = smallChunks();
    options.chunkBytes = 64 << 10;
    options.streamingBytes = 1 << 20; // outputs of 4 MB: non-temporal stores
    auto comm = makeHostSharedMemoryCommunicator(rank, store, options);
    const Group group = {2, 0, 1};
    const int64_t n = 1000003; // ~4 MB of float32: 62 chunks
    for (DType dtype :
         {::dtorch::wire::F32, ::dtorch::wire::BF16, ::dtorch::wire::I64})
      for (ReduceOp op : reductionsOf(dtype)) {
        std::string what =
            std::string(dtypeName(dtype)) + " " + reduceOpName(op);
        std::vector<Tensor> inputs;
        for (int64_t member : group)
          inputs.push_back(sampleTensor(dtype, {n}, 11 * member + 1));
        Tensor expected = referenceReduce(inputs, op);
        Tensor x = sampleTensor(dtype, {n}, 11 * rank + 1);
        Tensor out = Tensor::empty(dtype, {n});
        comm->all_reduce(x, out, group, op);
        expectSameBits(out, expected, what + " all_reduce");
        comm->all_reduce(x, x, group, op);
        expectSameBits(x, expected, what + " in-place all_reduce");
        const std::vector<int64_t> sizes = {400000, 1, 600002};
        const std::vector<int64_t> offsets = {0, 400000, 400001};
        size_t me = groupIndexOf(group, rank);
        Tensor whole = sampleTensor(dtype, {n}, 11 * rank + 1);
        Tensor piece = Tensor::empty(dtype, {sizes[me]});
        comm->reduce_scatter(whole, piece, group, op, 0, sizes);
        expectSameBits(piece, sliceAlong(expected, 0, offsets[me], sizes[me]),
                       what + " reduce_scatter");
      }
    // all_gather along dim 1 of [300, k] pieces (rows interleave).
    const std::vector<int64_t> widths = {700, 5, 1300};
    size_t me = groupIndexOf(group, rank);
    Tensor mine = sampleTensor(::dtorch::wire::F32, {300, widths[me]}, rank);
    Tensor gathered = Tensor::empty(::dtorch::wire::F32, {300, 2005});
    comm->all_gather(mine, gathered, group, 1, widths);
    std::vector<Tensor> pieces;
    for (size_t j = 0; j < group.size(); ++j)
      pieces.push_back(sampleTensor(::dtorch::wire::F32, {300, widths[j]},
                                    static_cast<unsigned>(group[j])));
    expectSameBits(gathered, concatAlong(pieces, 1), "large all_gather");
    Tensor source =
        rank == 1 ? sampleTensor(::dtorch::wire::F64, {500000}, 5) : Tensor();
    Tensor copy = Tensor::empty(::dtorch::wire::F64, {500000});
    comm->broadcast(source, copy, group, 1);
    expectSameBits(copy, sampleTensor(::dtorch::wire::F64, {500000}, 5),
                   "large broadcast");
  });
  expectAllSucceeded(codes);
}

// Five members (beyond the direct reduction's four), small and large
// tensors: the same bits as the reference either way.
TEST(HostSharedMemoryCollectives, FiveMembersReduceLikeTheReference) {
  StoreDirectory dir;
  auto codes = runProcesses(5, [&](int rank) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(rank, store, smallChunks());
    const Group group = {4, 1, 3, 0, 2};
    for (int64_t n : {int64_t(3), int64_t(70001)})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
        std::vector<Tensor> inputs;
        for (int64_t member : group)
          inputs.push_back(
              sampleTensor(::dtorch::wire::F16, {n}, 5 * member + 2));
        Tensor x = sampleTensor(::dtorch::wire::F16, {n}, 5 * rank + 2);
        Tensor out = Tensor::empty(::dtorch::wire::F16, {n});
        comm->all_reduce(x, out, group, op);
        expectSameBits(out, referenceReduce(inputs, op),
                       std::string("five members ") + reduceOpName(op) +
                           " of " + std::to_string(n));
      }
  });
  expectAllSucceeded(codes);
}

// Messages larger than the ring, taken in another order than sent.
TEST(HostSharedMemoryCollectives, PointToPointThroughASmallRing) {
  StoreDirectory dir;
  auto codes = runProcesses(2, [&](int rank) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(rank, store, smallChunks());
    Tensor big = sampleTensor(::dtorch::wire::F32, {100000}, 1);
    Tensor small = sampleTensor(::dtorch::wire::I32, {3}, 2);
    if (rank == 0) {
      comm->send(small, 1, 7); // returns before rank 1 takes it
      comm->send(big, 1, 8);
      Tensor back = Tensor::empty(::dtorch::wire::F32, {100000});
      comm->recv(back, 1, 9);
      expectSameBits(back, big, "echo");
    } else {
      Tensor gotBig = Tensor::empty(::dtorch::wire::F32, {100000});
      Tensor gotSmall = Tensor::empty(::dtorch::wire::I32, {3});
      comm->recv(gotBig, 0, 8); // tag 7 is read past and kept
      comm->recv(gotSmall, 0, 7);
      expectSameBits(gotBig, big, "tag 8");
      expectSameBits(gotSmall, small, "tag 7");
      comm->send(gotBig, 0, 9);
    }
    comm.reset(); // waits for the sends to drain
  });
  expectAllSucceeded(codes);
}

// A pipeline hop as the compiler emits it: a class program per stage of a
// 2-stage mesh, the peer a coordinate of the axis that each process
// resolves to the other's global rank; stage 0 sends its input and gets
// back what stage 1 computed from it, both on the COMM stream.
TEST(HostSharedMemoryCollectives, PipelineStagesExchangeThroughClassPrograms) {
  using ::dtorch::wire::COMM;
  using ::dtorch::wire::F32;
  auto stageProgram = [](int64_t stage) {
    ProgramBuilder b;
    ::dtorch::wire::Program &p = b.program();
    p.add_mesh_shape(2);
    auto *box = p.add_positions();
    box->add_lo(stage);
    box->add_hi(stage + 1);
    auto attr = [](::dtorch::wire::Instruction &inst, const char *name,
                   int64_t value) {
      (*inst.mutable_attrs())[name].set_i(value);
    };
    int x = b.input(F32, {50000});
    int y = b.buffer(F32, {50000});
    if (stage == 0) {
      auto &send = b.add("send", {x}, {}, COMM);
      attr(send, "axis", 0), attr(send, "peer", 1), attr(send, "tag", 0);
      auto &recv = b.add("recv", {}, {y}, COMM);
      attr(recv, "axis", 0), attr(recv, "peer", 1), attr(recv, "tag", 1);
    } else {
      int got = b.buffer(F32, {50000});
      auto &recv = b.add("recv", {}, {got}, COMM);
      attr(recv, "axis", 0), attr(recv, "peer", 0), attr(recv, "tag", 0);
      int done = b.event();
      recv.set_record_event(done);
      auto &neg = b.add("neg", {got}, {y});
      neg.add_wait_events(done);
      neg.set_record_event(b.event());
      auto &send = b.add("send", {y}, {}, COMM);
      send.add_wait_events(neg.record_event());
      attr(send, "axis", 0), attr(send, "peer", 0), attr(send, "tag", 1);
    }
    b.output(y);
    return p;
  };
  StoreDirectory dir;
  auto codes = runProcesses(2, [&](int process) {
    // The mesh's positions are ranks 1 and 0: stage 0 is process 1.
    int rank = process;
    int64_t stage = 1 - rank;
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(rank, store, smallChunks());
    RankContext context = RankContext::of({2}, {1, 0}, rank);
    Executor exec(comm.get());
    ::dtorch::wire::Program program =
        exec.prepare(stageProgram(stage), context);
    Tensor x = sampleTensor(F32, {50000}, 5);
    for (int step = 0; step < 3; ++step) {
      std::vector<Tensor> out = exec.run(program, {x});
      if (stage == 0) {
        Tensor want = Tensor::empty(F32, {50000});
        for (int64_t i = 0; i < 50000; ++i)
          want.data_as<float>()[i] = -x.data_as<float>()[i];
        expectSameBits(out[0], want, "stage 0, step " + std::to_string(step));
      }
    }
    comm.reset();
  });
  expectAllSucceeded(codes);
}

TEST(HostSharedMemoryCollectives, DeadlineNamesTheMissingRankAndCollective) {
  StoreDirectory dir;
  auto codes = runProcesses(3, [&](int rank) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm =
        makeHostSharedMemoryCommunicator(rank, store, smallChunks(400ms));
    Tensor x = sampleTensor(::dtorch::wire::F32, {10}, 1);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {10});
    if (rank == 2) {
      std::this_thread::sleep_for(1500ms); // never joins
      return;
    }
    auto start = std::chrono::steady_clock::now();
    expectRuntimeError(
        [&] { comm->all_reduce(x, out, {0, 1, 2}, ReduceOp::Sum); },
        {"all_reduce", "[0, 1, 2]", "timed out", "rank(s) 2",
         "rank " + std::to_string(rank)});
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1200ms);
    // The group stays unusable, as with Gloo.
    expectRuntimeError(
        [&] { comm->all_reduce(x, out, {0, 1, 2}, ReduceOp::Sum); },
        {"unusable"});
  });
  expectAllSucceeded(codes);
}

TEST(HostSharedMemoryCollectives, DeadPeerIsReportedLongBeforeTheDeadline) {
  StoreDirectory dir;
  auto codes = runProcesses(2, [&](int rank) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(rank, store, smallChunks(60s));
    Tensor x = sampleTensor(::dtorch::wire::F32, {1000}, 1);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {1000});
    comm->all_reduce(x, out, {0, 1}, ReduceOp::Sum);
    if (rank == 1)
      _exit(0); // dies between two collectives
    auto start = std::chrono::steady_clock::now();
    expectRuntimeError([&] { comm->all_reduce(x, out, {0, 1}, ReduceOp::Sum); },
                       {"all_reduce", "rank 1", "died"});
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  });
  expectAllSucceeded(codes);
}

TEST(HostSharedMemoryCollectives, MembersThatDisagreeFailInsteadOfMixingData) {
  StoreDirectory dir;
  auto codes = runProcesses(2, [&](int rank) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(rank, store, smallChunks(5s));
    Tensor x = sampleTensor(::dtorch::wire::F32, {4}, 1);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {8});
    Tensor sum = Tensor::empty(::dtorch::wire::F32, {4});
    if (rank == 0)
      expectRuntimeError([&] { comm->all_gather(x, out, {0, 1}, 0, {4, 4}); },
                         {"all_gather", "disagree"});
    else
      expectRuntimeError(
          [&] { comm->all_reduce(x, sum, {0, 1}, ReduceOp::Sum); },
          {"all_reduce", "disagree"});
  });
  expectAllSucceeded(codes);
}

// Routing: a group is on this host only when every member published this
// process's identity; a member that never publishes counts as elsewhere.
TEST(HostSharedMemoryCollectives, HostIdentityDecidesWhichGroupsAreLocal) {
  StoreDirectory dir;
  auto store = std::make_shared<FileKeyValueStore>(dir.path);
  auto options = [](const char *host) {
    HostSharedMemoryOptions o;
    o.hostIdentity = host;
    o.deadline = 200ms;
    return o;
  };
  auto a0 = makeHostSharedMemoryCommunicator(0, store, options("a"));
  auto a1 = makeHostSharedMemoryCommunicator(1, store, options("a"));
  auto b2 = makeHostSharedMemoryCommunicator(2, store, options("b"));
  a0->publishIdentity();
  a1->publishIdentity();
  b2->publishIdentity();
  EXPECT_TRUE(a0->sameHost({0, 1}));
  EXPECT_TRUE(a1->sameHost({1, 0}));
  EXPECT_FALSE(a0->sameHost({0, 1, 2}));
  EXPECT_FALSE(b2->sameHost({2, 0}));
  EXPECT_FALSE(a0->sameHost({0, 3})); // rank 3 never published
  EXPECT_FALSE(localHostIdentity().empty());

  // The router sends in-process groups to the hub, host groups to the
  // shared-memory communicator, the rest to the remote one.
  SharedMemoryHub hub({0}, 4);
  bool remoteAsked = false;
  RoutingCommunicator router(0, {0}, hub.communicator(0),
                             [&]() -> Communicator * {
                               remoteAsked = true;
                               throw RuntimeError("no remote backend here");
                             });
  HostSharedMemoryCommunicator *host = a0.get();
  router.setHostTransport(
      host, [host](const Group &group) { return host->sameHost(group); });
  Tensor x = sampleTensor(::dtorch::wire::F32, {3}, 1);
  Tensor out = Tensor::empty(::dtorch::wire::F32, {3});
  router.all_reduce(x, out, {0}, ReduceOp::Sum);
  expectSameBits(out, x, "all_reduce of one");
  EXPECT_THROW(router.all_reduce(x, out, {0, 2}, ReduceOp::Sum), RuntimeError);
  EXPECT_TRUE(remoteAsked);
  RoutingCommunicator::Routes routes = router.routes();
  EXPECT_EQ(routes.local, 1u);
  EXPECT_EQ(routes.host, 0u);
  EXPECT_EQ(routes.remote, 1u);
}

// The same router over processes: group {0, 1} spans two processes of one
// host and goes through shared memory.
TEST(HostSharedMemoryCollectives, RouterUsesSharedMemoryBetweenProcesses) {
  StoreDirectory dir;
  auto codes = runProcesses(2, [&](int rank) {
    auto store = std::make_shared<FileKeyValueStore>(dir.path);
    auto comm = makeHostSharedMemoryCommunicator(rank, store, smallChunks());
    comm->publishIdentity();
    SharedMemoryHub hub({rank}, 2);
    RoutingCommunicator router(
        rank, {rank}, hub.communicator(rank),
        []() -> Communicator * { throw RuntimeError("no remote backend"); });
    HostSharedMemoryCommunicator *host = comm.get();
    router.setHostTransport(
        host, [host](const Group &group) { return host->sameHost(group); });
    Tensor x = sampleTensor(::dtorch::wire::F32, {5000}, 3 + rank);
    Tensor out = Tensor::empty(::dtorch::wire::F32, {5000});
    router.all_reduce(x, out, {0, 1}, ReduceOp::Max);
    expectSameBits(
        out,
        referenceReduce({sampleTensor(::dtorch::wire::F32, {5000}, 3),
                         sampleTensor(::dtorch::wire::F32, {5000}, 4)},
                        ReduceOp::Max),
        "routed all_reduce");
    EXPECT_EQ(router.routes().host, 1u);
    EXPECT_EQ(comm->stats().collectives, 1u);
  });
  expectAllSucceeded(codes);
}

} // namespace
} // namespace dtorch::rt::test
