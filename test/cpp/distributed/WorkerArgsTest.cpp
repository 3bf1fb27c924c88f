// dtorch-worker's command line: the rank layout that sizes each rank's BLAS
// thread share (--ranks-on-host).
#include "dtorch/runtime/Tensor.h"
#include "dtorch/runtime/Worker.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace dtorch::rt {
namespace {

WorkerOptions parse(std::vector<std::string> args) {
  args.insert(args.begin(), "dtorch-worker");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  return parseWorkerArgs(static_cast<int>(argv.size()), argv.data());
}

TEST(WorkerArgs, RanksOnHostDefaultsToThisProcess) {
  WorkerOptions o = parse({"--listen", "tcp://127.0.0.1:0", "--token", "t",
                           "--ranks", "2-3", "--world-size", "4"});
  EXPECT_EQ(o.firstRank, 2);
  EXPECT_EQ(o.numRanks, 2);
  EXPECT_EQ(o.ranksOnHost, 0); // runWorker then uses numRanks
}

TEST(WorkerArgs, RanksOnHostIsParsedAndChecked) {
  WorkerOptions o =
      parse({"--connect", "tcp://127.0.0.1:5555", "--token", "t", "--ranks",
             "0-1", "--world-size", "4", "--ranks-on-host", "4"});
  EXPECT_EQ(o.ranksOnHost, 4);
  EXPECT_THROW(
      parse({"--connect", "tcp://127.0.0.1:5555", "--token", "t", "--ranks",
             "0-1", "--world-size", "4", "--ranks-on-host", "-1"}),
      RuntimeError);
  EXPECT_THROW(
      parse({"--connect", "tcp://127.0.0.1:5555", "--token", "t", "--ranks",
             "0-1", "--world-size", "4", "--ranks-on-host", "many"}),
      RuntimeError);
}

TEST(WorkerArgs, LinkFdGoesWithConnectOnly) {
  WorkerOptions o =
      parse({"--connect", "tcp://127.0.0.1:5555", "--token", "t", "--ranks",
             "0-1", "--world-size", "4", "--link-fd", "4"});
  EXPECT_EQ(o.linkFd, 4);
  EXPECT_EQ(parse({"--connect", "tcp://127.0.0.1:5555", "--token", "t",
                   "--ranks", "0-1", "--world-size", "4"})
                .linkFd,
            -1);
  auto message = [](std::vector<std::string> args) {
    try {
      parse(std::move(args));
    } catch (const RuntimeError &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Standard input, output and error are not links; nor is a word.
  EXPECT_NE(message({"--connect", "tcp://127.0.0.1:5555", "--token", "t",
                     "--ranks", "0-1", "--world-size", "4", "--link-fd", "2"})
                .find("--link-fd must be an inherited descriptor"),
            std::string::npos);
  EXPECT_THROW(
      parse({"--connect", "tcp://127.0.0.1:5555", "--token", "t", "--ranks",
             "0-1", "--world-size", "4", "--link-fd", "four"}),
      RuntimeError);
  // A worker waiting for a controller to dial it has no inherited link.
  EXPECT_NE(message({"--listen", "tcp://127.0.0.1:0", "--token", "t", "--ranks",
                     "0-1", "--world-size", "4", "--link-fd", "4"})
                .find("--link-fd needs --connect"),
            std::string::npos);
}

} // namespace
} // namespace dtorch::rt
