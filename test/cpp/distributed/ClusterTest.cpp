// dtorch-worker processes driven through Cluster: end to end, every
// collective on Gloo (2 processes x 2 ranks) against FakeCollectiveHub, error
// reporting and poisoning, a worker killed mid-run, a controller that dies.
#include "CollectiveReference.h"
#include "DistributedTestSupport.h"
#include "ScopedEnvironment.h"
#include "TestSupport.h"

#include "dtorch/runtime/Cluster.h"
#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/Transport.h"

#include <cstring>
#include <filesystem>
#include <random>
#include <sys/wait.h>

namespace dtorch::rt::test {
namespace {

namespace wire = ::dtorch::wire;
using Ms = std::chrono::milliseconds;
using testsupport::ScopedEnvironment;

ClusterOptions localOptions(int world = 4, int procs = 2) {
  return embeddedClusterOptions(world, procs);
}

// Uploads a program written for one rank (explicit groups) to that rank.
void uploadTo(Cluster &cluster, int rank, uint64_t id, const Program &program) {
  Program placed = onOneRankMesh(program);
  cluster.uploadPrograms(id, {&placed}, {rank});
}

Tensor randomTensor(DType dtype, std::vector<int64_t> shape, unsigned seed) {
  return sampleTensor(dtype, shape, seed);
}

// c = a + b (COMPUTE), d = all_reduce_sum(c) over all 4 ranks (COMM).
Program addAllReduce() { return addThenAllReduceProgram(5); }

// A random fill whose seed comes from the run (seed slot 1 of the run's
// seeds): 6 floats, the rank's box of a [4, 6] global tensor.
Program seededRandom(int rank) {
  ProgramBuilder b;
  int out = b.buffer(wire::F32, {1, 6});
  auto &inst = b.add("random", {}, {out});
  setInt(inst, "seed_slot", 1);
  setString(inst, "dist", "uniform");
  setInts(inst, "global_shape", {4, 6});
  setInts(inst, "offset", {rank, 0});
  b.output(out);
  return b.program();
}

// One RunProgram per worker process names its ranks; the worker runs it on
// each of them with the run's seeds.
TEST(Cluster, OneRunMessagePerProcessWithSeeds) {
  Cluster cluster(localOptions());
  for (int rank = 0; rank < 4; ++rank)
    uploadTo(cluster, rank, 3, seededRandom(rank));
  for (uint64_t seed : {11u, 12u}) {
    uint64_t before = cluster.messagesSent();
    cluster.run(std::vector<int64_t>{0, 1, 2, 3}, 3, {}, {50 + seed},
                {7, static_cast<int64_t>(seed)});
    EXPECT_EQ(cluster.messagesSent() - before, 2u); // 2 processes
    for (int rank = 0; rank < 4; ++rank) {
      std::vector<float> want;
      for (int i = 0; i < 6; ++i)
        want.push_back(static_cast<float>(
            randomUniform(seed, static_cast<uint64_t>(rank * 6 + i))));
      EXPECT_EQ(valuesOf<float>(cluster.fetch(rank, 50 + seed).get()), want)
          << "rank " << rank << " seed " << seed;
    }
  }
  // Ranks 1 and 2 only: one message to each process, only they run.
  uint64_t before = cluster.messagesSent();
  cluster.run(std::vector<int64_t>{1, 2}, 3, {}, {90}, {0, 5});
  EXPECT_EQ(cluster.messagesSent() - before, 2u);
  EXPECT_EQ(cluster.fetch(1, 90).get().numel(), 6);
  EXPECT_EQ(cluster.fetch(2, 90).get().numel(), 6);
  expectRuntimeError([&] { cluster.fetch(0, 90).get(); },
                     {"unknown tensor handle 90"});
  // Too few seeds for the slot: the run fails and names the slot.
  cluster.run(std::vector<int64_t>{0}, 3, {}, {91}, {4});
  expectRuntimeError([&] { cluster.fetch(0, 91).get(); },
                     {"seed_slot 1", "1 seed(s)"});
  // Frees go out as one message per process too.
  before = cluster.messagesSent();
  cluster.free(std::vector<int64_t>{0, 1, 2, 3}, {61, 62});
  EXPECT_EQ(cluster.messagesSent() - before, 2u);
  expectRuntimeError([&] { cluster.fetch(3, 62).get(); },
                     {"unknown tensor handle 62"});
  cluster.synchronize();
}

// The MemoryStats request: answered by the worker for its rank in order
// with the puts, runs and frees sent before it, and carried back whole.
TEST(Cluster, MemoryStatsRoundTripInOrderWithTheWork) {
  Cluster cluster(localOptions());
  for (int rank = 0; rank < 4; ++rank) {
    MemoryStats stats = cluster.memoryStats(rank).get();
    EXPECT_EQ(stats.rank, rank);
    EXPECT_TRUE(stats.known);
    EXPECT_EQ(stats.tensors, 0u);
    EXPECT_EQ(stats.bytes, 0u);
  }
  for (int rank = 0; rank < 4; ++rank) {
    uploadTo(cluster, rank, 1, addAllReduce());
    cluster.put(rank, 100, randomTensor(wire::F32, {5}, 1 + rank));
    cluster.put(rank, 101, randomTensor(wire::F32, {5}, 9 + rank));
    cluster.run(rank, 1, {100, 101}, {102});
  }
  cluster.put(2, 7, randomTensor(wire::F64, {3, 4}, 5));
  // Not synchronized: each request waits behind its rank's earlier work.
  std::vector<std::future<MemoryStats>> replies;
  for (int rank = 0; rank < 4; ++rank)
    replies.push_back(cluster.memoryStats(rank));
  for (int rank = 0; rank < 4; ++rank) {
    MemoryStats stats = replies[rank].get();
    EXPECT_EQ(stats.rank, rank);
    bool extra = rank == 2;
    EXPECT_EQ(stats.tensors, extra ? 4u : 3u) << "rank " << rank;
    EXPECT_EQ(stats.bytes, 3u * 5 * 4 + (extra ? 12u * 8 : 0u))
        << "rank " << rank;
    EXPECT_EQ(stats.bytesByDtype.at(wire::F32), 60u);
    EXPECT_EQ(stats.bytesByDtype.count(wire::F64), extra ? 1u : 0u);
    std::vector<uint64_t> handles;
    for (const HeldTensor &t : stats.held) {
      handles.push_back(t.handle);
      EXPECT_EQ(t.bytes, t.handle == 7 ? 96u : 20u);
      EXPECT_EQ(t.dtype, t.handle == 7 ? wire::F64 : wire::F32);
    }
    EXPECT_EQ(handles, extra ? (std::vector<uint64_t>{7, 100, 101, 102})
                             : (std::vector<uint64_t>{100, 101, 102}));
  }
  cluster.free(std::vector<int64_t>{0, 1, 2, 3}, {100, 101, 7});
  MemoryStats after = cluster.memoryStats(2).get();
  EXPECT_EQ(after.tensors, 1u);
  EXPECT_EQ(after.bytes, 20u);
  ASSERT_EQ(after.held.size(), 1u);
  EXPECT_EQ(after.held[0].handle, 102u);
  // A rank outside the world is refused before anything is sent.
  EXPECT_THROW(cluster.memoryStats(4), RuntimeError);
  cluster.synchronize();
}

// The Trace request (the profiler): START makes each rank record its runs,
// a DRAIN queued behind the work hands over every span in bounded chunks
// (the kernel on the compute lane, the all_reduce on the comm lane, with
// their bytes) and stops recording; the worker names its host and clock.
TEST(Cluster, TraceRecordsEachRanksStreamsAndDrainsInChunks) {
  Cluster cluster(localOptions());
  int64_t before = traceClockNs();
  for (int rank = 0; rank < 4; ++rank) {
    TraceChunk started = cluster.trace(rank, TraceAction::Start, 100, 0).get();
    EXPECT_EQ(started.rank, rank);
    EXPECT_TRUE(started.events.empty());
    uploadTo(cluster, rank, 1, addAllReduce());
    cluster.put(rank, 100, randomTensor(wire::F32, {5}, 1 + rank));
    cluster.put(rank, 101, randomTensor(wire::F32, {5}, 9 + rank));
  }
  for (int step = 0; step < 2; ++step)
    for (int rank = 0; rank < 4; ++rank)
      cluster.run(rank, 1, {100, 101}, {uint64_t(102 + step)});
  // Not synchronized: the drain waits behind each rank's runs.
  std::vector<std::future<TraceChunk>> first;
  for (int rank = 0; rank < 4; ++rank)
    first.push_back(cluster.trace(rank, TraceAction::Drain, 0, 4));
  for (int rank = 0; rank < 4; ++rank) {
    TraceChunk chunk = first[rank].get();
    EXPECT_EQ(chunk.rank, rank);
    EXPECT_EQ(chunk.host, localHostName());
    EXPECT_GE(chunk.clockNs, before);
    EXPECT_EQ(chunk.dropped, 0u);
    // Two runs of (run, add, all_reduce): 4 now, 2 in the next chunk.
    ASSERT_EQ(chunk.events.size(), 4u);
    EXPECT_EQ(chunk.remaining, 2u);
    TraceChunk rest = cluster.trace(rank, TraceAction::Drain, 0, 100).get();
    EXPECT_EQ(rest.remaining, 0u);
    for (TraceEvent &e : rest.events)
      chunk.events.push_back(std::move(e));
    int adds = 0, reduces = 0;
    for (const TraceEvent &e : chunk.events) {
      EXPECT_GE(e.startNs, before);
      EXPECT_LE(e.startNs, e.endNs);
      if (e.name == "add") {
        ++adds;
        EXPECT_EQ(e.lane, TraceLane::Compute);
        EXPECT_EQ(e.bytes, 20);
      } else if (e.name == "all_reduce") {
        ++reduces;
        EXPECT_EQ(e.lane, TraceLane::Comm);
        EXPECT_EQ(e.category, "collective");
        EXPECT_EQ(e.bytes, 20);
      } else {
        EXPECT_EQ(e.category, "run");
      }
    }
    EXPECT_EQ(adds, 2);
    EXPECT_EQ(reduces, 2);
  }
  // Stopped by the drain: a later run records nothing.
  for (int rank = 0; rank < 4; ++rank)
    cluster.run(rank, 1, {100, 101}, {110});
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_TRUE(
        cluster.trace(rank, TraceAction::Drain, 0, 100).get().events.empty());
  EXPECT_THROW(cluster.trace(4, TraceAction::Start, 1, 0), RuntimeError);
  cluster.synchronize();
}

TEST(Cluster, PutRunFetchAcrossTwoProcesses) {
  Cluster cluster(localOptions());
  ASSERT_EQ(cluster.worldSize(), 4);
  EXPECT_NE(cluster.pidOf(0), cluster.pidOf(2));
  std::vector<float> expected(5, 0.f);
  for (int rank = 0; rank < 4; ++rank) {
    uploadTo(cluster, rank, 1, addAllReduce());
    std::vector<float> a, b;
    for (int i = 0; i < 5; ++i) {
      a.push_back(rank * 10.f + i);
      b.push_back(0.5f * i - rank);
      expected[i] += a.back() + b.back();
    }
    cluster.put(rank, 100, makeTensor<float>(wire::F32, {5}, a));
    cluster.put(rank, 101, makeTensor<float>(wire::F32, {5}, b));
    cluster.run(rank, 1, {100, 101}, {102});
  }
  uint64_t tripsBefore = cluster.roundTrips();
  std::vector<std::future<Tensor>> results;
  for (int rank = 0; rank < 4; ++rank)
    results.push_back(cluster.fetch(rank, 102));
  for (auto &result : results)
    EXPECT_EQ(valuesOf<float>(result.get()), expected);
  EXPECT_EQ(cluster.roundTrips() - tripsBefore, 4u);
  EXPECT_EQ(cluster.messagesSent(), 4u * 4 + 4);
  cluster.synchronize();
  cluster.free(0, {100, 101, 102});
  auto start = std::chrono::steady_clock::now();
  cluster.shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, Ms(2000));
}

// One program per rank exercising every collective on groups that span both
// worker processes (ranks 0-1 | 2-3), so they run on Gloo.
Program everyCollective(int rank, std::vector<Tensor> &inputs) {
  ProgramBuilder b;
  auto input = [&](DType dtype, std::vector<int64_t> shape, unsigned seed) {
    inputs.push_back(randomTensor(dtype, shape, seed));
    return b.input(dtype, shape);
  };
  auto comm = [&](const std::string &op, std::vector<int> in,
                  std::vector<int> out) -> Instruction & {
    return b.add(op, in, out, wire::COMM);
  };
  Group world{0, 1, 2, 3};
  for (DType dtype : everyDtype()) {
    for (ReduceOp op : reductionsOf(dtype))
      for (int64_t n : {0, 7, 1000}) {
        int x = input(dtype, {n}, 100 * rank + n);
        int out = b.buffer(dtype, {n});
        auto &inst = comm("all_reduce", {x}, {out});
        setInts(inst, "group", {2, 0, 3, 1});
        setString(inst, "reduce", reduceOpName(op));
        b.output(out);
      }
    std::vector<int64_t> sizes{2, 0, 1, 3};
    for (int64_t dim : {0, 1}) {
      std::vector<int64_t> piece{3, 3}, whole{3, 3};
      piece[dim] = sizes[rank];
      whole[dim] = 6;
      int x = input(dtype, piece, rank + 7 * dim);
      int gathered = b.buffer(dtype, whole);
      auto &ag = comm("all_gather", {x}, {gathered});
      setInts(ag, "group", world);
      setInt(ag, "dim", dim);
      setInts(ag, "sizes", sizes);
      b.output(gathered);
      for (ReduceOp op : reductionsOf(dtype)) {
        int y = input(dtype, whole, rank + 9 * dim);
        int scattered = b.buffer(dtype, piece);
        auto &rs = comm("reduce_scatter", {y}, {scattered});
        setInts(rs, "group", world);
        setString(rs, "reduce", reduceOpName(op));
        setInt(rs, "dim", dim);
        setInts(rs, "sizes", sizes);
        b.output(scattered);
      }
    }
    std::vector<int64_t> split, concat;
    int64_t rows = 0, cols = 0;
    for (int j = 0; j < 4; ++j) {
      split.push_back((j + rank) % 3);
      concat.push_back((rank + j) % 3);
      rows += split.back();
      cols += concat.back();
    }
    int x = input(dtype, {2, rows}, rank + 30);
    int swapped = b.buffer(dtype, {2, cols});
    auto &a2a = comm("all_to_all", {x}, {swapped});
    setInts(a2a, "group", world);
    setInt(a2a, "split_dim", 1);
    setInts(a2a, "split_sizes", split);
    setInt(a2a, "concat_dim", 1);
    setInts(a2a, "concat_sizes", concat);
    b.output(swapped);
    if (rank != 0) {
      int root = input(dtype, {4}, rank + 40);
      int got = b.buffer(dtype, {4});
      auto &bc = comm("broadcast", {root}, {got});
      setInts(bc, "group", {1, 2, 3});
      setInt(bc, "root", 2);
      b.output(got);
    }
  }
  // Point to point across the processes, both directions, one empty.
  if (rank == 1 || rank == 2) {
    int peer = 3 - rank;
    int mine = input(wire::F32, {3}, rank + 50);
    auto &s = comm("send", {mine}, {});
    setInt(s, "peer", peer);
    setInt(s, "tag", 5);
    int empty = input(wire::F32, {0}, 0);
    auto &s2 = comm("send", {empty}, {});
    setInt(s2, "peer", peer);
    setInt(s2, "tag", 6);
    int got = b.buffer(wire::F32, {3});
    auto &r = comm("recv", {}, {got});
    setInt(r, "peer", peer);
    setInt(r, "tag", 5);
    int gotEmpty = b.buffer(wire::F32, {0});
    auto &r2 = comm("recv", {}, {gotEmpty});
    setInt(r2, "peer", peer);
    setInt(r2, "tag", 6);
    b.output(got);
    b.output(gotEmpty);
  }
  return b.program();
}

// One class program for a 2x2 mesh over permuted ranks {3, 1, 2, 0} (sent
// as a list of ranks, not a first rank): each worker resolves its ranks'
// coordinates, mesh values and axis groups, across both processes.
TEST(Cluster, ClassProgramResolvesPerRankOnAPermutedMesh) {
  const std::vector<int64_t> meshRanks = {3, 1, 2, 0};
  ProgramBuilder b;
  b.program().add_mesh_shape(2);
  b.program().add_mesh_shape(2);
  auto *box = b.program().add_positions();
  for (int a = 0; a < 2; ++a) {
    box->add_lo(0);
    box->add_hi(2);
  }
  int x = b.input(wire::F32, {1});
  int lead = b.buffer(wire::F32, {1});
  int summed = b.buffer(wire::F32, {1});
  int index = b.buffer(wire::I64, {2});
  int ready = b.event();
  auto &keep = b.add("lead_or_zero", {x}, {lead});
  keep.set_record_event(ready);
  auto *coord = (*keep.mutable_attrs())["coord"].mutable_mesh();
  coord->set_kind(wire::MeshValue::MESH_COORD);
  coord->set_axis(1);
  auto &reduce = b.add("all_reduce", {lead}, {summed}, wire::COMM);
  reduce.add_wait_events(ready);
  setInt(reduce, "axis", 1);
  setString(reduce, "reduce", "sum");
  auto &iota = b.add("iota", {}, {index});
  setInt(iota, "dim", 0);
  auto *offset = (*iota.mutable_attrs())["offset"].mutable_mesh();
  offset->set_kind(wire::MeshValue::BOX_OFFSET);
  offset->add_global_shape(4);
  offset->add_shard_dims(0);
  offset->add_shard_dims(-1);
  offset->set_dim(-1);
  b.output(summed);
  b.output(index);

  Cluster cluster(localOptions());
  cluster.uploadPrograms(4, {&b.program()}, meshRanks);
  for (int rank = 0; rank < 4; ++rank) {
    cluster.put(rank, 1, makeTensor<float>(wire::F32, {1}, {rank + 1.f}));
    cluster.run(rank, 4, {1}, {2, 3});
  }
  for (int64_t p = 0; p < 4; ++p) {
    int rank = static_cast<int>(meshRanks[p]);
    int64_t row = p / 2; // coordinate along axis 0
    // The axis-1 group of this rank keeps the value of its coordinate-0 rank.
    float lead = static_cast<float>(meshRanks[2 * row] + 1);
    EXPECT_EQ(valuesOf<float>(cluster.fetch(rank, 2).get()),
              (std::vector<float>{lead}))
        << "rank " << rank;
    EXPECT_EQ(valuesOf<int64_t>(cluster.fetch(rank, 3).get()),
              (std::vector<int64_t>{2 * row, 2 * row + 1}))
        << "rank " << rank;
  }
}

// Every collective between the two worker processes (groups spanning both):
// through shared memory by default, through Gloo with DTORCH_HOST_SHM=0.
void everyCollectiveOnTwoProcessesMatchesTheFakeBackend() {
  std::vector<Program> programs;
  std::vector<std::vector<Tensor>> inputs(4);
  for (int rank = 0; rank < 4; ++rank)
    programs.push_back(everyCollective(rank, inputs[rank]));
  // Oracle: the same programs on in-process threads with FakeCollectiveHub.
  std::vector<std::vector<Tensor>> expected(4);
  FakeCollectiveHub hub(4, std::chrono::seconds(10));
  runRanks(4, [&](int rank) {
    auto comm = hub.communicator(rank);
    expected[rank] = Executor(comm.get()).run(programs[rank], inputs[rank]);
  });

  Cluster cluster(localOptions());
  for (int rank = 0; rank < 4; ++rank) {
    uploadTo(cluster, rank, 9, programs[rank]);
    std::vector<TensorHandle> in, out;
    for (size_t i = 0; i < inputs[rank].size(); ++i) {
      cluster.put(rank, 1000 + i, inputs[rank][i]);
      in.push_back(1000 + i);
    }
    for (size_t i = 0; i < expected[rank].size(); ++i)
      out.push_back(5000 + i);
    cluster.run(rank, 9, in, out);
  }
  cluster.synchronize();
  for (int rank = 0; rank < 4; ++rank)
    for (size_t i = 0; i < expected[rank].size(); ++i) {
      Tensor got = cluster.fetch(rank, 5000 + i).get();
      EXPECT_TRUE(sameBits(got, expected[rank][i]))
          << "rank " << rank << " output " << i << " " << got.describe();
    }
}

TEST(Cluster, EveryCollectiveOnHostSharedMemoryMatchesTheFakeBackend) {
  everyCollectiveOnTwoProcessesMatchesTheFakeBackend();
}

TEST(Cluster, EveryCollectiveOnGlooMatchesTheFakeBackend) {
  ScopedEnvironment gloo("DTORCH_HOST_SHM", "0");
  everyCollectiveOnTwoProcessesMatchesTheFakeBackend();
}

TEST(Cluster, ErrorsNameTheInstructionPoisonHandlesAndKeepRanksUsable) {
  Cluster cluster(localOptions(2, 1));
  ProgramBuilder b;
  int x = b.input(wire::I64, {2});
  int y = b.input(wire::I64, {2});
  int q = b.buffer(wire::I64, {2});
  b.add("div", {x, y}, {q});
  b.output(q);
  uploadTo(cluster, 1, 3, b.program());
  cluster.put(1, 1, makeTensor<int64_t>(wire::I64, {2}, {4, 6}));
  cluster.put(1, 2, makeTensor<int64_t>(wire::I64, {2}, {2, 0}));
  cluster.run(1, 3, {1, 2}, {3});
  try {
    cluster.synchronize();
    ADD_FAILURE() << "expected a WorkerError";
  } catch (const WorkerError &error) {
    EXPECT_EQ(error.rank(), 1);
    EXPECT_NE(std::string(error.what()).find("instruction 0"),
              std::string::npos)
        << error.what();
  }
  try {
    cluster.fetch(1, 3).get();
    ADD_FAILURE() << "expected a WorkerError";
  } catch (const WorkerError &error) {
    EXPECT_NE(std::string(error.what()).find("instruction 0"),
              std::string::npos)
        << error.what();
  }
  cluster.synchronize(); // the error was reported once
  cluster.put(1, 2, makeTensor<int64_t>(wire::I64, {2}, {2, 3}));
  cluster.run(1, 3, {1, 2}, {3});
  EXPECT_EQ(valuesOf<int64_t>(cluster.fetch(1, 3).get()),
            (std::vector<int64_t>{2, 2}));
}

void missingPeerIsAnErrorNamingTheRank() {
  ClusterOptions options = localOptions();
  options.collectiveTimeout = Ms(300);
  Cluster cluster(options);
  // Rank 0 (process 1) waits for rank 2 (process 2), which never joins.
  ProgramBuilder b;
  int x = b.input(wire::F32, {3});
  int y = b.buffer(wire::F32, {3});
  auto &reduce = b.add("all_reduce", {x}, {y}, wire::COMM);
  setInts(reduce, "group", {0, 2});
  setString(reduce, "reduce", "sum");
  b.output(y);
  uploadTo(cluster, 0, 9, b.program());
  cluster.put(0, 1, makeTensor<float>(wire::F32, {3}, {1, 2, 3}));
  auto start = std::chrono::steady_clock::now();
  cluster.run(0, 9, {1}, {2});
  try {
    cluster.fetch(0, 2).get();
    ADD_FAILURE() << "expected a WorkerError";
  } catch (const WorkerError &error) {
    std::string what = error.what();
    EXPECT_EQ(error.rank(), 0) << what;
    // Named by the collective that waited for it, or by the rendezvous
    // of the mesh when that is what times out first (a slow machine, a
    // sanitizer build).
    EXPECT_TRUE(what.find("rank(s) 2") != std::string::npos ||
                what.find("rank 2 did not join") != std::string::npos)
        << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, Ms(5000));
}

TEST(Cluster, MissingPeerOnHostSharedMemoryIsAnErrorNamingTheRank) {
  missingPeerIsAnErrorNamingTheRank();
}

TEST(Cluster, MissingPeerOnGlooIsAnErrorNamingTheRank) {
  ScopedEnvironment gloo("DTORCH_HOST_SHM", "0");
  missingPeerIsAnErrorNamingTheRank();
}

// Group segments of the shared-memory transport a process created.
int sharedMemorySegmentsOf(pid_t pid) {
  int count = 0;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto &entry : std::filesystem::directory_iterator(dir)) {
    std::error_code error;
    auto target = std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && target.rfind("/memfd:dtorch-hostshm:", 0) == 0)
      ++count;
  }
  return count;
}

// Two workers started by hand, each with its own host identity (as on two
// machines) or the same one: the all_reduce between them gives the same
// result, through Gloo or through shared memory.
void allReduceBetweenWorkersStartedByHand(const char *hostA, const char *hostB,
                                          bool expectSharedMemory) {
  std::vector<std::string> addresses;
  std::vector<std::unique_ptr<ProcessGuard>> workers;
  for (int rank = 0; rank < 2; ++rank) {
    addresses.push_back("tcp://127.0.0.1:" + std::to_string(freePort()));
    ScopedEnvironment host("DTORCH_HOST_ID", rank == 0 ? hostA : hostB);
    workers.push_back(std::make_unique<ProcessGuard>(detail::spawnProcess(
        DTORCH_WORKER_PATH,
        {"--listen", addresses.back(), "--token", "hosts", "--ranks",
         std::to_string(rank), "--world-size", "2"})));
  }
  ClusterOptions options;
  options.workerAddresses = addresses;
  options.token = "hosts";
  Cluster cluster(options);
  ProgramBuilder b;
  int x = b.input(wire::F32, {3});
  int y = b.buffer(wire::F32, {3});
  auto &reduce = b.add("all_reduce", {x}, {y}, wire::COMM);
  setInts(reduce, "group", {0, 1});
  setString(reduce, "reduce", "sum");
  b.output(y);
  for (int rank = 0; rank < 2; ++rank) {
    uploadTo(cluster, rank, 4, b.program());
    cluster.put(rank, 1,
                makeTensor<float>(wire::F32, {3}, {1.f, 2.f, 3.f + rank}));
    cluster.run(rank, 4, {1}, {2});
  }
  for (int rank = 0; rank < 2; ++rank) {
    Tensor got = cluster.fetch(rank, 2).get();
    EXPECT_TRUE(
        sameBits(got, makeTensor<float>(wire::F32, {3}, {2.f, 4.f, 7.f})))
        << got.describe();
  }
  int segments = 0;
  for (auto &worker : workers)
    segments += sharedMemorySegmentsOf(worker->pid);
  EXPECT_EQ(segments > 0, expectSharedMemory) << segments << " segment(s)";
  cluster.shutdown();
}

TEST(Cluster, WorkersOnDifferentHostsUseGloo) {
  allReduceBetweenWorkersStartedByHand("host-a", "host-b", false);
}

TEST(Cluster, WorkersOnOneHostUseSharedMemory) {
  allReduceBetweenWorkersStartedByHand("host-c", "host-c", true);
}

TEST(Cluster, KilledWorkerBecomesWorkerErrorNamingTheRank) {
  std::vector<int64_t> pids;
  {
    Cluster cluster(localOptions());
    for (int rank = 0; rank < 4; ++rank)
      pids.push_back(cluster.pidOf(rank));
    // Rank 0 blocks in a recv from rank 2, which never sends: mid-run.
    ProgramBuilder b;
    int got = b.buffer(wire::F32, {1});
    auto &r = b.add("recv", {}, {got}, wire::COMM);
    setInt(r, "peer", 2);
    setInt(r, "tag", 1);
    b.output(got);
    uploadTo(cluster, 0, 1, b.program());
    cluster.run(0, 1, {}, {7});
    cluster.put(2, 8, makeTensor<float>(wire::F32, {1}, {1.f}));
    auto pending =
        cluster.fetch(2, 99); // unknown handle, but the worker dies first
    std::this_thread::sleep_for(Ms(300));
    ASSERT_EQ(kill(static_cast<pid_t>(pids[2]), SIGKILL), 0);
    auto start = std::chrono::steady_clock::now();
    auto later = cluster.fetch(3, 8);
    for (auto *future : {&pending, &later}) {
      ASSERT_EQ(future->wait_for(Ms(5000)), std::future_status::ready);
      try {
        future->get();
        ADD_FAILURE() << "expected a WorkerError";
      } catch (const WorkerError &error) {
        EXPECT_GE(error.rank(), 2);
        // The fetch of the unknown handle may have been answered before the
        // kill.
        std::string message = error.what();
        EXPECT_TRUE(
            message.find("killed by signal 9") != std::string::npos ||
            (future == &pending &&
             message.find("unknown tensor handle") != std::string::npos))
            << message;
      }
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, Ms(5000));
    EXPECT_THROW(cluster.synchronize(), WorkerError);
    EXPECT_THROW(cluster.fetch(2, 8).get(), WorkerError);
    auto stop = std::chrono::steady_clock::now();
    cluster.shutdown();
    EXPECT_LT(std::chrono::steady_clock::now() - stop, Ms(2000));
  }
  for (int64_t pid : pids)
    EXPECT_FALSE(processAlive(pid)) << "pid " << pid << " left behind";
}

TEST(Cluster, WorkersExitWhenTheControllerDisappears) {
  // A worker started by hand; a controller in a child process connects to it
  // and is then killed. The worker must notice (heartbeats) within 5 s.
  int port = freePort();
  std::string address = "tcp://127.0.0.1:" + std::to_string(port);
  ProcessGuard worker(detail::spawnProcess(
      DTORCH_WORKER_PATH, {"--listen", address, "--token", "hand", "--ranks",
                           "0-1", "--world-size", "2"}));
  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  pid_t controller = fork();
  if (controller == 0) {
    close(pipeFds[0]);
    char ok = 'n';
    try {
      ClusterOptions options;
      options.workerAddresses = {address};
      options.token = "hand";
      Cluster cluster(options);
      cluster.put(1, 1, makeTensor<float>(wire::F32, {2}, {1.f, 2.f}));
      Tensor back = cluster.fetch(1, 1).get();
      if (cluster.worldSize() == 2 && back.data_as<float>()[1] == 2.f)
        ok = 'y';
      ssize_t ignored = write(pipeFds[1], &ok, 1);
      (void)ignored;
      raise(SIGKILL); // vanish while the cluster is up: no shutdown message
    } catch (...) {
    }
    ssize_t ignored = write(pipeFds[1], &ok, 1);
    (void)ignored;
    raise(SIGKILL); // vanish without shutting anything down
  }
  ProcessGuard controllerGuard(controller);
  close(pipeFds[1]);
  char ok = 0;
  ASSERT_EQ(read(pipeFds[0], &ok, 1), 1);
  close(pipeFds[0]);
  EXPECT_EQ(ok, 'y') << "the manual-mode cluster did not work";
  controllerGuard.waitExit(Ms(2000));
  auto start = std::chrono::steady_clock::now();
  std::string how = worker.waitExit(Ms(6000));
  EXPECT_EQ(how, "exited with status 3")
      << "worker still running after the controller died?";
  EXPECT_LT(std::chrono::steady_clock::now() - start, Ms(5000));
}

TEST(Cluster, VersionMismatchFailsTheHandshake) {
  // A fake worker that answers the controller's Hello with another version.
  int port = freePort();
  std::string address = "tcp://127.0.0.1:" + std::to_string(port);
  zmq::context_t context;
  zmq::socket_t fake(context, zmq::socket_type::router);
  fake.set(zmq::sockopt::linger, 0);
  fake.bind(address);
  std::thread responder([&] {
    std::vector<zmq::message_t> frames(2);
    fake.set(zmq::sockopt::rcvtimeo, 5000);
    if (!fake.recv(frames[0]) || !fake.recv(frames[1]))
      return;
    wire::Envelope reply;
    reply.set_protocol_version(wire::PROTOCOL_VERSION + 1);
    *reply.mutable_hello() = makeHello(wire::ROLE_WORKER, "t");
    reply.mutable_hello()->set_protocol_version(wire::PROTOCOL_VERSION + 1);
    reply.mutable_hello()->set_num_ranks(1);
    fake.send(frames[0], zmq::send_flags::sndmore);
    fake.send(zmq::buffer(encodeEnvelope(reply)), zmq::send_flags::none);
    zmq::message_t refusal; // the controller's error reply
    (void)fake.recv(refusal);
  });
  ClusterOptions options;
  options.workerAddresses = {address};
  options.token = "t";
  try {
    Cluster cluster(options);
    ADD_FAILURE() << "expected the handshake to fail";
  } catch (const WorkerError &error) {
    std::string message = error.what();
    EXPECT_NE(
        message.find("version " + std::to_string(wire::PROTOCOL_VERSION + 1)),
        std::string::npos)
        << message;
    EXPECT_NE(message.find("this side speaks version " +
                           std::to_string(wire::PROTOCOL_VERSION)),
              std::string::npos)
        << message;
  }
  responder.join();
}

} // namespace
} // namespace dtorch::rt::test
