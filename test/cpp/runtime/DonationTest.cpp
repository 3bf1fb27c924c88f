// Donation in the runtime: the validator's checks of Program.output_donors,
// the executor handing a donated input's storage to its output only when
// nothing else holds it, and RankState consuming donated handles.
#include "TestSupport.h"

#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/RankState.h"

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::COMM;
using ::dtorch::wire::F32;

// p' = p - g * g, written over p (sub is elementwise and p has no other
// use); output 1 is g * g.
using Update = DonatedUpdate;
const std::vector<float> &kP = Update::kP, &kG = Update::kG,
                         &kUpdated = Update::kUpdated;

TEST(Donation, ValidatorAcceptsALegalPairing) {
  Update u;
  EXPECT_NO_THROW(validateProgram(u.b.program(), -1));
  // g is dead once the mul ran: the sub's output may take it too.
  setOutputDonors(u.b.program(), {1, -1});
  EXPECT_NO_THROW(validateProgram(u.b.program(), -1));
}

TEST(Donation, ValidatorRejectsIllegalPairings) {
  {
    Update u;
    setOutputDonors(u.b.program(), {0});
    expectInvalidProgram(u.b.program(), {"output_donors has 1 entries for 2"});
  }
  {
    Update u;
    setOutputDonors(u.b.program(), {2, -1});
    expectInvalidProgram(u.b.program(), {"output 0's donor 2 is not an input"});
  }
  {
    Update u;
    setOutputDonors(u.b.program(), {0, 0});
    expectInvalidProgram(u.b.program(), {"given to another output"});
  }
  {
    // p is still read by the sub after the mul writes output 1.
    Update u;
    setOutputDonors(u.b.program(), {-1, 0});
    expectInvalidProgram(u.b.program(), {"still accessed after", "mul"});
  }
  {
    // Bytes differ.
    ProgramBuilder b;
    b.input(F32, {4});
    int z = b.input(F32, {2});
    int y = b.buffer(F32, {2});
    b.add("exp", {z}, {y});
    b.output(y);
    setOutputDonors(b.program(), {0});
    expectInvalidProgram(b.program(), {"has 16 bytes, the output 8"});
  }
  {
    // A transpose reads its input in another order than it writes.
    ProgramBuilder b;
    int x = b.input(F32, {2, 2});
    int y = b.buffer(F32, {2, 2});
    setInts(b.add("transpose", {x}, {y}), "perm", {1, 0});
    b.output(y);
    setOutputDonors(b.program(), {0});
    expectInvalidProgram(b.program(), {"not elementwise"});
  }
  {
    // An input returned as it is cannot take another's storage.
    ProgramBuilder b;
    int x = b.input(F32, {4});
    int y = b.input(F32, {4});
    b.output(x);
    b.add("exp", {y}, {b.buffer(F32, {4})});
    b.output(2);
    setOutputDonors(b.program(), {1, -1});
    expectInvalidProgram(b.program(), {"an output that is an input"});
  }
}

TEST(Donation, ValidatorFollowsTheCommunicationStream) {
  // An all_reduce reads x on the COMM stream while the exp writes y without
  // waiting for it: x is not dead when y is written.
  ProgramBuilder b;
  int x = b.input(F32, {4});
  int q = b.input(F32, {4});
  int r = b.buffer(F32, {4});
  int y = b.buffer(F32, {4});
  Instruction &reduce = b.add("all_reduce", {x}, {r}, COMM);
  setString(reduce, "reduce", "sum");
  setInts(reduce, "group", {0});
  b.add("exp", {q}, {y});
  b.output(y);
  b.output(r);
  setOutputDonors(b.program(), {0, -1});
  expectInvalidProgram(b.program(), {"still accessed after"}, 0);
  setOutputDonors(b.program(), {1, -1});
  EXPECT_NO_THROW(validateProgram(b.program(), 0));
}

TEST(Donation, ExecutorWritesOverASoleDonatedInput) {
  Update u;
  Executor executor(nullptr);
  Tensor p = makeTensor<float>(F32, {4}, kP);
  Tensor g = makeTensor<float>(F32, {4}, kG);
  const void *pData = p.data();
  std::vector<Tensor> inputs = {std::move(p), g};
  std::vector<Tensor> out =
      executor.runValidated(u.b.program(), inputs, {}, {true, false});
  EXPECT_EQ(out[0].data(), pData);
  EXPECT_EQ(valuesOf<float>(out[0]), kUpdated);
  RunMemory memory = executor.lastRunMemory();
  EXPECT_EQ(memory.donations, 1u);
  EXPECT_EQ(memory.donatedBytes, 16u);
  EXPECT_EQ(valuesOf<float>(g), kG);
}

TEST(Donation, ExecutorAllocatesWhenNotDonatedOrShared) {
  Update u;
  Executor executor(nullptr);
  // Not donated: its own storage, p untouched.
  Tensor p = makeTensor<float>(F32, {4}, kP);
  std::vector<Tensor> inputs = {p, makeTensor<float>(F32, {4}, kG)};
  std::vector<Tensor> out =
      executor.runValidated(u.b.program(), inputs, {}, {false, false});
  EXPECT_NE(out[0].data(), p.data());
  EXPECT_EQ(valuesOf<float>(out[0]), kUpdated);
  EXPECT_EQ(executor.lastRunMemory().donations, 0u);
  // Donated, but another Tensor (a second handle) shares the storage: the
  // output gets its own and the other holder keeps its values.
  out = executor.runValidated(u.b.program(), inputs, {}, {true, false});
  EXPECT_NE(out[0].data(), p.data());
  EXPECT_EQ(valuesOf<float>(out[0]), kUpdated);
  EXPECT_EQ(valuesOf<float>(p), kP);
  EXPECT_EQ(executor.lastRunMemory().donations, 0u);
  // A program without donors donates nothing.
  setOutputDonors(u.b.program(), {});
  inputs = {makeTensor<float>(F32, {4}, kP), makeTensor<float>(F32, {4}, kG)};
  const void *pData = inputs[0].data();
  out = executor.runValidated(u.b.program(), inputs, {}, {true, true});
  EXPECT_NE(out[0].data(), pData);
  EXPECT_EQ(valuesOf<float>(out[0]), kUpdated);
}

TEST(Donation, RankStateConsumesDonatedHandles) {
  Update u;
  RankState state(0, nullptr);
  state.upload(1, u.b.program());
  state.put(10, makeTensor<float>(F32, {4}, kP));
  state.put(11, makeTensor<float>(F32, {4}, kG));
  uint64_t before = state.memoryStats().bytes;
  ASSERT_FALSE(state.run(1, {10, 11}, {20, 21}, {}, {10}));
  EXPECT_EQ(valuesOf<float>(state.fetch(20)), kUpdated);
  // Handle 10 is gone; its storage now holds handle 20's value, so the
  // table grew by the gg output alone.
  EXPECT_THROW(state.fetch(10), RuntimeError);
  EXPECT_EQ(state.memoryStats().bytes, before + 16);
  // Its peak counts the donated storage once: table before the run plus
  // the one output with storage of its own.
  EXPECT_EQ(state.memoryStats().lastRunPeakBytes, before + 16);
  state.free({10}); // the client's free of a consumed handle is harmless
  EXPECT_EQ(valuesOf<float>(state.fetch(20)), kUpdated);
}

TEST(Donation, RankStateNeverWritesOverAnotherHandlesStorage) {
  // Program 1 returns its input as it is: handles 10 and 30 then share one
  // storage. Donating 10 to program 2 must leave 30's value alone.
  ProgramBuilder identity;
  identity.output(identity.input(F32, {4}));
  Update u;
  RankState state(0, nullptr);
  state.upload(1, identity.program());
  state.upload(2, u.b.program());
  state.put(10, makeTensor<float>(F32, {4}, kP));
  state.put(11, makeTensor<float>(F32, {4}, kG));
  ASSERT_FALSE(state.run(1, {10}, {30}));
  ASSERT_FALSE(state.run(2, {10, 11}, {20, 21}, {}, {10}));
  EXPECT_EQ(valuesOf<float>(state.fetch(20)), kUpdated);
  EXPECT_EQ(valuesOf<float>(state.fetch(30)), kP);
  EXPECT_NE(state.fetch(20).data(), state.fetch(30).data());
}

TEST(Donation, AFailedRunPoisonsItsDonatedInputs) {
  Update u;
  RankState state(0, nullptr);
  state.upload(1, u.b.program());
  state.put(10, makeTensor<float>(F32, {4}, kP));
  // Handle 11 is unknown: the run fails; the donated 10 is consumed.
  std::optional<std::string> error = state.run(1, {10, 11}, {20, 21}, {}, {10});
  ASSERT_TRUE(error);
  EXPECT_TRUE(state.isPoisoned(10));
  EXPECT_TRUE(state.isPoisoned(20));
  // A donated handle that the run does not read is left alone.
  state.put(12, makeTensor<float>(F32, {4}, kP));
  state.put(13, makeTensor<float>(F32, {4}, kG));
  ASSERT_FALSE(state.run(1, {12, 13}, {22, 23}, {}, {99}));
  EXPECT_EQ(valuesOf<float>(state.fetch(12)), kP);
}

} // namespace
} // namespace dtorch::rt::test
