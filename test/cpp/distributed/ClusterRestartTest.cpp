// Cluster::restart on real dtorch-worker processes: a killed worker is
// replaced by a fresh process hosting the same ranks, survivors keep their
// tensors and rebuild their communicators (a collective over every rank
// works again, through host shared memory and through Gloo), a stopped
// survivor is replaced after the idle bound, and nothing is left behind.
#include "DistributedTestSupport.h"
#include "ScopedEnvironment.h"
#include "TestSupport.h"

#include "dtorch/runtime/Cluster.h"
#include "dtorch/runtime/Worker.h"

#include <csignal>

namespace dtorch::rt::test {
namespace {

namespace wire = ::dtorch::wire;
using Ms = std::chrono::milliseconds;
using testsupport::ScopedEnvironment;
using Clock = std::chrono::steady_clock;

ClusterOptions localOptions() { return embeddedClusterOptions(); }

// out = all_reduce_sum(x + y) over ranks 0-3 (spans both processes).
Program addAllReduce() { return addThenAllReduceProgram(3); }

std::vector<float> inputOf(int rank, int round) {
  return {float(rank + round), float(2 * rank), float(round)};
}

// Uploads addAllReduce under `id` to every rank, puts fresh inputs, runs it
// and checks every rank's sum.
void expectAllReduceWorks(Cluster &cluster, uint64_t id, int round) {
  std::vector<float> expected(3, 0.f);
  for (int rank = 0; rank < 4; ++rank) {
    Program placed = onOneRankMesh(addAllReduce());
    cluster.uploadPrograms(id, {&placed}, {rank});
    std::vector<float> x = inputOf(rank, round), y(3, 1.f);
    for (int i = 0; i < 3; ++i)
      expected[i] += x[i] + y[i];
    cluster.put(rank, 500, makeTensor<float>(wire::F32, {3}, x));
    cluster.put(rank, 501, makeTensor<float>(wire::F32, {3}, y));
    cluster.run(rank, id, {500, 501}, {502});
  }
  for (int rank = 0; rank < 4; ++rank) {
    auto value = cluster.fetch(rank, 502);
    ASSERT_EQ(value.wait_for(Ms(20000)), std::future_status::ready);
    EXPECT_EQ(valuesOf<float>(value.get()), expected) << "rank " << rank;
  }
  cluster.synchronize();
}

// Waits until the cluster noticed that `rank`'s worker died.
void waitUntilDead(Cluster &cluster, int rank) {
  auto deadline = Clock::now() + Ms(5000);
  while (Clock::now() < deadline) {
    try {
      cluster.fetch(rank, 1).get();
    } catch (const WorkerError &e) {
      if (std::string(e.what()).find("killed by signal") != std::string::npos)
        return;
    }
    std::this_thread::sleep_for(Ms(20));
  }
  FAIL() << "rank " << rank << "'s death was not noticed";
}

void killedWorkerIsReplacedAndSurvivorsKeepTheirTensors() {
  std::vector<int64_t> pids;
  {
    Cluster cluster(localOptions());
    expectAllReduceWorks(cluster, 1, 0);
    for (int rank = 0; rank < 4; ++rank) {
      pids.push_back(cluster.pidOf(rank));
      cluster.put(rank, 10, makeTensor<float>(wire::F32, {1}, {rank * 1.5f}));
    }
    cluster.synchronize();

    for (int round = 1; round <= 2; ++round) {
      // Round 1 kills ranks 2-3's process, round 2 ranks 0-1's.
      int victim = round == 1 ? 2 : 0, survivor = round == 1 ? 0 : 2;
      int64_t victimPid = cluster.pidOf(victim);
      ASSERT_EQ(kill(static_cast<pid_t>(victimPid), SIGKILL), 0);
      waitUntilDead(cluster, victim);
      EXPECT_THROW(cluster.synchronize(), WorkerError);
      auto start = Clock::now();
      RestartReport report = cluster.restart();
      double seconds =
          std::chrono::duration<double>(Clock::now() - start).count();
      std::printf("restart %d: %.3f s, generation %llu\n", round, seconds,
                  static_cast<unsigned long long>(report.generation));
      EXPECT_LT(seconds, 10.0);
      std::vector<int> lost = {victim, victim + 1};
      EXPECT_EQ(report.replacedRanks, lost);
      for (const std::string &reason : report.reasons)
        std::printf("  replaced: %s\n", reason.c_str());
      EXPECT_EQ(report.generation, static_cast<uint64_t>(round));
      EXPECT_NE(cluster.pidOf(victim), victimPid);
      EXPECT_EQ(cluster.pidOf(victim), cluster.pidOf(victim + 1));
      for (int64_t pid : {cluster.pidOf(0), cluster.pidOf(2)})
        pids.push_back(pid);
      // The survivor's tensor is intact; the replacement holds nothing.
      for (int rank : {survivor, survivor + 1})
        EXPECT_EQ(valuesOf<float>(cluster.fetch(rank, 10).get()),
                  std::vector<float>{rank * 1.5f});
      EXPECT_THROW(cluster.fetch(victim, 10).get(), WorkerError);
      cluster.synchronize(); // no error of the dead worker is left
      // A collective over every rank works on the new generation; the
      // program is uploaded again (the new process has none).
      expectAllReduceWorks(cluster, 1, round);
      for (int rank : {victim, victim + 1})
        cluster.put(rank, 10, makeTensor<float>(wire::F32, {1}, {rank * 1.5f}));
    }
    auto stop = Clock::now();
    cluster.shutdown();
    EXPECT_LT(Clock::now() - stop, Ms(2000));
  }
  for (int64_t pid : pids)
    EXPECT_FALSE(processAlive(pid)) << "pid " << pid << " left behind";
}

TEST(ClusterRestart, KilledWorkerIsReplacedOnHostSharedMemory) {
  killedWorkerIsReplacedAndSurvivorsKeepTheirTensors();
}

TEST(ClusterRestart, KilledWorkerIsReplacedOnGloo) {
  ScopedEnvironment gloo("DTORCH_HOST_SHM", "0");
  killedWorkerIsReplacedAndSurvivorsKeepTheirTensors();
}

TEST(ClusterRestart, WithNothingDeadKeepsEveryProcessAndTensor) {
  Cluster cluster(localOptions());
  expectAllReduceWorks(cluster, 1, 0);
  std::vector<int64_t> pids;
  for (int rank = 0; rank < 4; ++rank)
    pids.push_back(cluster.pidOf(rank));
  RestartReport report = cluster.restart();
  EXPECT_TRUE(report.replacedRanks.empty());
  EXPECT_EQ(report.generation, 1u);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(cluster.pidOf(rank), pids[rank]);
    // The result of the run before the restart is still there.
    EXPECT_EQ(valuesOf<float>(cluster.fetch(rank, 502).get()).size(), 3u);
  }
  // The same program id runs again without a new upload.
  expectAllReduceWorks(cluster, 1, 1);
}

TEST(ClusterRestart, StoppedSurvivorIsReplacedAfterTheIdleBound) {
  std::vector<int64_t> pids;
  {
    Cluster cluster(localOptions());
    expectAllReduceWorks(cluster, 1, 0);
    pids = {cluster.pidOf(0), cluster.pidOf(2)};
    ASSERT_EQ(kill(static_cast<pid_t>(pids[1]), SIGKILL), 0);
    waitUntilDead(cluster, 2);
    // Ranks 0-1's process cannot answer the reset.
    ASSERT_EQ(kill(static_cast<pid_t>(pids[0]), SIGSTOP), 0);
    auto start = Clock::now();
    RestartReport report = cluster.restart(Ms(300));
    double seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    std::printf("restart with a stopped survivor: %.3f s\n", seconds);
    EXPECT_EQ(report.replacedRanks, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_NE(cluster.pidOf(0), pids[0]);
    pids.push_back(cluster.pidOf(0));
    pids.push_back(cluster.pidOf(2));
    expectAllReduceWorks(cluster, 1, 1);
    cluster.shutdown();
  }
  for (int64_t pid : pids)
    EXPECT_FALSE(processAlive(pid)) << "pid " << pid << " left behind";
}

WorkerOptions parseArgs(std::vector<std::string> args) {
  args.insert(args.begin(), "dtorch-worker");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  return parseWorkerArgs(static_cast<int>(argv.size()), argv.data());
}

TEST(ClusterRestart, WorkerTakesTheGenerationOfARestart) {
  std::vector<std::string> base = {
      "--connect", "tcp://127.0.0.1:1", "--token", "t", "--ranks",
      "0-1",       "--world-size",      "4"};
  EXPECT_EQ(parseArgs(base).generation, 0u);
  std::vector<std::string> restarted = base;
  restarted.insert(restarted.end(), {"--generation", "7"});
  EXPECT_EQ(parseArgs(restarted).generation, 7u);
  std::vector<std::string> invalid = base;
  invalid.insert(invalid.end(), {"--generation", "x"});
  EXPECT_THROW(parseArgs(invalid), RuntimeError);
  std::vector<std::string> negative = base;
  negative.insert(negative.end(), {"--generation", "-1"});
  EXPECT_THROW(parseArgs(negative), RuntimeError);
}

} // namespace
} // namespace dtorch::rt::test
