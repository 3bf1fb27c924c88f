// dtorch-worker started by a launcher: ranks, world size, ranks on the host
// and the listen address from Slurm's or torchrun's variables
// (WorkerLaunch.h), explicit flags winning, and errors naming the variable.
#include "dtorch/runtime/WorkerLaunch.h"
#include "dtorch/runtime/Tensor.h"
#include "dtorch/runtime/Worker.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace dtorch::rt {
namespace {

using Env = std::map<std::string, std::string>;

EnvironmentLookup lookup(const Env &env) {
  return [env](const std::string &name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end() || it->second.empty())
      return std::nullopt;
    return it->second;
  };
}

WorkerOptions parse(std::vector<std::string> args, const Env &env) {
  args.insert(args.begin(), "dtorch-worker");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  Env withToken = env;
  withToken.emplace("DTORCH_TOKEN", "secret");
  return parseWorkerArgs(static_cast<int>(argv.size()), argv.data(),
                         lookup(withToken));
}

// The message of the RuntimeError `body` throws ("" when none).
template <typename F> std::string errorOf(F body) {
  try {
    body();
  } catch (const RuntimeError &e) {
    return e.what();
  }
  return "";
}

Env slurmTask(int procid, int ntasks, int localid, int nodeid,
              const std::string &tasksPerNode, const std::string &nodes) {
  return {{"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_NTASKS", std::to_string(ntasks)},
          {"SLURM_LOCALID", std::to_string(localid)},
          {"SLURM_NODEID", std::to_string(nodeid)},
          {"SLURM_TASKS_PER_NODE", tasksPerNode},
          {"SLURM_JOB_NODELIST", nodes}};
}

TEST(WorkerLaunch, SlurmTaskOnOneNode) {
  WorkerOptions o = parse({}, slurmTask(1, 2, 1, 0, "2", "node7"));
  EXPECT_EQ(o.firstRank, 1);
  EXPECT_EQ(o.numRanks, 1);
  EXPECT_EQ(o.worldSize, 2);
  EXPECT_EQ(o.ranksOnHost, 2);
  EXPECT_EQ(o.listen, "tcp://127.0.0.1:29501"); // 29500 + SLURM_LOCALID
  EXPECT_EQ(o.glooHost, "127.0.0.1");
  EXPECT_NE(o.launchDescription.find("SLURM_PROCID=1"), std::string::npos);
}

TEST(WorkerLaunch, SlurmAcrossNodesWithRanksPerWorker) {
  // Task 3 of 4 (2 per node on 2 nodes) is the second task of node 1.
  Env env = slurmTask(3, 4, 1, 1, "2(x2)", "node[01-02]");
  env["DTORCH_BIND_ADDRESS"] = "10.213.9.2";
  env["DTORCH_WORKER_PORT"] = "6000";
  WorkerOptions o = parse({"--ranks-per-worker", "2"}, env);
  EXPECT_EQ(o.firstRank, 6);
  EXPECT_EQ(o.numRanks, 2);
  EXPECT_EQ(o.worldSize, 8);
  EXPECT_EQ(o.ranksOnHost, 4);
  EXPECT_EQ(o.listen, "tcp://10.213.9.2:6001");
  EXPECT_EQ(o.glooHost, "10.213.9.2"); // the bind address, explicitly given
}

TEST(WorkerLaunch, SlurmAcrossNodesNeedsABindAddress) {
  std::string error =
      errorOf([] { parse({}, slurmTask(0, 4, 0, 0, "2(x2)", "n[1-2]")); });
  EXPECT_NE(error.find("spans 2 nodes"), std::string::npos) << error;
  EXPECT_NE(error.find("DTORCH_BIND_ADDRESS"), std::string::npos) << error;
}

TEST(WorkerLaunch, SlurmErrorsNameTheVariable) {
  Env missing = slurmTask(0, 2, 0, 0, "2", "n1");
  missing.erase("SLURM_NTASKS");
  EXPECT_NE(
      errorOf([&] { parse({}, missing); }).find("SLURM_NTASKS is not set"),
      std::string::npos);
  Env malformed = slurmTask(0, 2, 0, 0, "2", "n1");
  malformed["SLURM_LOCALID"] = "one";
  EXPECT_NE(errorOf([&] {
              parse({}, malformed);
            }).find("SLURM_LOCALID='one' is not a whole number"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              parse({}, slurmTask(2, 2, 0, 0, "2", "n1"));
            }).find("SLURM_PROCID=2 is not below SLURM_NTASKS=2"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              parse({}, slurmTask(0, 2, 2, 0, "2", "n1"));
            }).find("SLURM_LOCALID=2"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              parse({}, slurmTask(0, 2, 0, 3, "2", "n[1-2]"));
            }).find("SLURM_NODEID=3"),
            std::string::npos);
  Env badList = slurmTask(0, 2, 0, 0, "2", "n[1-2");
  EXPECT_NE(errorOf([&] { parse({}, badList); }).find("SLURM_JOB_NODELIST"),
            std::string::npos);
}

TEST(WorkerLaunch, ExplicitFlagsWinOverSlurm) {
  WorkerOptions o = parse({"--ranks", "0-3", "--world-size", "8"},
                          slurmTask(1, 2, 1, 0, "2", "n1"));
  EXPECT_EQ(o.firstRank, 0);
  EXPECT_EQ(o.numRanks, 4);
  EXPECT_EQ(o.worldSize, 8);
  EXPECT_EQ(o.listen, "tcp://127.0.0.1:29501"); // still from the launcher
  EXPECT_NE(o.launchDescription.find("explicit flags win: --ranks "
                                     "--world-size"),
            std::string::npos)
      << o.launchDescription;
  // Everything explicit: the environment is not even read, so a broken
  // launcher variable does not matter.
  Env broken = slurmTask(0, 2, 0, 0, "2", "n1");
  broken["SLURM_NTASKS"] = "x";
  WorkerOptions manual = parse({"--listen", "tcp://127.0.0.1:7000", "--ranks",
                                "0-1", "--world-size", "2"},
                               broken);
  EXPECT_EQ(manual.listen, "tcp://127.0.0.1:7000");
  EXPECT_TRUE(manual.launchDescription.empty());
  // An embedded (--connect) worker never looks at a launcher, nor at the
  // bind settings of the client's environment it inherits: its collective
  // links stay on loopback.
  broken["DTORCH_BIND_ADDRESS"] = "10.213.6.2";
  broken["DTORCH_WORKER_PORT"] = "not-a-port";
  WorkerOptions embedded = parse({"--connect", "tcp://127.0.0.1:7000",
                                  "--ranks", "0", "--world-size", "1"},
                                 broken);
  EXPECT_EQ(embedded.connect, "tcp://127.0.0.1:7000");
  EXPECT_EQ(embedded.glooHost, "127.0.0.1");
}

Env torchrunProcess(int rank, int world, int local, int localWorld) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(local)},
          {"LOCAL_WORLD_SIZE", std::to_string(localWorld)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", "29400"}};
}

TEST(WorkerLaunch, TorchrunVariables) {
  WorkerOptions o = parse({}, torchrunProcess(2, 4, 0, 4));
  EXPECT_EQ(o.firstRank, 2);
  EXPECT_EQ(o.numRanks, 1);
  EXPECT_EQ(o.worldSize, 4);
  EXPECT_EQ(o.ranksOnHost, 4);
  // MASTER_ADDR is this host: loopback; port MASTER_PORT + 1 + LOCAL_RANK.
  EXPECT_EQ(o.listen, "tcp://127.0.0.1:29401");
  WorkerOptions second = parse({"--ranks-per-worker", "3", "--port", "7100"},
                               torchrunProcess(3, 4, 3, 4));
  EXPECT_EQ(second.firstRank, 9);
  EXPECT_EQ(second.numRanks, 3);
  EXPECT_EQ(second.worldSize, 12);
  EXPECT_EQ(second.ranksOnHost, 12);
  EXPECT_EQ(second.listen, "tcp://127.0.0.1:7103");
}

TEST(WorkerLaunch, TorchrunWithoutMasterWhenBindAndPortAreGiven) {
  // As the Kubernetes StatefulSet starts it: RANK from the pod's index, the
  // pod's address and a fixed port; MASTER_ADDR/MASTER_PORT are not needed.
  Env env = {{"RANK", "1"},
             {"WORLD_SIZE", "3"},
             {"LOCAL_RANK", "0"},
             {"LOCAL_WORLD_SIZE", "1"},
             {"DTORCH_BIND_ADDRESS", "10.1.2.3"},
             {"DTORCH_WORKER_PORT", "29500"}};
  WorkerOptions o = parse({}, env);
  EXPECT_EQ(o.firstRank, 1);
  EXPECT_EQ(o.worldSize, 3);
  EXPECT_EQ(o.listen, "tcp://10.1.2.3:29500");
  EXPECT_EQ(o.glooHost, "10.1.2.3");
  env.erase("DTORCH_WORKER_PORT");
  EXPECT_NE(errorOf([&] { parse({}, env); }).find("MASTER_PORT is not set"),
            std::string::npos);
}

TEST(WorkerLaunch, AnExplicitListenNeedsNoAddressVariables) {
  // --listen given: ranks still come from the launcher, but neither
  // MASTER_ADDR/MASTER_PORT nor a Slurm bind address is needed.
  Env env = torchrunProcess(1, 4, 0, 2);
  env.erase("MASTER_ADDR");
  env.erase("MASTER_PORT");
  WorkerOptions o = parse({"--listen", "tcp://10.213.5.2:6000"}, env);
  EXPECT_EQ(o.firstRank, 1);
  EXPECT_EQ(o.worldSize, 4);
  EXPECT_EQ(o.listen, "tcp://10.213.5.2:6000");
  EXPECT_EQ(o.glooHost, "10.213.5.2");
  WorkerOptions slurm = parse({"--listen", "tcp://10.213.5.2:6000"},
                              slurmTask(3, 4, 1, 1, "2(x2)", "n[1-2]"));
  EXPECT_EQ(slurm.firstRank, 3);
  EXPECT_EQ(slurm.listen, "tcp://10.213.5.2:6000");
  EXPECT_NE(slurm.launchDescription.find("explicit flags win: --listen"),
            std::string::npos);
}

TEST(WorkerLaunch, TorchrunErrorsNameTheVariable) {
  Env noMaster = torchrunProcess(0, 2, 0, 2);
  noMaster.erase("MASTER_ADDR");
  EXPECT_NE(
      errorOf([&] { parse({}, noMaster); }).find("MASTER_ADDR is not set"),
      std::string::npos);
  Env badPort = torchrunProcess(0, 2, 0, 2);
  badPort["MASTER_PORT"] = "70000";
  EXPECT_NE(errorOf([&] { parse({}, badPort); }).find("MASTER_PORT=70000"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              parse({}, torchrunProcess(2, 2, 0, 2));
            }).find("RANK=2 is not below WORLD_SIZE=2"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              parse({}, torchrunProcess(0, 2, 2, 2));
            }).find("LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"),
            std::string::npos);
  Env noLocal = torchrunProcess(0, 2, 0, 2);
  noLocal.erase("LOCAL_RANK");
  EXPECT_NE(errorOf([&] { parse({}, noLocal); }).find("LOCAL_RANK is not set"),
            std::string::npos);
  // Two hosts' worth of processes, but MASTER_ADDR is loopback here: the
  // other host could not reach this worker.
  std::string loopback =
      errorOf([] { parse({}, torchrunProcess(0, 4, 0, 2)); });
  EXPECT_NE(loopback.find("MASTER_ADDR=127.0.0.1"), std::string::npos)
      << loopback;
  EXPECT_NE(loopback.find("--bind-address"), std::string::npos) << loopback;
  Env unresolvable = torchrunProcess(0, 2, 0, 2);
  unresolvable["MASTER_ADDR"] = "no-such-host.invalid";
  EXPECT_NE(errorOf([&] { parse({}, unresolvable); }).find("MASTER_ADDR"),
            std::string::npos);
}

TEST(WorkerLaunch, ConflictingLaunchersAndSettings) {
  Env both = torchrunProcess(1, 2, 1, 2);
  for (const auto &[name, value] : slurmTask(0, 2, 0, 0, "2", "n1"))
    both[name] = value;
  std::string error = errorOf([&] { parse({}, both); });
  EXPECT_NE(error.find("SLURM_PROCID=0 vs RANK=1"), std::string::npos) << error;
  // Naming the launcher settles it.
  EXPECT_EQ(parse({"--launcher", "slurm"}, both).firstRank, 0);
  EXPECT_EQ(parse({"--launcher", "torchrun"}, both).firstRank, 1);
  // Agreeing sets are fine.
  Env agreeing = both;
  agreeing["SLURM_PROCID"] = "1";
  agreeing["SLURM_LOCALID"] = "1";
  EXPECT_EQ(parse({}, agreeing).firstRank, 1);
  EXPECT_NE(
      errorOf([&] { parse({"--launcher", "mpi"}, both); }).find("--launcher"),
      std::string::npos);
  Env badSetting = slurmTask(0, 2, 0, 0, "2", "n1");
  badSetting["DTORCH_RANKS_PER_WORKER"] = "0";
  EXPECT_NE(errorOf([&] {
              parse({}, badSetting);
            }).find("$DTORCH_RANKS_PER_WORKER must be at least 1"),
            std::string::npos);
  badSetting = slurmTask(0, 2, 0, 0, "2", "n1");
  badSetting["DTORCH_WORKER_PORT"] = "http";
  EXPECT_NE(errorOf([&] { parse({}, badSetting); }).find("$DTORCH_WORKER_PORT"),
            std::string::npos);
  EXPECT_NE(errorOf([] { parse({"--launcher", "none"}, {}); }).find("--ranks"),
            std::string::npos);
}

TEST(WorkerLaunch, ByHandWithBindAddressAndPort) {
  WorkerOptions o = parse({"--bind-address", "127.0.0.1", "--port", "7200",
                           "--ranks", "0-1", "--world-size", "2"},
                          {});
  EXPECT_EQ(o.listen, "tcp://127.0.0.1:7200");
  // A specific --listen address also becomes the collective address.
  WorkerOptions listened = parse({"--listen", "tcp://10.213.4.2:7300",
                                  "--ranks", "0", "--world-size", "1"},
                                 {});
  EXPECT_EQ(listened.glooHost, "10.213.4.2");
  WorkerOptions wildcard = parse(
      {"--listen", "tcp://*:7300", "--ranks", "0", "--world-size", "1"}, {});
  EXPECT_EQ(wildcard.glooHost, "127.0.0.1");
  // An explicit collective address still wins.
  WorkerOptions both =
      parse({"--listen", "tcp://10.213.4.2:7300", "--collective-address",
             "127.0.0.1", "--ranks", "0", "--world-size", "1"},
            {});
  EXPECT_EQ(both.glooHost, "127.0.0.1");
  EXPECT_NE(errorOf([] {
              parse({"--bind-address", "interface:no-such-if0", "--port",
                     "7200", "--ranks", "0", "--world-size", "1"},
                    {});
            }).find("no-such-if0"),
            std::string::npos);
  EXPECT_EQ(parse({"--bind-address", "interface:lo", "--port", "7200",
                   "--ranks", "0", "--world-size", "1"},
                  {})
                .listen,
            "tcp://127.0.0.1:7200");
}

TEST(WorkerLaunch, HostIdFromFlagOrEnvironment) {
  std::vector<std::string> base = {"--listen", "tcp://127.0.0.1:0", "--ranks",
                                   "0",        "--world-size",      "1"};
  EXPECT_EQ(parse(base, {}).hostId, "");
  EXPECT_EQ(parse(base, {{"DTORCH_HOST_ID", "rack1-a"}}).hostId, "rack1-a");
  std::vector<std::string> flagged = base;
  flagged.insert(flagged.end(), {"--host-id", "b"});
  EXPECT_EQ(parse(flagged, {{"DTORCH_HOST_ID", "rack1-a"}}).hostId, "b");
}

TEST(WorkerLaunch, SlurmListsExpand) {
  EXPECT_EQ(expandSlurmHostList("node[01-03,7],gpu-a", "L"),
            (std::vector<std::string>{"node01", "node02", "node03", "node7",
                                      "gpu-a"}));
  EXPECT_EQ(expandSlurmHostList("a[8-10]b", "L"),
            (std::vector<std::string>{"a8b", "a9b", "a10b"}));
  EXPECT_THROW(expandSlurmHostList("a[3-1]", "L"), RuntimeError);
  EXPECT_EQ(expandSlurmTasksPerNode("2(x3),1", "T"),
            (std::vector<int>{2, 2, 2, 1}));
  EXPECT_THROW(expandSlurmTasksPerNode("2(3)", "T"), RuntimeError);
}

TEST(WorkerLaunch, HostLabelNamesTheDialedAddress) {
  EXPECT_EQ(workerHostLabel("box", "tcp://127.0.0.1:5000"), "box");
  EXPECT_EQ(workerHostLabel("box", "tcp://10.213.1.2:5000"), "box@10.213.1.2");
  EXPECT_EQ(workerHostLabel("w-0", "tcp://w-0.workers.ns.svc:5000"), "w-0");
  EXPECT_EQ(workerHostLabel("box", "ipc:///tmp/x"), "box");
}

// ---- workers that dial in to the controller -----------------------------

Env torchrunWorker(int rank, int world, const std::string &port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", port}};
}

TEST(WorkerDialIn, ControllerFlagDialsWithExplicitRanks) {
  WorkerOptions o =
      parse({"--controller", "ctl:29500", "--ranks", "2-3", "--world-size", "4",
             "--collective-address", "10.1.2.3"},
            {});
  EXPECT_TRUE(o.dialIn);
  EXPECT_EQ(o.connect, "tcp://ctl:29500");
  EXPECT_TRUE(o.listen.empty());
  EXPECT_EQ(o.firstRank, 2);
  EXPECT_EQ(o.numRanks, 2);
  EXPECT_EQ(o.worldSize, 4);
  EXPECT_EQ(o.controllerWait.count(), 600000);
  EXPECT_EQ(o.glooHost, "10.1.2.3");
  // Without a collective or bind address, the controller's host must
  // resolve: its route gives the collectives' address.
  EXPECT_NE(errorOf([] {
              parse({"--controller", "no-such-host.invalid:29500", "--ranks",
                     "0", "--world-size", "1"},
                    {});
            }).find("give --collective-address or --bind-address"),
            std::string::npos);
}

TEST(WorkerDialIn, TorchrunVariablesPlaceAndMasterIsTheController) {
  WorkerOptions o = parse({"--dial-in", "--ranks-per-worker", "2"},
                          torchrunWorker(1, 3, "29400"));
  EXPECT_TRUE(o.dialIn);
  EXPECT_EQ(o.connect, "tcp://127.0.0.1:29400");
  EXPECT_TRUE(o.listen.empty());
  EXPECT_EQ(o.firstRank, 2);
  EXPECT_EQ(o.numRanks, 2);
  EXPECT_EQ(o.worldSize, 6);
  // The collectives bind the address this host reaches the controller from.
  EXPECT_EQ(o.glooHost, "127.0.0.1");
  EXPECT_NE(o.launchDescription.find("torchrun (RANK=1"), std::string::npos);
  // DTORCH_DIAL_IN=1 is the same as --dial-in.
  Env env = torchrunWorker(0, 3, "29400");
  env["DTORCH_DIAL_IN"] = "1";
  EXPECT_EQ(parse({}, env).connect, "tcp://127.0.0.1:29400");
}

TEST(WorkerDialIn, ControllerVariableSelectsDialInAndSlurmPlaces) {
  Env env = slurmTask(1, 2, 1, 0, "2", "node7");
  env["DTORCH_CONTROLLER"] = "tcp://head:29500";
  env["DTORCH_BIND_ADDRESS"] = "127.0.0.1";
  env["DTORCH_CONTROLLER_WAIT_MS"] = "1500";
  WorkerOptions o = parse({}, env);
  EXPECT_TRUE(o.dialIn);
  EXPECT_EQ(o.connect, "tcp://head:29500");
  EXPECT_EQ(o.firstRank, 1);
  EXPECT_EQ(o.worldSize, 2);
  EXPECT_EQ(o.controllerWait.count(), 1500);
  EXPECT_EQ(o.glooHost, "127.0.0.1");
  // DTORCH_DIAL_IN=0 turns the variable off: the worker listens as before.
  env["DTORCH_DIAL_IN"] = "0";
  o = parse({}, env);
  EXPECT_FALSE(o.dialIn);
  EXPECT_EQ(o.listen, "tcp://127.0.0.1:29501");
}

TEST(WorkerDialIn, MistakesAreNamed) {
  EXPECT_NE(errorOf([] {
              parse({"--dial-in", "--ranks", "0", "--world-size", "1"}, {});
            }).find("MASTER_ADDR is not set: a dialing worker"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              parse({"--dial-in", "--ranks", "0", "--world-size", "1"},
                    {{"MASTER_ADDR", "h"}});
            }).find("MASTER_PORT is not set"),
            std::string::npos);
  EXPECT_NE(
      errorOf([] {
        parse({"--controller", "h:0", "--ranks", "0", "--world-size", "1"}, {});
      }).find("--controller='h:0' is not the controller's HOST:PORT"),
      std::string::npos);
  EXPECT_NE(errorOf([] {
              parse({"--controller", "h:1", "--listen", "tcp://127.0.0.1:5",
                     "--ranks", "0", "--world-size", "1"},
                    {});
            }).find("does not listen: drop --listen"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              parse({"--controller", "h:1", "--connect", "tcp://h:2", "--ranks",
                     "0", "--world-size", "1"},
                    {});
            }).find("exclude each other"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              parse({"--dial-in"}, torchrunWorker(3, 3, "29400"));
            }).find("RANK=3 is not below WORLD_SIZE=3"),
            std::string::npos);
  EXPECT_NE(errorOf([] {
              parse({"--controller", "h:1", "--ranks", "0", "--world-size", "1",
                     "--controller-wait-ms", "0"},
                    {});
            }).find("--controller-wait-ms must be positive"),
            std::string::npos);
  // An explicit --listen wins over DTORCH_CONTROLLER.
  WorkerOptions listening = parse(
      {"--listen", "tcp://127.0.0.1:7", "--ranks", "0", "--world-size", "1"},
      {{"DTORCH_CONTROLLER", "elsewhere:1"}});
  EXPECT_FALSE(listening.dialIn);
  EXPECT_EQ(listening.listen, "tcp://127.0.0.1:7");
  // The embedded cluster's --connect workers never dial by the environment.
  WorkerOptions o = parse(
      {"--connect", "tcp://127.0.0.1:9", "--ranks", "0", "--world-size", "1"},
      {{"DTORCH_CONTROLLER", "elsewhere:1"}});
  EXPECT_FALSE(o.dialIn);
  EXPECT_EQ(o.connect, "tcp://127.0.0.1:9");
}

} // namespace
} // namespace dtorch::rt
