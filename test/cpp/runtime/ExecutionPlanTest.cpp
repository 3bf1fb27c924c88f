// Execution plans (ExecutionPlan.h): a program resolved once and run many
// times gives what resolving it on every run gives (values, memory counts,
// trace), whatever the inputs; the plan RankState keeps is dropped when
// its program is replaced, rebuilt when the kernel registry changes, holds
// no storage of a run after it, and lets go of an arena the executor
// replaced; a failing or malformed program still fails with its message.
#include "TestSupport.h"

#include "dtorch/runtime/ExecutionPlan.h"
#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/RankState.h"

#include <cmath>
#include <cstring>
#include <functional>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::F32;

// x [2, 3] and p [6] in; every way a run binds a buffer:
//   r = reshape(x)   view of the input x (unless x is donated), an output
//   e = exp(r)       arena, offset 0
//   m = e * p        arena, offset 64
//   y = m + e        own storage, an output
//   u = p - m        an output that takes p's storage when p is donated
//   t = reshape(m)   arena, offset 64: in place over m
//   z = -t           own storage, an output
struct PlanProgram {
  ProgramBuilder b;
  int x, p, r, e, m, y, u, t, z;
  PlanProgram() {
    x = b.input(F32, {2, 3});
    p = b.input(F32, {6});
    r = b.buffer(F32, {6});
    e = b.buffer(F32, {6});
    m = b.buffer(F32, {6});
    y = b.buffer(F32, {6});
    u = b.buffer(F32, {6});
    t = b.buffer(F32, {2, 3});
    z = b.buffer(F32, {2, 3});
    b.add("reshape", {x}, {r});
    b.add("exp", {r}, {e});
    b.add("mul", {e, p}, {m});
    b.add("add", {m, e}, {y});
    b.add("sub", {p, m}, {u});
    b.add("reshape", {m}, {t});
    b.add("neg", {t}, {z});
    for (int id : {y, u, z, r})
      b.output(id);
    setBufferPlan(b.program(), {-1, -1, -1, 0, 64, -1, -1, 64, -1}, 128);
    setOutputDonors(b.program(), {-1, 1, -1, -1});
  }
};

std::vector<float> xValues(float shift) {
  return {0.5f + shift, -1, 2, 0.25f, 3 - shift, -0.75f};
}
std::vector<float> pValues(float shift) {
  return {1, 2 + shift, -3, 0.5f, shift, 4};
}

// The outputs y, u, z, r, computed here.
std::vector<std::vector<float>> expected(const std::vector<float> &x,
                                         const std::vector<float> &p) {
  std::vector<std::vector<float>> out(4);
  for (size_t i = 0; i < x.size(); ++i) {
    float e = std::exp(x[i]), m = e * p[i];
    out[0].push_back(m + e);
    out[1].push_back(p[i] - m);
    out[2].push_back(-m);
    out[3].push_back(x[i]);
  }
  return out;
}

std::vector<std::vector<float>> valuesOfAll(const std::vector<Tensor> &out) {
  std::vector<std::vector<float>> values;
  for (const Tensor &t : out)
    values.push_back(valuesOf<float>(t));
  return values;
}

// Within a few ulp (the runtime's exp is not libm's).
void expectClose(const std::vector<std::vector<float>> &actual,
                 const std::vector<std::vector<float>> &wanted) {
  ASSERT_EQ(actual.size(), wanted.size());
  for (size_t k = 0; k < actual.size(); ++k) {
    ASSERT_EQ(actual[k].size(), wanted[k].size());
    for (size_t i = 0; i < actual[k].size(); ++i)
      EXPECT_NEAR(actual[k][i], wanted[k][i],
                  1e-6f * (1 + std::fabs(wanted[k][i])))
          << "output " << k << " element " << i;
  }
}

bool sameMemoryCounts(const RunMemory &a, const RunMemory &b) {
  return a.arenaBytes == b.arenaBytes && a.ownBytes == b.ownBytes &&
         a.allocations == b.allocations && a.donations == b.donations &&
         a.donatedBytes == b.donatedBytes && a.reshapeViews == b.reshapeViews;
}

TEST(ExecutionPlan, RunsTwiceWithOtherInputsAsTheUnplannedPath) {
  PlanProgram c;
  ASSERT_NO_THROW(validateProgram(c.b.program(), -1));
  Executor planned(nullptr), unplanned(nullptr);
  planned.setExecutionPlans(true);
  unplanned.setExecutionPlans(false);
  std::shared_ptr<ExecutionPlan> plan =
      planned.makePlan(std::make_shared<const Program>(c.b.program()));
  EXPECT_EQ(plan->instructionCount(), 7u);
  EXPECT_EQ(plan->keptArenaViewCount(), 3u); // e, m and t
  EXPECT_FALSE(plan->arenaViewsBound());
  for (float shift : {0.0f, 1.5f, -2.0f}) {
    for (bool donate : {false, true}) {
      SCOPED_TRACE("shift " + std::to_string(shift) +
                   (donate ? ", p donated" : ""));
      std::vector<bool> donated = {false, donate};
      Tensor x1 = makeTensor<float>(F32, {2, 3}, xValues(shift));
      Tensor p1 = makeTensor<float>(F32, {6}, pValues(shift));
      Tensor x2 = makeTensor<float>(F32, {2, 3}, xValues(shift));
      Tensor p2 = makeTensor<float>(F32, {6}, pValues(shift));
      std::vector<Tensor> in1 = {x1, std::move(p1)};
      std::vector<Tensor> in2 = {x2, std::move(p2)};
      std::vector<Tensor> a = planned.runPlanned(*plan, in1, {}, donated);
      std::vector<Tensor> b =
          unplanned.runValidated(c.b.program(), in2, {}, donated);
      // Bit for bit.
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k) {
        ASSERT_EQ(a[k].shape(), b[k].shape());
        EXPECT_EQ(std::memcmp(a[k].data(), b[k].data(), a[k].nbytes()), 0)
            << "output " << k;
      }
      expectClose(valuesOfAll(a), expected(xValues(shift), pValues(shift)));
      EXPECT_TRUE(
          sameMemoryCounts(planned.lastRunMemory(), unplanned.lastRunMemory()));
      EXPECT_EQ(planned.lastRunMemory().reshapeViews, 1u);
      EXPECT_EQ(a[3].data(), x1.data()); // r views x
      // u takes p's storage where p is donated (in1 holds it alone).
      EXPECT_EQ(planned.lastRunMemory().donations, donate ? 1u : 0u);
    }
  }
  EXPECT_TRUE(plan->arenaViewsBound());
}

TEST(ExecutionPlan, ADonatedSoleInputIsWrittenOverAsWithoutAPlan) {
  PlanProgram c;
  for (bool plans : {true, false}) {
    Executor executor(nullptr);
    executor.setExecutionPlans(plans);
    Tensor p = makeTensor<float>(F32, {6}, pValues(0));
    const void *pData = p.data();
    std::vector<Tensor> in;
    in.push_back(makeTensor<float>(F32, {2, 3}, xValues(0)));
    in.push_back(std::move(p)); // held by `in` alone
    std::vector<Tensor> out =
        executor.runValidated(c.b.program(), in, {}, {false, true});
    EXPECT_EQ(out[1].data(), pData) << "plans " << plans;
    EXPECT_EQ(executor.lastRunMemory().donations, 1u);
    in.clear();
    expectClose(valuesOfAll(out), expected(xValues(0), pValues(0)));
  }
}

TEST(ExecutionPlan, KeepsNoStorageOfARunAfterIt) {
  PlanProgram c;
  Executor executor(nullptr);
  std::shared_ptr<ExecutionPlan> plan =
      executor.makePlan(std::make_shared<const Program>(c.b.program()));
  Tensor x = makeTensor<float>(F32, {2, 3}, xValues(0));
  Tensor p = makeTensor<float>(F32, {6}, pValues(0));
  std::vector<Tensor> out = executor.runPlanned(*plan, {x, p});
  EXPECT_EQ(out[3].data(), x.data()); // r views x
  out.clear();
  EXPECT_TRUE(x.soleOwner()); // the plan let go of the input and its view
  EXPECT_TRUE(p.soleOwner());
  // A failed run lets go too.
  EXPECT_THROW(executor.runPlanned(
                   *plan, {x, makeTensor<float>(F32, {5}, {1, 2, 3, 4, 5})}),
               RuntimeError);
  EXPECT_TRUE(x.soleOwner());
}

TEST(ExecutionPlan, ReportsTheSameErrorsAsTheUnplannedPath) {
  PlanProgram c;
  for (bool plans : {true, false}) {
    Executor executor(nullptr);
    executor.setExecutionPlans(plans);
    expectRuntimeError(
        [&] { executor.runValidated(c.b.program(), {Tensor()}); },
        {"program 'test': expects 2 input(s), got 1"});
    expectRuntimeError(
        [&] {
          executor.runValidated(c.b.program(),
                                {makeTensor<float>(F32, {6}, pValues(0)),
                                 makeTensor<float>(F32, {6}, pValues(0))});
        },
        {"program 'test': input 0 (buffer 0) must be float32[2, 3], got "
         "float32[6]"});
  }
}

// A kernel registered under a test name: out = factor * in.
void registerScale(float factor) {
  Kernel kernel;
  kernel.numInputs = 1;
  kernel.run = [factor](const AttrReader &,
                        const std::vector<const Tensor *> &in,
                        const std::vector<Tensor *> &out) {
    for (int64_t i = 0; i < in[0]->numel(); ++i)
      out[0]->data_as<float>()[i] = factor * in[0]->data_as<float>()[i];
  };
  registerKernel("test_plan_scale", F32, kCpuDevice, kernel);
}

TEST(ExecutionPlan, RankStateKeepsOnePlanPerUploadAndDropsItOnReplacement) {
  RankState state(0, nullptr);
  state.setExecutionPlans(true);
  state.upload(5, unaryProgram("neg"));
  state.put(1, makeTensor<float>(F32, {3}, {1, 2, 3}));
  EXPECT_EQ(state.planOf(5), nullptr); // made by the first run
  ASSERT_EQ(state.run(5, {1}, {2}), std::nullopt);
  std::shared_ptr<const ExecutionPlan> first = state.planOf(5);
  ASSERT_NE(first, nullptr);
  state.put(1, makeTensor<float>(F32, {3}, {4, 5, 6}));
  ASSERT_EQ(state.run(5, {1}, {3}), std::nullopt);
  EXPECT_EQ(state.planOf(5), first); // kept
  EXPECT_EQ(valuesOf<float>(state.fetch(3)), (std::vector<float>{-4, -5, -6}));
  std::weak_ptr<const ExecutionPlan> old = first;
  first.reset();
  // Another program under the id: the old plan goes with the old program.
  state.upload(5, unaryProgram("exp"));
  EXPECT_TRUE(old.expired());
  EXPECT_EQ(state.planOf(5), nullptr);
  ASSERT_EQ(state.run(5, {1}, {4}), std::nullopt);
  expectClose({valuesOf<float>(state.fetch(4))},
              {{std::exp(4.0f), std::exp(5.0f), std::exp(6.0f)}});
  // Refused: the plan goes, every run fails with the reason.
  state.reject(5, "refused on purpose");
  EXPECT_EQ(state.planOf(5), nullptr);
  EXPECT_EQ(state.run(5, {1}, {6}),
            std::optional<std::string>("rank 0: refused on purpose"));
  EXPECT_TRUE(state.isPoisoned(6));
  // Plans off: none kept, the same results.
  state.upload(5, unaryProgram("neg"));
  state.setExecutionPlans(false);
  ASSERT_EQ(state.run(5, {1}, {7}), std::nullopt);
  EXPECT_EQ(state.planOf(5), nullptr);
  EXPECT_EQ(valuesOf<float>(state.fetch(7)), (std::vector<float>{-4, -5, -6}));
}

TEST(ExecutionPlan, AMalformedProgramStillFailsWithItsReason) {
  RankState state(1, nullptr);
  state.setExecutionPlans(true);
  state.put(1, makeTensor<float>(F32, {3}, {1, 2, 3}));
  Program bad = unaryProgram("neg");
  bad.mutable_instructions(0)->set_outputs(0, 9); // no buffer 9
  state.upload(2, bad);
  std::optional<std::string> error = state.run(2, {1}, {3});
  ASSERT_TRUE(error);
  EXPECT_EQ(error->rfind("rank 1: invalid program 'test'", 0), 0u) << *error;
  EXPECT_EQ(state.planOf(2), nullptr);
  EXPECT_TRUE(state.isPoisoned(3));
  EXPECT_EQ(state.run(2, {1}, {3}), error);
  // A valid program under the id runs.
  state.upload(2, unaryProgram("neg"));
  EXPECT_EQ(state.run(2, {1}, {3}), std::nullopt);
  EXPECT_FALSE(state.isPoisoned(3));
}

TEST(ExecutionPlan, AKernelFailureFailsTheRunAndLeavesThePlanUsable) {
  Kernel failing;
  failing.numInputs = 1;
  failing.run = [](const AttrReader &, const std::vector<const Tensor *> &in,
                   const std::vector<Tensor *> &) {
    if (in[0]->data_as<float>()[0] < 0)
      throw RuntimeError("negative on purpose");
  };
  registerKernel("test_plan_fails_on_negative", F32, kCpuDevice, failing);
  RankState state(2, nullptr);
  state.setExecutionPlans(true);
  state.upload(1, unaryProgram("test_plan_fails_on_negative"));
  state.put(1, makeTensor<float>(F32, {3}, {-1, 2, 3}));
  std::optional<std::string> error = state.run(1, {1}, {2});
  ASSERT_TRUE(error);
  EXPECT_NE(error->find("rank 2: program 'test': instruction 0 "
                        "('test_plan_fails_on_negative' at test.py:1) failed: "
                        "negative on purpose"),
            std::string::npos)
      << *error;
  EXPECT_TRUE(state.isPoisoned(2));
  std::shared_ptr<const ExecutionPlan> plan = state.planOf(1);
  ASSERT_NE(plan, nullptr);
  state.put(1, makeTensor<float>(F32, {3}, {1, 2, 3}));
  EXPECT_EQ(state.run(1, {1}, {2}), std::nullopt);
  EXPECT_EQ(state.planOf(1), plan);
}

TEST(ExecutionPlan, IsMadeAgainWhenTheKernelRegistryChanges) {
  registerScale(2);
  RankState state(0, nullptr);
  state.setExecutionPlans(true);
  state.upload(3, unaryProgram("test_plan_scale"));
  state.put(1, makeTensor<float>(F32, {3}, {1, 2, 3}));
  ASSERT_EQ(state.run(3, {1}, {2}), std::nullopt);
  EXPECT_EQ(valuesOf<float>(state.fetch(2)), (std::vector<float>{2, 4, 6}));
  std::weak_ptr<const ExecutionPlan> first = state.planOf(3);
  // The kernel the plan resolved is replaced (and destroyed).
  registerScale(3);
  ASSERT_EQ(state.run(3, {1}, {2}), std::nullopt);
  EXPECT_EQ(valuesOf<float>(state.fetch(2)), (std::vector<float>{3, 6, 9}));
  EXPECT_TRUE(first.expired());
}

// Two programs of different arenas on one executor: the larger one makes
// the executor replace its arena, and the smaller one's plan drops its
// views of the old one (which is then freed) and binds the new one.
TEST(ExecutionPlan, LetsGoOfAnArenaTheExecutorReplaced) {
  PlanProgram small;
  ProgramBuilder big;
  int x = big.input(F32, {64});
  int e = big.buffer(F32, {64});
  int y = big.buffer(F32, {64});
  big.add("exp", {x}, {e});
  big.add("neg", {e}, {y});
  big.output(y);
  setBufferPlan(big.program(), {-1, 0, -1}, 1024);
  ASSERT_NO_THROW(validateProgram(big.program(), -1));
  Executor executor(nullptr);
  auto smallPlan =
      executor.makePlan(std::make_shared<const Program>(small.b.program()));
  auto bigPlan =
      executor.makePlan(std::make_shared<const Program>(big.program()));
  auto runSmall = [&](float shift) {
    std::vector<Tensor> out = executor.runPlanned(
        *smallPlan, {makeTensor<float>(F32, {2, 3}, xValues(shift)),
                     makeTensor<float>(F32, {6}, pValues(shift))});
    expectClose(valuesOfAll(out), expected(xValues(shift), pValues(shift)));
  };
  runSmall(0);
  EXPECT_TRUE(smallPlan->arenaViewsBound());
  EXPECT_EQ(executor.arenaCapacity(), 128u);
  std::vector<float> ones(64, 1.0f);
  std::vector<Tensor> out =
      executor.runPlanned(*bigPlan, {makeTensor<float>(F32, {64}, ones)});
  EXPECT_EQ(valuesOf<float>(out[0])[5], -std::exp(1.0f));
  EXPECT_EQ(executor.arenaCapacity(), 1024u);
  EXPECT_FALSE(smallPlan->arenaViewsBound());
  runSmall(1);
  EXPECT_TRUE(smallPlan->arenaViewsBound());
  EXPECT_EQ(executor.lastRunMemory().allocations, 3u); // y, u, z: no arena
}

// A run of a plan that is running already (re-entered from one of its
// kernels) resolves the program anew, with an arena of its own.
TEST(ExecutionPlan, ARunOfAPlanInUseResolvesTheProgramAnew) {
  static std::function<void()> hook;
  Kernel reenter;
  reenter.numInputs = 1;
  reenter.run = [](const AttrReader &, const std::vector<const Tensor *> &in,
                   const std::vector<Tensor *> &out) {
    std::function<void()> once = std::move(hook);
    hook = nullptr;
    if (once)
      once();
    std::memcpy(out[0]->data(), in[0]->data(), in[0]->nbytes());
  };
  registerKernel("test_plan_reenter", F32, kCpuDevice, reenter);
  ProgramBuilder b;
  int x = b.input(F32, {4});
  int t = b.buffer(F32, {4});
  int y = b.buffer(F32, {4});
  b.add("test_plan_reenter", {x}, {t});
  b.add("neg", {t}, {y});
  b.output(y);
  setBufferPlan(b.program(), {-1, 0, -1}, 64);
  Executor executor(nullptr);
  auto plan = executor.makePlan(std::make_shared<const Program>(b.program()));
  std::vector<float> inner;
  hook = [&] {
    std::vector<Tensor> out =
        executor.runPlanned(*plan, {makeTensor<float>(F32, {4}, {5, 6, 7, 8})});
    inner = valuesOf<float>(out[0]);
  };
  std::vector<Tensor> out =
      executor.runPlanned(*plan, {makeTensor<float>(F32, {4}, {1, 2, 3, 4})});
  EXPECT_EQ(valuesOf<float>(out[0]), (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_EQ(inner, (std::vector<float>{-5, -6, -7, -8}));
}

// The trace of a planned run has the events of a run without a plan.
TEST(ExecutionPlan, TracesTheSameInstructionEvents) {
  PlanProgram c;
  std::vector<std::vector<TraceEvent>> events;
  for (bool plans : {true, false}) {
    TraceBuffer trace;
    Executor executor(nullptr);
    executor.setExecutionPlans(plans);
    executor.setTrace(&trace);
    trace.start();
    for (int run = 0; run < 2; ++run)
      executor.runValidated(c.b.program(),
                            {makeTensor<float>(F32, {2, 3}, xValues(0)),
                             makeTensor<float>(F32, {6}, pValues(0))});
    TraceChunk chunk;
    trace.drain(5, chunk); // in two chunks: a run's events split
    EXPECT_EQ(chunk.remaining, 9u);
    trace.drain(100, chunk);
    EXPECT_EQ(chunk.remaining, 0u);
    events.push_back(chunk.events);
  }
  ASSERT_EQ(events[0].size(), 14u);
  ASSERT_EQ(events[1].size(), 14u);
  for (size_t i = 0; i < 14; ++i) {
    const TraceEvent &a = events[0][i], &b = events[1][i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.category, b.category);
    EXPECT_EQ(a.location, b.location);
    EXPECT_EQ(a.detail, b.detail);
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(a.lane, b.lane);
    EXPECT_LE(a.startNs, a.endNs);
  }
  EXPECT_EQ(events[0][2].name, "mul");
  EXPECT_EQ(events[0][2].detail, "test #2");
  EXPECT_EQ(events[0][2].bytes, 24);
}

TEST(ExecutionPlan, TraceCapacityCountsDroppedInstructions) {
  PlanProgram c;
  TraceBuffer trace;
  Executor executor(nullptr);
  executor.setExecutionPlans(true);
  executor.setTrace(&trace);
  trace.start(10);
  for (int run = 0; run < 2; ++run)
    executor.runValidated(c.b.program(),
                          {makeTensor<float>(F32, {2, 3}, xValues(0)),
                           makeTensor<float>(F32, {6}, pValues(0))});
  TraceChunk chunk;
  trace.drain(100, chunk);
  EXPECT_EQ(chunk.events.size(), 10u);
  EXPECT_EQ(chunk.dropped, 4u);
}

} // namespace
} // namespace dtorch::rt::test
