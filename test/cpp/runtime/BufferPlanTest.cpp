// Buffer planning in the runtime: the live ranges and packing of
// include/dtorch/BufferPlan.h, the validator's arena checks, and the
// executor's arena (views, reuse across runs, in-place kernels).
#include "TestSupport.h"

#include "dtorch/BufferPlan.h"
#include "dtorch/runtime/Allocator.h"
#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/RankState.h"

#include <cmath>

namespace dtorch::rt::test {
namespace {

namespace bp = ::dtorch::bufplan;
using ::dtorch::wire::COMM;
using ::dtorch::wire::COMPUTE;
using ::dtorch::wire::F32;

uint64_t allocatorCalls() {
  AllocatorStats stats = CachingAllocator::instance().stats();
  return stats.cacheHits + stats.cacheMisses;
}

// x -> exp -> t1 -> neg -> t2 -> transpose -> t3 -> mul(t3, x) -> y, on
// 4x4 float32 (64 bytes each).
struct Chain {
  ProgramBuilder b;
  int x, t1, t2, t3, y;
  Chain() {
    x = b.input(F32, {4, 4});
    t1 = b.buffer(F32, {4, 4});
    t2 = b.buffer(F32, {4, 4});
    t3 = b.buffer(F32, {4, 4});
    y = b.buffer(F32, {4, 4});
    b.add("exp", {x}, {t1});
    b.add("neg", {t1}, {t2});
    setInts(b.add("transpose", {t2}, {t3}), "perm", {1, 0});
    b.add("mul", {t3, x}, {y});
    b.output(y);
  }
};

std::vector<float> chainReference(const std::vector<float> &x) {
  std::vector<float> y(16);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      y[i * 4 + j] = -std::exp(x[j * 4 + i]) * x[i * 4 + j];
  return y;
}

TEST(BufferPlan, LiveRangesFollowStreamsAndEvents) {
  // 0: compute writes b0; 1: comm reads b0 writes b1; 2: compute writes b2;
  // 3: compute reads b1 (waits for step 1) writes b3.
  std::vector<bp::Step> steps(4);
  steps[0] = {0, {}, {0}, {}};
  steps[1] = {1, {0}, {1}, {0}};
  steps[2] = {0, {}, {2}, {}};
  steps[3] = {0, {1}, {3}, {1}};
  bp::StepOrder order(steps, 2);
  EXPECT_TRUE(order.happensBefore(0, 1));
  EXPECT_FALSE(order.happensBefore(1, 2)); // the streams run concurrently
  EXPECT_TRUE(order.happensBefore(1, 3));
  bp::Liveness live = bp::computeLiveness(steps, order, 4);
  // b0 is read by the collective: live until step 3 waits for it.
  EXPECT_EQ(live.ranges[0].first, 0);
  EXPECT_EQ(live.ranges[0].last, 2);
  EXPECT_EQ(live.ranges[1].first, 1);
  EXPECT_EQ(live.ranges[1].last, 3);
  EXPECT_EQ(live.ranges[3].first, 3);

  // b2 cannot share b0's memory; b3 may.
  bp::ArenaPlan arena = bp::planArena({64, 64, 64, 64}, live, order, {});
  EXPECT_NE(arena.offsets[2], arena.offsets[0]);
  EXPECT_NE(arena.offsets[1], arena.offsets[0]);
  EXPECT_EQ(arena.arenaBytes, 192);
  for (int b = 0; b < 4; ++b)
    EXPECT_EQ(arena.offsets[b] % bp::kArenaAlignment, 0);
}

TEST(BufferPlan, InPlaceNeedsEveryOtherAccessBeforeTheStep) {
  // 0: writes b0; 1: elementwise b0 -> b1; 2: reads b0 again.
  std::vector<bp::Step> steps(3);
  steps[0] = {0, {}, {0}, {}};
  steps[1] = {0, {0}, {1}, {}};
  steps[2] = {0, {0}, {2}, {}};
  bp::StepOrder order(steps, 2);
  bp::Liveness live = bp::computeLiveness(steps, order, 3);
  EXPECT_FALSE(bp::inPlaceLegal(live, order, 0, 1));
  EXPECT_TRUE(bp::inPlaceLegal(live, order, 0, 2));
  bp::ArenaPlan arena =
      bp::planArena({100, 100, 100}, live, order, {{1, 0, 1}, {2, 0, 2}});
  EXPECT_EQ(arena.inPlace, 1);
  EXPECT_EQ(arena.offsets[2], arena.offsets[0]);
  EXPECT_NE(arena.offsets[1], arena.offsets[0]);
  EXPECT_EQ(arena.arenaBytes, 256); // two slots of 128 (aligned) bytes
}

TEST(BufferPlan, ValidatorAcceptsAPlanAndRefusesBadOnes) {
  Chain c;
  // t1 and t2 share (neg in place), t3 elsewhere, x and y own storage.
  setBufferPlan(c.b.program(), {-1, 0, 0, 64, -1}, 128);
  EXPECT_NO_THROW(validateProgram(c.b.program(), -1));

  Program wrongCount = c.b.program();
  setBufferPlan(wrongCount, {-1, 0, 0}, 128);
  expectInvalidProgram(wrongCount, {"buffer_offsets has 3 entries for 5"});

  Program misaligned = c.b.program();
  setBufferPlan(misaligned, {-1, 0, 0, 32, -1}, 128);
  expectInvalidProgram(misaligned, {"buffer 3 has arena offset 32"});

  Program tooSmall = c.b.program();
  setBufferPlan(tooSmall, {-1, 0, 0, 64, -1}, 100);
  expectInvalidProgram(tooSmall,
                       {"buffer 3 (64 bytes at offset 64) does not fit in the "
                        "arena of 100 bytes"});

  Program inputPlaced = c.b.program();
  setBufferPlan(inputPlaced, {128, 0, 0, 64, -1}, 192);
  expectInvalidProgram(inputPlaced, {"input buffer 0 is placed in the arena"});

  Program outputPlaced = c.b.program();
  setBufferPlan(outputPlaced, {-1, 0, 0, 64, 128}, 192);
  expectInvalidProgram(outputPlaced,
                       {"output buffer 4 is placed in the arena"});

  // transpose is not elementwise: t3 may not take t2's memory.
  Program overlap = c.b.program();
  setBufferPlan(overlap, {-1, 0, 0, 0, -1}, 64);
  expectInvalidProgram(overlap, {"buffers", "share arena memory while both are "
                                            "live"});

  Program unplanned = c.b.program();
  unplanned.clear_buffer_offsets();
  unplanned.set_arena_bytes(64);
  expectInvalidProgram(unplanned,
                       {"arena_bytes is 64 but no buffer is planned"});
}

TEST(BufferPlan, ValidatorKeepsACollectiveInputLiveUntilAWait) {
  // COMPUTE: a = exp(x); COMM: r = all_reduce(a); COMPUTE: t = neg(x);
  // COMPUTE: y = add(t, r) waiting for the all_reduce.
  ProgramBuilder b;
  int x = b.input(F32, {4});
  int a = b.buffer(F32, {4});
  int r = b.buffer(F32, {4});
  int t = b.buffer(F32, {4});
  int y = b.buffer(F32, {4});
  int madeA = b.event(), reduced = b.event();
  b.add("exp", {x}, {a}).set_record_event(madeA);
  Instruction &allReduce = b.add("all_reduce", {a}, {r}, COMM);
  allReduce.add_wait_events(madeA);
  allReduce.set_record_event(reduced);
  setInts(allReduce, "group", {0});
  setString(allReduce, "reduce", "sum");
  b.add("neg", {x}, {t});
  b.add("add", {t, r}, {y}).add_wait_events(reduced);
  b.output(y);

  // t is written while the all_reduce may still read a: no sharing.
  Program shared = b.program();
  setBufferPlan(shared, {-1, 0, 64, 0, -1}, 128);
  expectInvalidProgram(shared, {"buffers 1 and 3 share arena memory"}, 0);
  Program apart = b.program();
  setBufferPlan(apart, {-1, 0, 64, 128, -1}, 192);
  EXPECT_NO_THROW(validateProgram(apart, 0));

  // The plan of include/dtorch/BufferPlan.h for the same program agrees.
  std::vector<bp::Step> steps(4);
  steps[0] = {0, {x}, {a}, {}};
  steps[1] = {1, {a}, {r}, {0}};
  steps[2] = {0, {x}, {t}, {}};
  steps[3] = {0, {t, r}, {y}, {1}};
  bp::StepOrder order(steps, 2);
  bp::Liveness live = bp::computeLiveness(steps, order, 5);
  bp::ArenaPlan arena =
      bp::planArena({-1, 16, 16, 16, -1}, live, order, {{3, t, y}});
  EXPECT_NE(arena.offsets[a], arena.offsets[t]);
  Program planned = b.program();
  setBufferPlan(planned, arena.offsets, arena.arenaBytes);
  EXPECT_NO_THROW(validateProgram(planned, 0));

  // And it runs (one rank, the fake hub).
  FakeCollectiveHub hub(1, std::chrono::seconds(5));
  auto comm = hub.communicator(0);
  Executor executor(comm.get());
  auto out = executor.run(planned, {makeTensor<float>(F32, {4}, {0, 1, 2, 3})});
  std::vector<float> got = valuesOf<float>(out[0]);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(got[i], std::exp(float(i)) - float(i), 1e-4);
}

TEST(BufferPlan, PlannedProgramMatchesUnplannedAndAllocatesNothingWhenCached) {
  Chain unplanned;
  Chain planned;
  // exp and neg share a slot (neg in place), transpose elsewhere.
  setBufferPlan(planned.b.program(), {-1, 0, 0, 64, -1}, 128);
  std::vector<float> values(16);
  for (int i = 0; i < 16; ++i)
    values[i] = 0.1f * i - 0.7f;
  Tensor x = makeTensor<float>(F32, {4, 4}, values);
  std::vector<float> expected = chainReference(values);

  Executor plain(nullptr);
  std::vector<float> reference =
      valuesOf<float>(plain.run(unplanned.b.program(), {x})[0]);
  EXPECT_EQ(plain.lastRunMemory().allocations, 4u); // t1, t2, t3, y
  EXPECT_EQ(plain.lastRunMemory().ownBytes, 4u * 64);
  EXPECT_EQ(plain.lastRunMemory().arenaBytes, 0u);

  Executor executor(nullptr);
  std::vector<float> first =
      valuesOf<float>(executor.run(planned.b.program(), {x})[0]);
  EXPECT_EQ(executor.lastRunMemory().allocations, 2u); // the arena and y
  EXPECT_EQ(executor.arenaCapacity(), 128u);
  for (int run = 0; run < 3; ++run) {
    uint64_t before = allocatorCalls();
    std::vector<float> again =
        valuesOf<float>(executor.runValidated(planned.b.program(), {x})[0]);
    // Only the output: the temporaries live in the kept arena.
    EXPECT_EQ(allocatorCalls() - before, 1u);
    EXPECT_EQ(executor.lastRunMemory().allocations, 1u);
    EXPECT_EQ(executor.lastRunMemory().arenaBytes, 128u);
    EXPECT_EQ(again, first);
  }
  EXPECT_EQ(first, reference);
  for (int i = 0; i < 16; ++i)
    EXPECT_NEAR(first[i], expected[i], 1e-5);

  // A larger program grows the arena once; a smaller one reuses it.
  Chain big;
  for (int b = 1; b <= 4; ++b) {
    big.b.program().mutable_buffers(b)->set_shape(0, 8);
    big.b.program().mutable_buffers(b)->set_shape(1, 8);
  }
  big.b.program().mutable_buffers(0)->set_shape(0, 8);
  big.b.program().mutable_buffers(0)->set_shape(1, 8);
  setBufferPlan(big.b.program(), {-1, 0, 0, 256, -1}, 512);
  executor.run(big.b.program(), {Tensor::empty(F32, {8, 8})});
  EXPECT_EQ(executor.arenaCapacity(), 512u);
  EXPECT_EQ(executor.lastRunMemory().allocations, 2u);
  executor.run(planned.b.program(), {x});
  EXPECT_EQ(executor.lastRunMemory().allocations, 1u);
  EXPECT_EQ(executor.arenaCapacity(), 512u);
}

TEST(BufferPlan, InPlaceReshapeAndCopyKeepTheValue) {
  ProgramBuilder b;
  int x = b.input(F32, {2, 3});
  int t1 = b.buffer(F32, {2, 3});
  int t2 = b.buffer(F32, {6});
  int t3 = b.buffer(F32, {6});
  int y = b.buffer(F32, {6});
  b.add("exp", {x}, {t1});
  b.add("reshape", {t1}, {t2});
  b.add("copy", {t2}, {t3});
  b.add("sqrt", {t3}, {y});
  b.output(y);
  setBufferPlan(b.program(), {-1, 0, 0, 0, -1}, 64);
  Executor executor(nullptr);
  auto out = executor.run(b.program(),
                          {makeTensor<float>(F32, {2, 3}, {0, 1, 2, 3, 4, 5})});
  std::vector<float> got = valuesOf<float>(out[0]);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(got[i], std::sqrt(std::exp(float(i))), 1e-4);
}

TEST(BufferPlan, RankStateReportsArenaAndPeakBytes) {
  Chain plannedChain, plainChain;
  setBufferPlan(plannedChain.b.program(), {-1, 0, 0, 64, -1}, 128);
  RankState state(0, nullptr);
  state.put(1, Tensor::empty(F32, {4, 4}));
  state.upload(10, plainChain.b.program());
  state.upload(11, plannedChain.b.program());
  ASSERT_FALSE(state.run(10, {1}, {2}).has_value());
  MemoryStats plain = state.memoryStats();
  EXPECT_EQ(plain.lastRunArenaBytes, 0u);
  EXPECT_EQ(plain.arenaBytes, 0u);
  // The table (x) and four buffers of 64 bytes.
  EXPECT_EQ(plain.lastRunPeakBytes, 64u + 4 * 64);
  EXPECT_EQ(plain.peakBytes, 64u + 4 * 64);
  state.free({2});

  ASSERT_FALSE(state.run(11, {1}, {3}).has_value());
  MemoryStats planned = state.memoryStats();
  EXPECT_EQ(planned.lastRunArenaBytes, 128u);
  EXPECT_EQ(planned.arenaBytes, 128u);
  // The table (x), the arena and the output.
  EXPECT_EQ(planned.lastRunPeakBytes, 64u + 128 + 64);
  EXPECT_LT(planned.lastRunPeakBytes, plain.lastRunPeakBytes);
  EXPECT_EQ(planned.peakBytes, plain.peakBytes); // the high-water mark stays
}

TEST(BufferPlan, IdListKeepsItsIdsInlineAndBeyond) {
  bp::IdList ids{7, 8};
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids.back(), 8);
  // Past the inline four: the ids move to the heap, in order.
  std::vector<int> expected = {7, 8};
  for (int i = 0; i < 9; ++i) {
    ids.push_back(100 + i);
    expected.push_back(100 + i);
  }
  EXPECT_EQ(std::vector<int>(ids.begin(), ids.end()), expected);
  bp::IdList copy = ids;
  EXPECT_TRUE(copy == ids);
  bp::IdList moved = std::move(copy);
  EXPECT_EQ(std::vector<int>(moved.begin(), moved.end()), expected);
  EXPECT_TRUE(copy.empty());
  bp::IdList small{1, 2, 3};
  bp::IdList smallMoved = std::move(small);
  EXPECT_EQ(std::vector<int>(smallMoved.begin(), smallMoved.end()),
            (std::vector<int>{1, 2, 3}));
  moved = smallMoved; // a heap list assigned a short one
  EXPECT_EQ(moved.size(), 3u);
  EXPECT_EQ(moved[2], 3);
  std::vector<int64_t> wide = {5, 6, 7, 8, 9};
  moved.assign(wide.begin(), wide.end());
  EXPECT_EQ(std::vector<int>(moved.begin(), moved.end()),
            (std::vector<int>{5, 6, 7, 8, 9}));
}

} // namespace
} // namespace dtorch::rt::test
