// Reshape views in the arena (include/dtorch/BufferPlan.h's viewAliases,
// --rank-plan-buffers=views): a reshape placed at its source's offset
// shares the source's memory for as long as either lives. The planner's
// ranges, the validator's rules (a view is accepted; a write in place over
// memory a view still reads is not) and the executor's runs with and
// without execution plans.
#include "TestSupport.h"

#include "dtorch/BufferPlan.h"
#include "dtorch/runtime/ExecutionPlan.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/RankState.h"

#include <cmath>

namespace dtorch::rt::test {
namespace {

namespace bp = ::dtorch::bufplan;
using ::dtorch::wire::F32;

TEST(ArenaView, ViewAliasesMergeTheGroupsRangesAndAccesses) {
  // 0: b0 = f(); 1: b1 = reshape(b0); 2: b2 = g(b1); 3: b3 = h(b0).
  std::vector<bp::Step> steps(4);
  steps[0] = {0, {}, {0}, {}};
  steps[1] = {0, {0}, {1}, {}};
  steps[2] = {0, {1}, {2}, {}};
  steps[3] = {0, {0}, {3}, {}};
  bp::StepOrder order(steps, 2);
  bp::Liveness live = bp::computeLiveness(steps, order, 4);
  EXPECT_EQ(live.ranges[1].last, 2);
  std::vector<int> group = bp::viewAliases(live, order, {{0, 1}});
  EXPECT_EQ(group, (std::vector<int>{0, 0, 2, 3}));
  EXPECT_EQ(live.ranges[0].first, 0);
  EXPECT_EQ(live.ranges[0].last, 3);
  EXPECT_EQ(live.ranges[1].first, 0);
  EXPECT_EQ(live.ranges[1].last, 3);
  EXPECT_EQ(live.accesses[1], (bp::IdList{0, 1, 2, 3}));
  // b2 is elementwise over b1, but b0 (the same memory) is read after it.
  EXPECT_FALSE(bp::inPlaceLegal(live, order, 1, 2));

  bp::ArenaPlan arena = bp::planArena({64, 64, 64, 64}, live, order,
                                      {{1, 0, 1}, {2, 1, 2}}, group);
  EXPECT_EQ(arena.views, 1);
  EXPECT_EQ(arena.inPlace, 0);
  EXPECT_EQ(arena.offsets[1], arena.offsets[0]);
  EXPECT_NE(arena.offsets[2], arena.offsets[0]);
  // b3 is written at step 3, where the group is still read: not over it.
  EXPECT_NE(arena.offsets[3], arena.offsets[0]);
}

TEST(ArenaView, WithoutViewsTheReshapeGetsMemoryOfItsOwn) {
  std::vector<bp::Step> steps(3);
  steps[0] = {0, {}, {0}, {}};
  steps[1] = {0, {0}, {1}, {}};
  steps[2] = {0, {0, 1}, {2}, {}};
  bp::StepOrder order(steps, 2);
  bp::Liveness live = bp::computeLiveness(steps, order, 3);
  bp::ArenaPlan apart = bp::planArena({64, 64, 64}, live, order, {{1, 0, 1}});
  EXPECT_NE(apart.offsets[1], apart.offsets[0]);
  EXPECT_EQ(apart.arenaBytes, 192);
  std::vector<int> group = bp::viewAliases(live, order, {{0, 1}});
  bp::ArenaPlan shared =
      bp::planArena({64, 64, 64}, live, order, {{1, 0, 1}}, group);
  EXPECT_EQ(shared.offsets[1], shared.offsets[0]);
  EXPECT_EQ(shared.arenaBytes, 128);
}

TEST(ArenaView, ViewOfAViewJoinsTheFirstSourcesGroup) {
  // b1 = reshape(b0), b2 = reshape(b1), b3 = g(b2), b4 = h(b0).
  std::vector<bp::Step> steps(5);
  steps[0] = {0, {}, {0}, {}};
  steps[1] = {0, {0}, {1}, {}};
  steps[2] = {0, {1}, {2}, {}};
  steps[3] = {0, {2}, {3}, {}};
  steps[4] = {0, {0}, {4}, {}};
  bp::StepOrder order(steps, 2);
  bp::Liveness live = bp::computeLiveness(steps, order, 5);
  std::vector<int> group = bp::viewAliases(live, order, {{1, 2}, {0, 1}});
  EXPECT_EQ(group, (std::vector<int>{0, 0, 0, 3, 4}));
  for (int b : {0, 1, 2})
    EXPECT_EQ(live.ranges[b].last, 4);
  bp::ArenaPlan arena =
      bp::planArena({64, 64, 64, 64, 64}, live, order, {}, group);
  EXPECT_EQ(arena.views, 2);
  EXPECT_EQ(arena.offsets[1], arena.offsets[0]);
  EXPECT_EQ(arena.offsets[2], arena.offsets[0]);
  EXPECT_NE(arena.offsets[3], arena.offsets[0]);
}

// x -> exp -> t1 -> reshape -> v (2x8) -> sum(v) -> s (returned);
// t1 -> neg -> t2 -> mul(t2, x) -> y (returned). t1 is read after the
// reshape, so v is a view only when the plan keeps t1's memory for both.
struct ViewedSource {
  ProgramBuilder b;
  int x, t1, v, s, t2, y;
  ViewedSource() {
    x = b.input(F32, {16});
    t1 = b.buffer(F32, {16});
    v = b.buffer(F32, {2, 8});
    s = b.buffer(F32, {2});
    t2 = b.buffer(F32, {16});
    y = b.buffer(F32, {16});
    b.add("exp", {x}, {t1});
    b.add("reshape", {t1}, {v});
    Instruction &sum = b.add("sum", {v}, {s});
    setInts(sum, "dims", {1});
    setInt(sum, "keepdim", 0);
    setFloat(sum, "scale", 1.0);
    b.add("neg", {t1}, {t2});
    b.add("mul", {t2, x}, {y});
    b.output(s);
    b.output(y);
  }
};

std::vector<float> inputValues() {
  std::vector<float> values(16);
  for (int i = 0; i < 16; ++i)
    values[i] = 0.125f * i - 1.0f;
  return values;
}

TEST(ArenaView, ValidatorAcceptsAViewOfASourceReadLater) {
  ViewedSource p;
  // t1 and v share 0 (a view), t2 at 64 (t1 is read by neg: not in place
  // over the view, whose sum runs before, but t1 dies at neg: in place is
  // fine there too).
  setBufferPlan(p.b.program(), {-1, 0, 0, -1, 64, -1}, 128);
  EXPECT_NO_THROW(validateProgram(p.b.program(), -1));
  Program inPlace = p.b.program();
  setBufferPlan(inPlace, {-1, 0, 0, -1, 0, -1}, 64);
  EXPECT_NO_THROW(validateProgram(inPlace, -1));
}

TEST(ArenaView, ValidatorRefusesAWriteOverMemoryAViewStillReads) {
  // reshape t1 -> v; neg(t1) -> t2 in place over t1; sum(v) afterwards:
  // the neg would overwrite what the sum reads through the view.
  ProgramBuilder b;
  int x = b.input(F32, {16});
  int t1 = b.buffer(F32, {16});
  int v = b.buffer(F32, {2, 8});
  int t2 = b.buffer(F32, {16});
  int s = b.buffer(F32, {2});
  int y = b.buffer(F32, {16});
  b.add("exp", {x}, {t1});
  b.add("reshape", {t1}, {v});
  b.add("neg", {t1}, {t2});
  Instruction &sum = b.add("sum", {v}, {s});
  setInts(sum, "dims", {1});
  setInt(sum, "keepdim", 0);
  setFloat(sum, "scale", 1.0);
  b.add("mul", {t2, x}, {y});
  b.output(s);
  b.output(y);
  Program overwrite = b.program();
  setBufferPlan(overwrite, {-1, 0, 0, 0, -1, -1}, 64);
  expectInvalidProgram(overwrite, {"share arena memory while both are live"});
  Program apart = b.program();
  setBufferPlan(apart, {-1, 0, 0, 64, -1, -1}, 128);
  EXPECT_NO_THROW(validateProgram(apart, -1));
  // Without the view (v elsewhere) the neg may write over t1.
  Program noView = b.program();
  setBufferPlan(noView, {-1, 0, 64, 0, -1, -1}, 128);
  EXPECT_NO_THROW(validateProgram(noView, -1));
}

TEST(ArenaView, ValidatorRefusesAnOtherBufferOverALiveViewGroup) {
  // t1 dies at the reshape, but its view v is read by the add: t2, written
  // by a transpose in between, may not take the group's memory.
  ProgramBuilder b;
  int x = b.input(F32, {4, 4});
  int t1 = b.buffer(F32, {4, 4});
  int v = b.buffer(F32, {4, 4});
  int t2 = b.buffer(F32, {4, 4});
  int y = b.buffer(F32, {4, 4});
  b.add("exp", {x}, {t1});
  b.add("reshape", {t1}, {v});
  setInts(b.add("transpose", {x}, {t2}), "perm", {1, 0});
  b.add("add", {t2, v}, {y});
  b.output(y);
  Program bad = b.program();
  setBufferPlan(bad, {-1, 0, 0, 0, -1}, 64);
  expectInvalidProgram(bad, {"share arena memory while both are live"});
  Program good = b.program();
  setBufferPlan(good, {-1, 0, 0, 64, -1}, 128);
  EXPECT_NO_THROW(validateProgram(good, -1));
}

std::vector<std::vector<float>>
runValues(Executor &executor, const Program &program, const Tensor &x) {
  std::vector<std::vector<float>> values;
  for (const Tensor &t : executor.run(program, {x}))
    values.push_back(valuesOf<float>(t));
  return values;
}

TEST(ArenaView, ExecutorRunsAViewAndGetsTheUnplannedValues) {
  ViewedSource plain, viewed;
  setBufferPlan(viewed.b.program(), {-1, 0, 0, -1, 64, -1}, 128);
  Tensor x = makeTensor<float>(F32, {16}, inputValues());
  Executor reference(nullptr);
  auto expected = runValues(reference, plain.b.program(), x);
  ASSERT_EQ(expected.size(), 2u);
  std::vector<float> values = inputValues();
  for (int r = 0; r < 2; ++r) {
    float sum = 0;
    for (int j = 0; j < 8; ++j)
      sum += std::exp(values[r * 8 + j]);
    EXPECT_NEAR(expected[0][r], sum, 1e-4f * std::fabs(sum));
  }
  for (int i = 0; i < 16; ++i)
    EXPECT_FLOAT_EQ(expected[1][i], -std::exp(values[i]) * values[i]);

  // Without a plan, and through an execution plan kept across runs.
  Executor unplanned(nullptr);
  unplanned.setExecutionPlans(false);
  EXPECT_EQ(runValues(unplanned, viewed.b.program(), x), expected);
  RankState state(0, nullptr);
  state.upload(1, viewed.b.program());
  for (int run = 0; run < 3; ++run) {
    state.put(10, x);
    ASSERT_FALSE(state.run(1, {10}, {20, 21}).has_value());
    EXPECT_EQ(valuesOf<float>(state.fetch(20)), expected[0]);
    EXPECT_EQ(valuesOf<float>(state.fetch(21)), expected[1]);
  }
  ASSERT_NE(state.planOf(1), nullptr);
}

TEST(ArenaView, AReturnedReshapeOfASourceWithOwnStorageIsAView) {
  // --rank-plan-buffers=result-views: t (read by the returned reshape)
  // keeps storage of its own; the executor makes y a view of it, so the
  // run allocates t once and the reshape copies nothing.
  ProgramBuilder b;
  int x = b.input(F32, {2, 8});
  int t = b.buffer(F32, {2, 8});
  int u = b.buffer(F32, {2, 8});
  int y = b.buffer(F32, {16});
  int z = b.buffer(F32, {2, 8});
  b.add("exp", {x}, {t});
  b.add("neg", {x}, {u});
  b.add("reshape", {t}, {y});
  b.add("mul", {t, u}, {z});
  b.output(y);
  b.output(z);
  setBufferPlan(b.program(), {-1, -1, 0, -1, -1}, 64);
  std::vector<float> values = inputValues();
  Tensor input = makeTensor<float>(F32, {2, 8}, values);
  std::vector<std::vector<float>> first;
  for (bool plans : {true, false}) {
    Executor executor(nullptr);
    executor.setExecutionPlans(plans);
    for (int run = 0; run < 2; ++run) {
      std::vector<Tensor> out = executor.run(b.program(), {input});
      ASSERT_EQ(out.size(), 2u);
      std::vector<float> got = valuesOf<float>(out[0]);
      std::vector<float> product = valuesOf<float>(out[1]);
      for (int i = 0; i < 16; ++i) {
        float e = std::exp(values[i]);
        EXPECT_NEAR(got[i], e, 1e-6f * e) << i;
        EXPECT_NEAR(product[i], e * -values[i], 1e-6f * e) << i;
      }
      // The same bits with and without a plan, run after run.
      if (first.empty())
        first = {got, product};
      EXPECT_EQ(got, first[0]);
      EXPECT_EQ(product, first[1]);
      EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{16}));
      // t, y (a view of t) and z: two allocations beside the arena's.
      EXPECT_EQ(executor.lastRunMemory().reshapeViews, 1u) << plans;
    }
  }
}

} // namespace
} // namespace dtorch::rt::test
