// Which CPUs a worker pins each rank thread to (RankCpuPlacement.h): the
// slices of the host's CPUs, the process's union, the switch, the start-up
// line, and that pinning a thread confines it (and the threads it starts).
#include "ScopedEnvironment.h"

#include "dtorch/runtime/RankCpuPlacement.h"
#include "dtorch/runtime/Tensor.h"

#include <gtest/gtest.h>

#include <sched.h>
#include <thread>

namespace dtorch::rt::test {
namespace {

using testsupport::ScopedEnvironment;
using Cpus = std::vector<int>;

TEST(RankCpuPlacement, EachRankOfAHostGetsItsOwnShare) {
  Cpus eight = {0, 1, 2, 3, 4, 5, 6, 7};
  // 4 ranks on 8 CPUs with 2 BLAS threads each: consecutive pairs.
  EXPECT_EQ(rankCpuSlice(eight, 0, 4, 2), (Cpus{0, 1}));
  EXPECT_EQ(rankCpuSlice(eight, 3, 4, 2), (Cpus{6, 7}));
  // Ranks of a later host (rank 5 of 4 per host) take the same places.
  EXPECT_EQ(rankCpuSlice(eight, 5, 4, 2), (Cpus{2, 3}));
  // One BLAS thread: one CPU, the first of the rank's share.
  EXPECT_EQ(rankCpuSlice(eight, 1, 4, 1), (Cpus{2}));
  // More threads than the share: the share; fewer than 1 counts as 1.
  EXPECT_EQ(rankCpuSlice(eight, 1, 2, 16), (Cpus{4, 5, 6, 7}));
  EXPECT_EQ(rankCpuSlice(eight, 1, 2, 0), (Cpus{4}));
  // The affinity mask's CPUs need not be consecutive.
  EXPECT_EQ(rankCpuSlice(Cpus{1, 3, 5, 7}, 1, 2, 2), (Cpus{5, 7}));
  // A remainder CPU stays unused: 3 CPUs, 2 ranks, share 1.
  EXPECT_EQ(rankCpuSlice(Cpus{0, 1, 2}, 1, 2, 4), (Cpus{1}));
}

TEST(RankCpuPlacement, NothingIsPinnedWhenRanksOutnumberTheCpus) {
  EXPECT_TRUE(rankCpuSlice(Cpus{0, 1}, 0, 4, 1).empty());
  EXPECT_TRUE(rankCpuSlice(Cpus{0, 1}, 0, 0, 1).empty());
  EXPECT_TRUE(rankCpuSlice(Cpus{}, 0, 1, 1).empty());
  EXPECT_TRUE(rankCpuSlice(Cpus{0, 1}, -1, 1, 1).empty());
}

TEST(RankCpuPlacement, AProcessKeepsToItsRanksCpus) {
  EXPECT_EQ(unionOfCpus({{2, 3}, {0, 1}, {1}}), (Cpus{0, 1, 2, 3}));
  EXPECT_EQ(unionOfCpus({{5}}), (Cpus{5}));
  // One rank left to the scheduler leaves the whole process so.
  EXPECT_TRUE(unionOfCpus({{0}, {}}).empty());
  EXPECT_TRUE(unionOfCpus({}).empty());
}

TEST(RankCpuPlacement, DescribesCpuListsAsTasksetDoes) {
  EXPECT_EQ(describeCpus({}), "none");
  EXPECT_EQ(describeCpus({3}), "3");
  EXPECT_EQ(describeCpus({0, 1, 2, 5, 7, 8}), "0-2,5,7-8");
  EXPECT_EQ(describeRankPinning(true, {0, 1, 2, 3}, 2, 2, 4, 1),
            "rank 2 on CPU 2, rank 3 on CPU 3");
  EXPECT_EQ(describeRankPinning(true, {0, 1, 2, 3}, 0, 1, 1, 4),
            "rank 0 on CPUs 0-3");
  EXPECT_EQ(describeRankPinning(true, {0, 1}, 0, 4, 4, 1),
            "ranks not pinned: 4 ranks on 2 CPUs");
  EXPECT_EQ(describeRankPinning(false, {0, 1}, 0, 1, 1, 1),
            "ranks not pinned (DTORCH_PIN_RANKS=1 pins them)");
}

TEST(RankCpuPlacement, TheSwitchIsOffUnlessOneAndRefusesOtherValues) {
  {
    ScopedEnvironment unset("DTORCH_PIN_RANKS", nullptr);
    EXPECT_FALSE(rankPinningEnabled());
  }
  {
    ScopedEnvironment empty("DTORCH_PIN_RANKS", "");
    EXPECT_FALSE(rankPinningEnabled());
  }
  {
    ScopedEnvironment on("DTORCH_PIN_RANKS", "1");
    EXPECT_TRUE(rankPinningEnabled());
  }
  {
    ScopedEnvironment off("DTORCH_PIN_RANKS", "0");
    EXPECT_FALSE(rankPinningEnabled());
  }
  ScopedEnvironment bad("DTORCH_PIN_RANKS", "yes");
  try {
    rankPinningEnabled();
    FAIL() << "a bad value must throw";
  } catch (const RuntimeError &e) {
    EXPECT_NE(std::string(e.what()).find("DTORCH_PIN_RANKS"),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("'yes'"), std::string::npos);
  }
}

TEST(RankCpuPlacement, APinnedThreadAndTheThreadsItStartsKeepToItsCpus) {
  Cpus all = affinityCpuList();
  ASSERT_FALSE(all.empty());
  Cpus mine, child;
  bool pinned = false;
  // On a thread of its own: the test process keeps its mask.
  std::thread([&] {
    pinned = pinCurrentThread({all.back()});
    mine = affinityCpuList();
    std::thread([&] { child = affinityCpuList(); }).join();
  }).join();
  EXPECT_TRUE(pinned);
  EXPECT_EQ(mine, (Cpus{all.back()}));
  EXPECT_EQ(child, (Cpus{all.back()}));
  EXPECT_EQ(affinityCpuList(), all);
  // Nothing to pin to, or a CPU out of range: false, nothing changes.
  std::thread([&] {
    EXPECT_FALSE(pinCurrentThread({}));
    EXPECT_FALSE(pinCurrentThread({-1}));
    EXPECT_EQ(affinityCpuList(), all);
  }).join();
}

} // namespace
} // namespace dtorch::rt::test
