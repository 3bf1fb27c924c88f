// The fast setup of a run (DTORCH_FAST_SETUP, Executor::fastSetup): a rank
// that reuses its scratch (input tensors, operand lists, speculation
// limits) and counts its table's bytes after the run gives the same bits,
// the same memory counts and the same errors as one that allocates per run,
// over repeated runs, with donation, reshape views, the arena, speculation
// and failures in between; and the setup's phases are traced (SetupTrace).
#include "TestSupport.h"

#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/RankState.h"
#include "dtorch/runtime/SpeculativeRun.h"

#include <cmath>
#include <cstring>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::F32;

// x [2, 4] -> reshape -> a [8] (a view of the input) -> exp -> t (arena)
// -> mul g -> u (arena) -> sub from p -> out [8], written over the donated
// p; r = reshape(u) [2, 4] (storage of its own); s = mul(t, t), an output
// of its own.
struct Step {
  ProgramBuilder b;
  int x, p, g, a, t, u, out, r, s;
  Step() {
    x = b.input(F32, {2, 4});
    p = b.input(F32, {8});
    g = b.input(F32, {8});
    a = b.buffer(F32, {8});
    t = b.buffer(F32, {8});
    u = b.buffer(F32, {8});
    out = b.buffer(F32, {8});
    r = b.buffer(F32, {2, 4});
    s = b.buffer(F32, {8});
    b.add("reshape", {x}, {a});
    b.add("exp", {a}, {t});
    b.add("mul", {t, g}, {u});
    b.add("sub", {p, u}, {out});
    b.add("reshape", {u}, {r});
    b.add("mul", {t, t}, {s});
    b.output(out);
    b.output(r);
    b.output(s);
    setBufferPlan(b.program(), {-1, -1, -1, -1, 0, 64, -1, -1, -1}, 128);
    setOutputDonors(b.program(), {1, -1, -1});
  }
};

std::vector<float> series(float start, float step) {
  std::vector<float> v(8);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = start + step * static_cast<float>(i);
  return v;
}

std::vector<uint32_t> bitsOf(const Tensor &t) {
  std::vector<float> values = valuesOf<float>(t);
  std::vector<uint32_t> bits(values.size());
  std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

// What a sequence of steps leaves: every output's bits, each run's error
// (empty: none) and memory counts.
struct Record {
  std::vector<std::vector<uint32_t>> outputs;
  std::vector<std::string> errors;
  std::vector<uint64_t> peaks, tableBytes, arenaBytes;
};

// Five steps of `Step` on one rank, each donating the parameter it reads
// and writing the next one; step 2 names an unknown gradient handle, step 3
// a gradient of another shape (both fail cleanly), and the rank keeps
// going. With `speculate`, each step is first speculated on its leading
// input (the rank's Speculate START) and confirmed by the run.
Record runSteps(bool fast, bool speculate) {
  Step step;
  RankState state(0, nullptr);
  state.setFastSetup(fast);
  EXPECT_EQ(state.fastSetup(), fast);
  state.upload(1, step.b.program());
  state.put(100, makeTensor<float>(F32, {8}, series(1.0f, 0.5f)));
  Record record;
  uint64_t param = 100;
  for (int k = 0; k < 5; ++k) {
    uint64_t base = 1000 * static_cast<uint64_t>(k + 1);
    uint64_t x = base + 1, g = base + 2;
    state.put(x,
              makeTensor<float>(F32, {2, 4}, series(-1.0f + 0.1f * k, 0.25f)));
    if (k == 3)
      state.put(g, makeTensor<float>(F32, {4}, {1, 2, 3, 4}));
    else if (k != 2)
      state.put(g, makeTensor<float>(F32, {8}, series(0.5f, -0.125f * k)));
    std::vector<uint64_t> inputs = {x, param, g};
    std::vector<uint64_t> outputs = {base + 10, base + 11, base + 12};
    uint64_t speculation = 0;
    // The speculation binds x (odd steps: and the donated parameter too).
    std::vector<uint64_t> known = {x};
    if (k % 2 == 1)
      known.push_back(param);
    if (speculate && state.speculate(base, 1, known))
      speculation = base;
    std::optional<std::string> error =
        state.run(1, inputs, outputs, {}, {param}, speculation);
    record.errors.push_back(error ? *error : std::string());
    MemoryStats stats = state.memoryStats();
    record.peaks.push_back(stats.lastRunPeakBytes);
    record.tableBytes.push_back(stats.bytes);
    record.arenaBytes.push_back(stats.arenaBytes);
    if (error) {
      // The run's outputs and its donated parameter are poisoned; the
      // next step starts from a fresh parameter.
      EXPECT_TRUE(state.isPoisoned(outputs[0]));
      EXPECT_TRUE(state.isPoisoned(param));
      param = base + 50;
      state.put(param, makeTensor<float>(F32, {8}, series(2.0f, -0.25f)));
      continue;
    }
    for (uint64_t out : outputs)
      record.outputs.push_back(bitsOf(state.fetch(out)));
    EXPECT_THROW(state.fetch(param), RuntimeError); // consumed
    param = outputs[0];
  }
  if (speculate) // the three good steps (step 3's fails at its binding)
    EXPECT_EQ(state.speculationCounts().confirmed, 3u);
  return record;
}

TEST(FastSetup, TheSameBitsMemoryAndErrorsWithTheSwitchOffAndOn) {
  Step step;
  ASSERT_NO_THROW(validateProgram(step.b.program(), -1));
  for (bool speculate : {false, true}) {
    SCOPED_TRACE(speculate ? "speculated" : "not speculated");
    Record slow = runSteps(false, speculate);
    Record fast = runSteps(true, speculate);
    ASSERT_EQ(slow.outputs.size(), 9u); // three good steps, three outputs
    EXPECT_EQ(fast.outputs, slow.outputs);
    EXPECT_EQ(fast.errors, slow.errors);
    EXPECT_EQ(fast.peaks, slow.peaks);
    EXPECT_EQ(fast.tableBytes, slow.tableBytes);
    EXPECT_EQ(fast.arenaBytes, slow.arenaBytes);
    // The failures: an unknown handle, an input of the wrong shape.
    EXPECT_NE(fast.errors[2].find("input tensor handle 3002 is unknown"),
              std::string::npos)
        << fast.errors[2];
    EXPECT_NE(fast.errors[3].find("input 2 (buffer 2) must be"),
              std::string::npos)
        << fast.errors[3];
    for (int k : {0, 1, 4})
      EXPECT_EQ(fast.errors[k], "") << k;
  }
}

TEST(FastSetup, TheValuesAreTheStepsValues) {
  // The first step by hand: out = p - exp(x) * g, r = exp(x) * g, s = t*t.
  Record fast = runSteps(true, false);
  std::vector<float> x = series(-1.0f, 0.25f), p = series(1.0f, 0.5f),
                     g = series(0.5f, 0.0f);
  std::vector<float> out(8), r(8), s(8);
  for (size_t i = 0; i < 8; ++i) {
    float t = std::exp(x[i]);
    r[i] = t * g[i];
    out[i] = p[i] - r[i];
    s[i] = t * t;
  }
  auto floats = [](const std::vector<uint32_t> &bits) {
    std::vector<float> v(bits.size());
    std::memcpy(v.data(), bits.data(), bits.size() * sizeof(float));
    return v;
  };
  std::vector<float> gotOut = floats(fast.outputs[0]),
                     gotR = floats(fast.outputs[1]),
                     gotS = floats(fast.outputs[2]);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_NEAR(gotOut[i], out[i], 1e-5f * (1 + std::fabs(out[i])));
    EXPECT_NEAR(gotR[i], r[i], 1e-5f * (1 + std::fabs(r[i])));
    EXPECT_NEAR(gotS[i], s[i], 1e-5f * (1 + std::fabs(s[i])));
  }
}

TEST(FastSetup, DuplicateDonatedInputsAreNotTaken) {
  // The same donated handle read twice: the output must not take its
  // storage (another input slot still holds it), with the switch off or on.
  for (bool fast : {false, true}) {
    Step step;
    RankState state(0, nullptr);
    state.setFastSetup(fast);
    state.upload(1, step.b.program());
    state.put(1, makeTensor<float>(F32, {2, 4}, series(0, 0.125f)));
    state.put(2, makeTensor<float>(F32, {8}, series(1, 1)));
    const void *shared = state.fetch(2).data();
    ASSERT_FALSE(state.run(1, {1, 2, 2}, {10, 11, 12}, {}, {2, 2}));
    EXPECT_NE(state.fetch(10).data(), shared) << fast;
    // out = p - exp(x) * g, where p and g are the same tensor.
    std::vector<float> out = valuesOf<float>(state.fetch(10)),
                       x = series(0, 0.125f), pg = series(1, 1);
    for (size_t i = 0; i < 8; ++i)
      EXPECT_NEAR(out[i], pg[i] - std::exp(x[i]) * pg[i], 1e-4f * pg[i]);
    EXPECT_THROW(state.fetch(2), RuntimeError) << fast; // consumed
  }
}

TEST(FastSetup, TheSetupsPhasesAreTraced) {
  struct Restore {
    bool was = SetupTrace::recorded();
    ~Restore() { SetupTrace::setRecorded(was); }
  } restore;
  for (bool fast : {false, true}) {
    SetupTrace::setRecorded(false);
    {
      // DTORCH_TRACE_SETUP off: a traced run records no setup span.
      Step step;
      RankState state(0, nullptr);
      state.setFastSetup(fast);
      state.upload(1, step.b.program());
      state.put(1, makeTensor<float>(F32, {2, 4}, series(0, 0.125f)));
      state.put(2, makeTensor<float>(F32, {8}, series(1, 1)));
      state.put(3, makeTensor<float>(F32, {8}, series(2, 1)));
      state.trace(TraceAction::Start, TraceBuffer::kDefaultCapacity, 0);
      ASSERT_FALSE(state.run(1, {1, 2, 3}, {10, 11, 12}));
      TraceChunk chunk =
          state.trace(TraceAction::Drain, 0, TraceBuffer::kMaxDrainEvents);
      EXPECT_FALSE(chunk.events.empty());
      for (const TraceEvent &event : chunk.events)
        EXPECT_NE(event.category, "setup") << event.name;
    }
    SetupTrace::setRecorded(true);
    Step step;
    RankState state(0, nullptr);
    state.setFastSetup(fast);
    state.upload(1, step.b.program());
    state.put(1, makeTensor<float>(F32, {2, 4}, series(0, 0.125f)));
    state.put(2, makeTensor<float>(F32, {8}, series(1, 1)));
    state.put(3, makeTensor<float>(F32, {8}, series(2, 1)));
    // Not traced: no phase recorded.
    ASSERT_FALSE(state.run(1, {1, 2, 3}, {10, 11, 12}));
    state.trace(TraceAction::Start, TraceBuffer::kDefaultCapacity, 0);
    int64_t received = traceClockNs();
    ASSERT_FALSE(state.run(1, {1, 10, 3}, {20, 21, 22}, {}, {}, 0, received));
    TraceChunk chunk =
        state.trace(TraceAction::Drain, 0, TraceBuffer::kMaxDrainEvents);
    std::vector<std::string> phases;
    int64_t previousEnd = received, firstKernel = -1, handOff = -1;
    for (const TraceEvent &event : chunk.events) {
      if (event.category == "kernel" && firstKernel < 0)
        firstKernel = event.startNs;
      if (event.category != "setup")
        continue;
      phases.push_back(event.name);
      EXPECT_EQ(event.startNs, previousEnd) << event.name; // back to back
      EXPECT_LE(event.startNs, event.endNs);
      previousEnd = event.endNs;
      if (event.name == "hand-off")
        handOff = event.endNs;
    }
    std::vector<std::string> expected = {
        "queue",        "lookup",   "consume", "bind inputs",
        "bind buffers", "hand-off", "run"};
    if (fast)
      expected.push_back("table bytes"); // after the run
    expected.push_back("outputs");
    EXPECT_EQ(phases, expected) << fast;
    ASSERT_GE(firstKernel, 0);
    EXPECT_LE(handOff, firstKernel); // the setup ends before the kernel
  }
}

} // namespace
} // namespace dtorch::rt::test
