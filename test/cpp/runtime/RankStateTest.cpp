// RankState: what the worker and the in-process backend keep per rank.
// Programs are validated once per upload, a failed run poisons its outputs,
// the poison travels unchanged down a chain of runs and surfaces at fetch.
#include "TestSupport.h"

#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/Kernels.h"
#include "dtorch/runtime/RankState.h"

#include <atomic>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::COMM;
using ::dtorch::wire::F32;

std::atomic<int> countedChecks{0};

// neg whose check counts how often the validator looked at it.
void registerCountedNeg() {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.check = [](const AttrReader &, const std::vector<TensorDesc> &,
                    const std::vector<TensorDesc> &) { ++countedChecks; };
  kernel.run = [](const AttrReader &, const std::vector<const Tensor *> &in,
                  const std::vector<Tensor *> &out) {
    for (int64_t i = 0; i < in[0]->numel(); ++i)
      out[0]->data_as<float>()[i] = -in[0]->data_as<float>()[i];
  };
  registerKernel("test_counted_neg", F32, kCpuDevice, kernel);
}

// Passes validation, throws when it runs.
void registerFailingKernel() {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.run = [](const AttrReader &, const std::vector<const Tensor *> &,
                  const std::vector<Tensor *> &) {
    throw RuntimeError("the test kernel failed on purpose");
  };
  registerKernel("test_fails_at_run", F32, kCpuDevice, kernel);
}

std::string fetchError(const RankState &state, uint64_t handle) {
  try {
    state.fetch(handle);
  } catch (const RuntimeError &e) {
    return e.what();
  }
  ADD_FAILURE() << "fetch of handle " << handle << " did not throw";
  return "";
}

TEST(RankState, ValidatesOncePerUploadNotPerRun) {
  registerCountedNeg();
  RankState state(0, nullptr);
  int before = countedChecks;
  state.upload(7, unaryProgram("test_counted_neg"));
  EXPECT_EQ(countedChecks - before, 1);
  state.put(1, makeTensor<float>(F32, {3}, {1, 2, 3}));
  for (uint64_t out = 10; out < 13; ++out)
    EXPECT_EQ(state.run(7, {1}, {out}), std::nullopt);
  EXPECT_EQ(countedChecks - before, 1); // three runs, no new validation
  EXPECT_EQ(valuesOf<float>(state.fetch(12)), (std::vector<float>{-1, -2, -3}));
  EXPECT_EQ(state.liveTensors(), 4u);
  // Uploading again under the same id replaces the program and validates it.
  state.upload(7, unaryProgram("test_counted_neg"));
  EXPECT_EQ(countedChecks - before, 2);
}

TEST(RankState, InvalidProgramIsKeptAndFailsEveryRun) {
  RankState state(2, nullptr);
  state.upload(1, unaryProgram("no_such_op"));
  state.put(1, makeTensor<float>(F32, {3}, {1, 2, 3}));
  std::optional<std::string> error = state.run(1, {1}, {5, 6});
  ASSERT_TRUE(error);
  EXPECT_EQ(error->rfind("rank 2: invalid program 'test'", 0), 0u) << *error;
  EXPECT_NE(error->find("no_such_op"), std::string::npos) << *error;
  EXPECT_TRUE(state.isPoisoned(5));
  EXPECT_TRUE(state.isPoisoned(6));
  EXPECT_EQ(fetchError(state, 5), *error);
  EXPECT_EQ(state.run(1, {1}, {5}), error); // refused again, same reason
}

TEST(RankState, FailurePoisonsOutputsAndTravelsDownTheChain) {
  registerFailingKernel();
  registerCountedNeg();
  RankState state(1, nullptr);
  state.upload(1, unaryProgram("test_fails_at_run"));
  state.upload(2, unaryProgram("test_counted_neg"));
  state.put(100, makeTensor<float>(F32, {3}, {1, 2, 3}));
  state.put(101, makeTensor<float>(F32, {3}, {4, 5, 6})); // replaced below
  std::optional<std::string> root = state.run(1, {100}, {101});
  ASSERT_TRUE(root);
  EXPECT_EQ(root->rfind("rank 1: ", 0), 0u) << *root;
  EXPECT_NE(root->find("instruction 0 ('test_fails_at_run' at test.py:1)"),
            std::string::npos)
      << *root;
  EXPECT_NE(root->find("failed on purpose"), std::string::npos) << *root;
  EXPECT_EQ(state.liveTensors(), 1u); // 101's old value is gone
  // A run reading the poisoned tensor fails with the root cause, unchanged.
  EXPECT_EQ(state.run(2, {101}, {102}), root);
  EXPECT_EQ(fetchError(state, 102), *root);
  // put() and a successful run clear a poison; free() forgets it.
  state.put(101, makeTensor<float>(F32, {3}, {1, 1, 1}));
  EXPECT_FALSE(state.isPoisoned(101));
  EXPECT_EQ(state.run(2, {101}, {102}), std::nullopt);
  EXPECT_EQ(valuesOf<float>(state.fetch(102)),
            (std::vector<float>{-1, -1, -1}));
  state.poison(103, "gone");
  state.free({101, 102, 103});
  EXPECT_FALSE(state.isPoisoned(103));
  EXPECT_EQ(fetchError(state, 103), "unknown tensor handle 103 on rank 1");
  EXPECT_EQ(state.liveTensors(), 1u);
}

TEST(RankState, RefusesRunsThatDoNotMatch) {
  registerCountedNeg();
  RankState state(3, nullptr);
  state.upload(4, unaryProgram("test_counted_neg"));
  state.put(1, makeTensor<float>(F32, {3}, {1, 2, 3}));
  EXPECT_EQ(state.run(9, {1}, {2}),
            std::optional<std::string>("rank 3: unknown program id 9"));
  EXPECT_EQ(state.run(4, {8}, {2}),
            std::optional<std::string>(
                "rank 3: program 'test' input tensor handle 8 is unknown"));
  EXPECT_EQ(state.run(4, {1}, {2, 3}),
            std::optional<std::string>(
                "rank 3: program 'test' has 1 output(s), run names 2"));
  EXPECT_TRUE(state.isPoisoned(2));
  EXPECT_TRUE(state.isPoisoned(3));
  // A wrongly shaped input is the executor's error, prefixed with the rank.
  state.put(5, makeTensor<float>(F32, {2}, {1, 2}));
  std::optional<std::string> error = state.run(4, {5}, {6});
  ASSERT_TRUE(error);
  EXPECT_EQ(error->rfind("rank 3: ", 0), 0u) << *error;
  EXPECT_TRUE(state.isPoisoned(6));
}

// A program uploaded once draws other numbers with other run seeds, the same
// ones with the same seed, and refuses a slot the run does not fill.
TEST(RankState, RandomSeedSlotsReadTheRunsSeeds) {
  RankState state(0, nullptr);
  ProgramBuilder b;
  int out = b.buffer(F32, {8});
  auto &inst = b.add("random", {}, {out});
  setInt(inst, "seed_slot", 0);
  setString(inst, "dist", "normal");
  setInts(inst, "global_shape", {8});
  setInts(inst, "offset", {0});
  b.output(out);
  state.upload(1, b.program());
  EXPECT_EQ(state.run(1, {}, {10}, {3}), std::nullopt);
  EXPECT_EQ(state.run(1, {}, {11}, {4}), std::nullopt);
  EXPECT_EQ(state.run(1, {}, {12}, {3}), std::nullopt);
  std::vector<float> a = valuesOf<float>(state.fetch(10));
  EXPECT_NE(a, valuesOf<float>(state.fetch(11)));
  EXPECT_EQ(a, valuesOf<float>(state.fetch(12)));
  EXPECT_EQ(a[5], static_cast<float>(randomNormal(3, 5)));
  std::optional<std::string> error = state.run(1, {}, {13});
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("seed_slot 0 is outside the run's 0 seed(s)"),
            std::string::npos)
      << *error;
  // A negative slot is refused by validation, on upload.
  setInt(*b.program().mutable_instructions(0), "seed_slot", -1);
  state.upload(2, b.program());
  error = state.run(2, {}, {14}, {3});
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("'seed_slot' must be >= 0"), std::string::npos)
      << *error;
}

TEST(RankState, RunsCollectivesThroughItsCommunicator) {
  const int world = 2;
  FakeCollectiveHub hub(world, std::chrono::seconds(5));
  runRanks(world, [&](int rank) {
    auto comm = hub.communicator(rank);
    RankState state(rank, comm.get());
    ProgramBuilder b;
    int x = b.input(F32, {2});
    int y = b.buffer(F32, {2});
    Instruction &reduce = b.add("all_reduce", {x}, {y}, COMM);
    setInts(reduce, "group", {0, 1});
    setString(reduce, "reduce", "max");
    b.output(y);
    state.upload(1, b.program());
    float r = static_cast<float>(rank);
    state.put(1, makeTensor<float>(F32, {2}, {r, -r}));
    EXPECT_EQ(state.run(1, {1}, {2}), std::nullopt);
    EXPECT_EQ(valuesOf<float>(state.fetch(2)), (std::vector<float>{1, 0}));
  });
}

// The buffer table: every put, run, poison and free changes it exactly.
TEST(RankState, MemoryStatsFollowPutRunPoisonAndFree) {
  registerCountedNeg();
  RankState state(3, nullptr);
  MemoryStats empty = state.memoryStats();
  EXPECT_EQ(empty.rank, 3);
  EXPECT_TRUE(empty.known);
  EXPECT_EQ(empty.tensors, 0u);
  EXPECT_EQ(empty.bytes, 0u);
  EXPECT_TRUE(empty.bytesByDtype.empty());
  EXPECT_TRUE(empty.held.empty());

  state.put(20, makeTensor<float>(F32, {3}, {1, 2, 3}));
  state.put(10, makeTensor<double>(::dtorch::wire::F64, {2, 2}, {1, 2, 3, 4}));
  MemoryStats two = state.memoryStats();
  EXPECT_EQ(two.tensors, 2u);
  EXPECT_EQ(two.bytes, 3u * 4 + 4u * 8);
  EXPECT_EQ(two.bytesByDtype.at(F32), 12u);
  EXPECT_EQ(two.bytesByDtype.at(::dtorch::wire::F64), 32u);
  ASSERT_EQ(two.held.size(), 2u); // by increasing handle
  EXPECT_EQ(two.held[0].handle, 10u);
  EXPECT_EQ(two.held[0].bytes, 32u);
  EXPECT_EQ(two.held[0].dtype, ::dtorch::wire::F64);
  EXPECT_EQ(two.held[1].handle, 20u);
  EXPECT_EQ(two.held[1].bytes, 12u);

  // A run adds its outputs; replacing a handle's value does not add one.
  state.upload(1, unaryProgram("test_counted_neg", 5));
  state.put(30, makeTensor<float>(F32, {5}, {1, 2, 3, 4, 5}));
  ASSERT_EQ(state.run(1, {30}, {31}), std::nullopt);
  state.put(20, makeTensor<float>(F32, {6}, {1, 2, 3, 4, 5, 6}));
  MemoryStats ran = state.memoryStats();
  EXPECT_EQ(ran.tensors, 4u);
  EXPECT_EQ(ran.bytes, 32u + 6 * 4 + 5 * 4 + 5 * 4);
  EXPECT_EQ(ran.bytesByDtype.at(F32), 6u * 4 + 5 * 4 + 5 * 4);

  // A failed run poisons its output: a poisoned handle holds nothing.
  ASSERT_TRUE(state.run(1, {99}, {40}));
  EXPECT_EQ(state.memoryStats().tensors, 4u);
  state.poison(31, "gone");
  MemoryStats poisoned = state.memoryStats();
  EXPECT_EQ(poisoned.tensors, 3u);
  EXPECT_EQ(poisoned.bytes, 32u + 6 * 4 + 5 * 4);

  // Two handles sharing one storage count its bytes once.
  state.put(50, state.fetch(30));
  MemoryStats shared = state.memoryStats();
  EXPECT_EQ(shared.tensors, 4u);
  EXPECT_EQ(shared.bytes, poisoned.bytes);
  EXPECT_EQ(shared.held.back().handle, 50u);
  EXPECT_EQ(shared.held.back().bytes, 20u);

  state.free({10, 30, 50, 12345});
  MemoryStats freed = state.memoryStats();
  EXPECT_EQ(freed.tensors, 1u);
  EXPECT_EQ(freed.bytes, 24u);
  EXPECT_EQ(freed.bytesByDtype.count(::dtorch::wire::F64), 0u);
  state.free({20});
  EXPECT_EQ(state.memoryStats().bytes, 0u);
  EXPECT_EQ(state.memoryStats().tensors, 0u);
}

} // namespace
} // namespace dtorch::rt::test
