// Speculation in the runtime (SpeculativeRun.h, RankState::speculate): how
// far a paused run may go (inputs not bound yet, a random seed slot, a
// donated output, collectives), pausing and resuming a run with the same
// results as an ordinary one, and a rank dropping a paused run before
// anything that could change what it read.
#include "TestSupport.h"

#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/RankState.h"
#include "dtorch/runtime/SpeculativeRun.h"

#include <memory>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::COMM;
using ::dtorch::wire::F32;
using ::dtorch::wire::I64;

// y = exp(x); z = y + w; r = random (seed slot 0); out = z * r.
struct WithRandom {
  ProgramBuilder b;
  int x, w, y, z, r, out;
  WithRandom() {
    x = b.input(F32, {4});
    w = b.input(F32, {4});
    y = b.buffer(F32, {4});
    z = b.buffer(F32, {4});
    r = b.buffer(F32, {4});
    out = b.buffer(F32, {4});
    b.add("exp", {x}, {y});
    b.add("add", {y, w}, {z});
    auto &random = b.add("random", {}, {r});
    setInt(random, "seed_slot", 0);
    setString(random, "dist", "uniform");
    setInts(random, "global_shape", {4});
    setInts(random, "offset", {0});
    b.add("mul", {z, r}, {out});
    b.output(out);
    b.output(z);
  }
};

// An SGD-like update written over its donated parameter.
using Update = DonatedUpdate;
const std::vector<float> &kP = Update::kP, &kG = Update::kG,
                         &kUpdated = Update::kUpdated;
const std::vector<float> kX = {0, 1, -1, 0.5f}, kW = {1, 2, 3, 4};

std::shared_ptr<ExecutionPlan> planOf(Executor &executor,
                                      const Program &program) {
  executor.validate(program);
  return executor.makePlan(std::make_shared<const Program>(program));
}

TEST(SpeculationLimits, InputsNeededAndTheRandomSeedSlot) {
  WithRandom p;
  Executor executor(nullptr);
  SpeculationLimits limits =
      analyzeSpeculation(*planOf(executor, p.b.program()));
  EXPECT_EQ(limits.refused, "");
  EXPECT_EQ(limits.inputsNeeded, (std::vector<int32_t>{1, 2, 0, 0}));
  EXPECT_EQ(limits.firstEffect, 2u); // the random kernel
}

TEST(SpeculationLimits, ADonatedOutputIsAnEffect) {
  Update u;
  Executor executor(nullptr);
  SpeculationLimits limits =
      analyzeSpeculation(*planOf(executor, u.b.program()));
  EXPECT_EQ(limits.refused, "");
  EXPECT_EQ(limits.inputsNeeded, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(limits.firstEffect, 1u); // the sub writes the donated output
  // Without a donor, nothing stops the run.
  u.b.program().clear_output_donors();
  limits = analyzeSpeculation(*planOf(executor, u.b.program()));
  EXPECT_EQ(limits.firstEffect, 2u);
}

TEST(SpeculationLimits, CollectivesAreNotSpeculated) {
  ProgramBuilder b;
  int x = b.input(F32, {4});
  int y = b.buffer(F32, {4});
  auto &reduce = b.add("all_reduce", {x}, {y}, COMM);
  setInts(reduce, "group", {0});
  setString(reduce, "reduce", "sum");
  b.output(y);
  FakeCollectiveHub hub(1);
  std::unique_ptr<Communicator> comm = hub.communicator(0);
  Executor executor(comm.get());
  std::shared_ptr<ExecutionPlan> plan = planOf(executor, b.program());
  EXPECT_NE(analyzeSpeculation(*plan).refused.find("collectives"),
            std::string::npos);
  std::string why;
  EXPECT_EQ(SpeculativeRun::start(executor, plan,
                                  {makeTensor<float>(F32, {4}, kX)}, &why),
            nullptr);
  EXPECT_NE(why.find("collectives"), std::string::npos) << why;
}

TEST(SpeculativeRun, PausesAtAMissingInputAndResumes) {
  WithRandom p;
  Tensor x = makeTensor<float>(F32, {4}, kX),
         w = makeTensor<float>(F32, {4}, kW);
  Executor reference(nullptr);
  std::vector<Tensor> expected =
      reference.runPlanned(*planOf(reference, p.b.program()), {x, w}, {7});

  Executor executor(nullptr);
  std::shared_ptr<ExecutionPlan> plan = planOf(executor, p.b.program());
  // No input known: the first step reads input 0.
  std::unique_ptr<SpeculativeRun> run =
      SpeculativeRun::start(executor, plan, {});
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(run->stepsRun(), 0u);
  run->extend({x});
  EXPECT_EQ(run->stepsRun(), 1u); // exp; add waits for w
  run->extend({w});
  EXPECT_EQ(run->stepsRun(), 2u); // add; random waits for the seed
  // The plan is held: another run of it resolves the program anew, and a
  // second speculation is refused.
  std::string why;
  EXPECT_EQ(SpeculativeRun::start(executor, plan, {x}, &why), nullptr);
  EXPECT_NE(why.find("in use"), std::string::npos) << why;
  std::vector<Tensor> results = run->finish({x, w}, {7});
  EXPECT_EQ(run->stepsRun(), 4u);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(valuesOf<float>(results[0]), valuesOf<float>(expected[0]));
  EXPECT_EQ(valuesOf<float>(results[1]), valuesOf<float>(expected[1]));
  run.reset();
  // Released: the plan runs again, as before.
  std::vector<Tensor> again = executor.runPlanned(*plan, {x, w}, {7});
  EXPECT_EQ(valuesOf<float>(again[0]), valuesOf<float>(expected[0]));
}

TEST(SpeculativeRun, AKernelErrorIsThrownAtTheConfirmation) {
  ProgramBuilder b;
  int x = b.input(F32, {4});
  int index = b.input(I64, {2});
  int picked = b.buffer(F32, {2});
  int out = b.buffer(F32, {2});
  setInt(b.add("index_select", {x, index}, {picked}), "dim", 0);
  b.add("exp", {picked}, {out});
  b.output(out);
  Executor executor(nullptr);
  std::shared_ptr<ExecutionPlan> plan = planOf(executor, b.program());
  Tensor x4 = makeTensor<float>(F32, {4}, kX);
  Tensor bad = makeTensor<int64_t>(I64, {2}, {1, 9});
  std::unique_ptr<SpeculativeRun> run =
      SpeculativeRun::start(executor, plan, {x4, bad});
  ASSERT_NE(run, nullptr);
  EXPECT_TRUE(run->failed());
  EXPECT_EQ(run->stepsRun(), 0u);
  try {
    run->finish({x4, bad}, {});
    ADD_FAILURE() << "the speculative failure was lost";
  } catch (const RuntimeError &error) {
    EXPECT_NE(std::string(error.what()).find("out of range"), std::string::npos)
        << error.what();
  }
}

TEST(RankSpeculation, ConfirmedRunMatchesAnOrdinaryOneAndDonates) {
  Update u;
  RankState plain(0, nullptr), speculating(0, nullptr);
  for (RankState *state : {&plain, &speculating}) {
    state->upload(1, u.b.program());
    state->put(10, makeTensor<float>(F32, {4}, kP));
    state->put(11, makeTensor<float>(F32, {4}, kG));
  }
  ASSERT_FALSE(plain.run(1, {10, 11}, {20, 21}, {}, {10}));
  const void *donatedStorage = speculating.fetch(10).data();
  ASSERT_TRUE(speculating.speculate(5, 1, {10, 11}));
  EXPECT_TRUE(speculating.speculating());
  ASSERT_FALSE(speculating.run(1, {10, 11}, {20, 21}, {}, {10}, 5));
  EXPECT_FALSE(speculating.speculating());
  EXPECT_EQ(valuesOf<float>(speculating.fetch(20)), kUpdated);
  EXPECT_EQ(valuesOf<float>(speculating.fetch(21)),
            valuesOf<float>(plain.fetch(21)));
  // The donation happened at the confirmation, as in the ordinary run.
  EXPECT_THROW(speculating.fetch(10), RuntimeError);
  EXPECT_EQ(speculating.fetch(20).data(), donatedStorage);
  EXPECT_EQ(speculating.memoryStats().bytes, plain.memoryStats().bytes);
  RankState::SpeculationCounts counts = speculating.speculationCounts();
  EXPECT_EQ(counts.started, 1u);
  EXPECT_EQ(counts.confirmed, 1u);
  EXPECT_EQ(counts.dropped, 0u);
  EXPECT_EQ(counts.instructions, 1u); // the mul; the sub waited

  // Not donated: the output gets storage of its own at the confirmation,
  // and the parameter keeps its value.
  speculating.put(12, makeTensor<float>(F32, {4}, kP));
  ASSERT_TRUE(speculating.speculate(9, 1, {12, 11}));
  ASSERT_FALSE(speculating.run(1, {12, 11}, {22, 23}, {}, {}, 9));
  EXPECT_EQ(valuesOf<float>(speculating.fetch(22)), kUpdated);
  EXPECT_EQ(valuesOf<float>(speculating.fetch(12)), kP);
  EXPECT_NE(speculating.fetch(22).data(), speculating.fetch(12).data());
  EXPECT_EQ(speculating.speculationCounts().confirmed, 2u);
}

TEST(RankSpeculation, DroppedBeforeAnythingThatChangesWhatItRead) {
  WithRandom p;
  RankState state(0, nullptr);
  state.upload(1, p.b.program());
  state.put(10, makeTensor<float>(F32, {4}, kX));
  state.put(11, makeTensor<float>(F32, {4}, kW));
  // A put into another handle keeps it; one into an input drops it.
  ASSERT_TRUE(state.speculate(3, 1, {10, 11}));
  state.put(12, makeTensor<float>(F32, {4}, kW));
  EXPECT_TRUE(state.speculating());
  state.put(11, makeTensor<float>(F32, {4}, kX));
  EXPECT_FALSE(state.speculating());
  EXPECT_EQ(valuesOf<float>(state.fetch(10)), kX);
  // A run of something else, or under another id, drops it and runs anew.
  ASSERT_TRUE(state.speculate(4, 1, {10}));
  ASSERT_FALSE(state.run(1, {10, 11}, {20, 21}, {1}, {}, 99));
  EXPECT_FALSE(state.speculating());
  // The confirmation names other inputs: dropped, the run reads its own.
  ASSERT_TRUE(state.speculate(6, 1, {10}));
  ASSERT_FALSE(state.run(1, {12, 11}, {22, 23}, {1}, {}, 6));
  ASSERT_FALSE(state.run(1, {12, 11}, {24, 25}, {1}));
  EXPECT_EQ(valuesOf<float>(state.fetch(23)), valuesOf<float>(state.fetch(25)));
  EXPECT_EQ(valuesOf<float>(state.fetch(22)), valuesOf<float>(state.fetch(24)));
  // An unknown handle starts nothing; a free of an input drops.
  EXPECT_FALSE(state.speculate(7, 1, {10, 77}));
  ASSERT_TRUE(state.speculate(8, 1, {10}));
  state.free({10});
  EXPECT_FALSE(state.speculating());
  RankState::SpeculationCounts counts = state.speculationCounts();
  EXPECT_EQ(counts.started, 4u);
  EXPECT_EQ(counts.confirmed, 0u);
  EXPECT_EQ(counts.dropped, 4u);
}

} // namespace
} // namespace dtorch::rt::test
