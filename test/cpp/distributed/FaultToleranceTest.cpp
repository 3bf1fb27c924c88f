// Failing fast on a lost worker (docs/guide/faults.md): the ranks a value
// needs (RunDependencies), the dead-rank registry of a worker (PeerHealth),
// a Gloo wait interrupted when its peer is declared dead, and, end to end,
// a survivor stuck waiting for a stopped peer that never attached: the
// controller names the peer unresponsive, the survivor gives up at once and
// serves the next request.
#include "DistributedTestSupport.h"
#include "RunDependencies.h"
#include "TestSupport.h"

#include "dtorch/runtime/Cluster.h"
#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/InMemoryKeyValueStore.h"
#include "dtorch/runtime/PeerHealth.h"
#include "dtorch/runtime/Worker.h"

#include <condition_variable>
#include <map>
#include <mutex>

namespace dtorch::rt::test {
namespace {

namespace wire = ::dtorch::wire;
using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(PeerHealth, DeclaresRanksDeadOnceAndTellsListeners) {
  PeerHealth health;
  EXPECT_FALSE(health.anyDead());
  EXPECT_EQ(health.deadAmong({0, 1, 2}), "");
  std::vector<std::set<int64_t>> heard;
  int id = health.subscribe(
      [&](const std::set<int64_t> &ranks, const std::string &reason) {
        heard.push_back(ranks);
        EXPECT_EQ(reason, "killed");
        // A listener may query (the registry is already updated).
        EXPECT_TRUE(health.isDead(*ranks.begin()));
      });
  health.declareDead({2, 3}, "killed");
  health.declareDead({3}, "killed"); // nothing new: no call
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0], (std::set<int64_t>{2, 3}));
  EXPECT_TRUE(health.anyDead());
  EXPECT_EQ(health.deadAmong({0, 1}), "");
  EXPECT_EQ(health.deadAmong({1, 3}), "rank 3: killed");
  health.unsubscribe(id);
  health.declareDead({5}, "killed");
  EXPECT_EQ(heard.size(), 1u);
  health.clear();
  EXPECT_FALSE(health.anyDead());
  EXPECT_FALSE(health.isDead(5));
  health.declareDead({5}, "again");
  EXPECT_EQ(health.deadAmong({5}), "rank 5: again");
}

WorkerOptions parseArgs(std::vector<std::string> args) {
  args.insert(args.begin(), "dtorch-worker");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  return parseWorkerArgs(static_cast<int>(argv.size()), argv.data());
}

// The embedded cluster passes its heartbeat interval to its workers.
TEST(WorkerArgs, HeartbeatIntervalIsParsedAndChecked) {
  std::vector<std::string> base = {
      "--connect", "tcp://127.0.0.1:5555", "--token", "t", "--ranks",
      "0-1",       "--world-size",         "2"};
  EXPECT_EQ(parseArgs(base).transport.heartbeatInterval, Ms(500));
  auto with = [&](const std::string &value) {
    std::vector<std::string> args = base;
    args.push_back("--heartbeat-ms");
    args.push_back(value);
    return parseArgs(args);
  };
  EXPECT_EQ(with("120").transport.heartbeatInterval, Ms(120));
  EXPECT_THROW(with("0"), RuntimeError);
  EXPECT_THROW(with("often"), RuntimeError);
}

Program allReduceOn(std::vector<int64_t> group) {
  ProgramBuilder b;
  int x = b.input(wire::F32, {3});
  int y = b.buffer(wire::F32, {3});
  auto &reduce = b.add("all_reduce", {x}, {y}, wire::COMM);
  setInts(reduce, "group", group);
  setString(reduce, "reduce", "sum");
  b.output(y);
  return b.program();
}

// Runs of a program share one involved-rank list (no sort per run), and so
// do programs on the same ranks; the values they make share it too.
TEST(RunDependencies, RunsShareOneRankListPerProgramAndRanks) {
  detail::RunDependencies deps;
  Program reduce = allReduceOn({0, 2});
  deps.setProgramRanks(7, {&reduce}, {0});
  deps.setProgramRanks(8, {}, {0, 2});
  deps.setProgramRanks(9, {}, {1, 3});
  detail::RunDependencies::Ranks first = deps.involvedRanks(7, {0});
  EXPECT_EQ(*first, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(deps.involvedRanks(7, {0}).get(), first.get());
  EXPECT_EQ(deps.involvedRanks(8, {2, 0}).get(), first.get()); // same ranks
  detail::RunDependencies::Ranks other = deps.involvedRanks(9, {3, 1});
  EXPECT_EQ(*other, (std::vector<int64_t>{1, 3}));
  EXPECT_NE(other.get(), first.get());
  deps.recordRunShared(first, {}, {10});
  deps.recordRunShared(deps.involvedRanks(8, {0, 2}), {10}, {11});
  EXPECT_EQ(deps.neededList(10), first.get());
  EXPECT_EQ(deps.neededList(11), first.get());
  // Reading a value of other ranks: the union, a list of its own.
  deps.recordRunShared(other, {11}, {12});
  ASSERT_NE(deps.neededList(12), nullptr);
  EXPECT_EQ(*deps.neededList(12), (std::vector<int64_t>{0, 1, 2, 3}));
  std::vector<bool> lost = {false, false, true, false};
  EXPECT_EQ(deps.needs(12, lost), 2);
  EXPECT_EQ(deps.needs(11, lost), 2);
  EXPECT_EQ(deps.neededList(99), nullptr);
  // A program uploaded again under its id gets its ranks again.
  deps.setProgramRanks(7, {}, {1});
  EXPECT_EQ(*deps.involvedRanks(7, {1}), (std::vector<int64_t>{1}));
}

TEST(RunDependencies, ValuesNeedTheirRunsRanksThroughTheDataFlow) {
  detail::RunDependencies deps;
  Program reduce = allReduceOn({0, 2});
  // A program on a one-rank mesh whose collective names rank 2.
  deps.setProgramRanks(7, {&reduce}, {0});
  EXPECT_EQ(deps.involved(7, {0}), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(deps.involved(99, {3, 1}), (std::vector<int64_t>{1, 3}));
  std::vector<bool> lost = {false, false, true, false, false, false};
  deps.recordRun({0, 2}, {}, {10});
  deps.recordRun({0, 1}, {}, {11, 12});
  EXPECT_EQ(deps.needs(10, lost), 2);
  EXPECT_EQ(deps.needs(11, lost), -1);
  EXPECT_EQ(deps.needs(99, lost), -1); // unknown (a put value)
  // A run of survivors reading a value that needed rank 2 needs it too.
  deps.recordRun({0, 1}, {11, 10}, {13});
  EXPECT_EQ(deps.needs(13, lost), 2);
  // Outputs of runs on the same ranks share one list.
  deps.recordRun({0, 1}, {11}, {14});
  EXPECT_EQ(deps.needs(14, lost), -1);
  EXPECT_EQ(deps.handlesTracked(), 5u);
  deps.forget(10);
  EXPECT_EQ(deps.needs(10, lost), -1);
  deps.poison(20, detail::LostValue{2, "h", "gone"});
  ASSERT_NE(deps.poisoned(20), nullptr);
  EXPECT_EQ(deps.poisoned(20)->message, "gone");
  deps.recordRun({0}, {}, {20}); // made again: no longer poisoned
  EXPECT_EQ(deps.poisoned(20), nullptr);
  deps.forget(20);
  EXPECT_EQ(deps.handlesTracked(), 4u);
  // When rank 2 is lost, every value needing it is lost for good.
  EXPECT_EQ(deps.poisonNeeding(lost,
                               [](int64_t rank) {
                                 return detail::LostValue{
                                     static_cast<int>(rank), "h", "lost"};
                               }),
            1u); // 13 (10 was forgotten)
  ASSERT_NE(deps.poisoned(13), nullptr);
  EXPECT_EQ(deps.poisoned(13)->rank, 2);
  EXPECT_EQ(deps.poisoned(11), nullptr);
  EXPECT_EQ(deps.handlesTracked(), 3u);
}

// Rank 0 waits (deadline 20 s) in a receive and then in an all_reduce for
// rank 1, which is alive but never takes part; declaring rank 1 dead ends
// each wait within a fraction of a second, naming it.
TEST(GlooCollectives, AWaitForARankDeclaredDeadGivesUpAtOnce) {
  auto store = std::make_shared<InMemoryKeyValueStore>();
  auto health = std::make_shared<PeerHealth>();
  GlooOptions options;
  options.deadline = std::chrono::seconds(20);
  options.health = health;
  std::vector<std::unique_ptr<Communicator>> comms(2);
  runRanks(
      2, [&](int rank) { comms[rank] = connectGloo(rank, 2, store, options); });
  for (const char *call : {"recv", "all_reduce"}) {
    health->clear();
    Tensor x = makeTensor<float>(wire::F32, {3}, {1, 2, 3});
    Tensor out = Tensor::empty(wire::F32, {3});
    std::thread declare([&] {
      std::this_thread::sleep_for(Ms(200));
      health->declareDead({1}, "worker pid 9 (ranks 1-1) killed by signal 9");
    });
    auto start = Clock::now();
    std::string message;
    try {
      if (std::string(call) == "recv")
        comms[0]->recv(out, 1, 5);
      else
        comms[0]->all_reduce(x, out, {0, 1}, ReduceOp::Sum);
      ADD_FAILURE() << call << " returned";
    } catch (const RuntimeError &error) {
      message = error.what();
    }
    declare.join();
    auto took = Clock::now() - start;
    EXPECT_LT(took, Ms(1500)) << call << ": " << message;
    EXPECT_GE(took, Ms(150)) << call << ": " << message;
    EXPECT_NE(message.find("gave up: peer rank 1: worker pid 9"),
              std::string::npos)
        << message;
    if (std::string(call) == "recv") {
      // The communicator is unusable afterwards (as after any failure):
      // a new one is made for a new world.
      comms[0].reset();
      comms[1].reset();
      store = std::make_shared<InMemoryKeyValueStore>();
      options.prefix = "gloo2";
      runRanks(2, [&](int rank) {
        comms[rank] = connectGloo(rank, 2, store, options);
      });
    }
  }
  // Already declared: a new call needing rank 1 fails without waiting.
  health->declareDead({1}, "stopped answering");
  store = std::make_shared<InMemoryKeyValueStore>();
  options.prefix = "gloo3";
  comms[0].reset();
  comms[1].reset();
  runRanks(
      2, [&](int rank) { comms[rank] = connectGloo(rank, 2, store, options); });
  Tensor out = Tensor::empty(wire::F32, {3});
  auto start = Clock::now();
  EXPECT_THROW(comms[0]->recv(out, 1, 6), RuntimeError);
  EXPECT_LT(Clock::now() - start, Ms(500));
}

ClusterOptions quickOptions() {
  ClusterOptions options = embeddedClusterOptions();
  options.heartbeatInterval = Ms(100);
  options.peerTimeout = Ms(800);
  return options;
}

// Rank 0 runs an all_reduce with rank 2, whose worker is stopped before it
// ever attaches: no pid to watch, only the controller can end the wait.
TEST(ClusterFaults, SurvivorStuckOnAStoppedPeerGivesUpAndServesAgain) {
  std::vector<int64_t> pids;
  {
    Cluster cluster(quickOptions());
    for (int rank = 0; rank < 4; ++rank)
      pids.push_back(cluster.pidOf(rank));
    Program local = onOneRankMesh(allReduceOn({0}));
    Program withRank2 = onOneRankMesh(allReduceOn({0, 2}));
    cluster.uploadPrograms(1, {&withRank2}, {0});
    cluster.uploadPrograms(2, {&local}, {0});
    cluster.put(0, 10, makeTensor<float>(wire::F32, {3}, {1, 2, 3}));
    ASSERT_EQ(kill(static_cast<pid_t>(pids[2]), SIGSTOP), 0);
    auto stopped = Clock::now();
    cluster.run(0, 1, {10}, {11});
    auto lost = cluster.fetch(0, 11);
    ASSERT_EQ(lost.wait_for(Ms(3000)), std::future_status::ready);
    try {
      lost.get();
      ADD_FAILURE() << "expected a WorkerError";
    } catch (const WorkerError &error) {
      std::string message = error.what();
      EXPECT_GE(error.rank(), 2) << message;
      EXPECT_NE(message.find("is unresponsive"), std::string::npos) << message;
    }
    EXPECT_LT(Clock::now() - stopped, Ms(800 + 1000));
    // Rank 0 is idle again: it answers a request queued behind the run.
    auto stats = cluster.memoryStats(0);
    ASSERT_EQ(stats.wait_for(Ms(1000)), std::future_status::ready)
        << "rank 0 still stuck";
    EXPECT_EQ(stats.get().rank, 0);
    // ... and runs work that needs no lost rank.
    cluster.run(0, 2, {10}, {12});
    EXPECT_EQ(valuesOf<float>(cluster.fetch(0, 12).get()),
              (std::vector<float>{1, 2, 3}));
    // Work that needs a lost rank is not sent: it fails at once.
    auto start = Clock::now();
    cluster.run(0, 1, {10}, {13});
    EXPECT_THROW(cluster.fetch(0, 13).get(), WorkerError);
    EXPECT_THROW(cluster.synchronize(), WorkerError);
    EXPECT_TRUE(cluster.anyRankLost({0, 2}));
    EXPECT_FALSE(cluster.anyRankLost({0, 1}));
    EXPECT_LT(Clock::now() - start, Ms(100));
    auto stop = Clock::now();
    cluster.shutdown();
    EXPECT_LT(Clock::now() - stop, Ms(2000));
  }
  for (int64_t pid : pids)
    EXPECT_FALSE(processAlive(pid)) << "pid " << pid << " left behind";
}

} // namespace
} // namespace dtorch::rt::test
