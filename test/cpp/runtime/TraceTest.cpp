// The profiler's trace buffer (Trace.h) and what the executor and RankState
// record into it: a span per instruction on its stream's lane, with the op,
// location and bytes; nothing while the buffer is off; a bounded buffer that
// counts what it drops; drains in bounded chunks.
#include "TestSupport.h"

#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/RankState.h"
#include "dtorch/runtime/Trace.h"

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::COMM;
using ::dtorch::wire::F32;

TraceEvent eventNamed(const std::string &name) {
  TraceEvent e;
  e.name = name;
  e.startNs = traceClockNs();
  e.endNs = e.startNs + 1;
  return e;
}

TEST(TraceBuffer, RecordsOnlyWhileStartedAndCountsWhatDoesNotFit) {
  TraceBuffer buffer;
  EXPECT_FALSE(buffer.enabled());
  buffer.record(eventNamed("off"));
  EXPECT_EQ(buffer.size(), 0u);
  buffer.start(3);
  for (int i = 0; i < 5; ++i)
    buffer.record(eventNamed("e" + std::to_string(i)));
  TraceChunk chunk;
  buffer.drain(2, chunk);
  EXPECT_FALSE(buffer.enabled()); // a drain stops recording
  ASSERT_EQ(chunk.events.size(), 2u);
  EXPECT_EQ(chunk.events[0].name, "e0");
  EXPECT_EQ(chunk.events[1].name, "e1");
  EXPECT_EQ(chunk.dropped, 2u);
  EXPECT_EQ(chunk.remaining, 1u);
  buffer.record(eventNamed("after"));
  buffer.drain(10, chunk);
  ASSERT_EQ(chunk.events.size(), 3u);
  EXPECT_EQ(chunk.events[2].name, "e2");
  EXPECT_EQ(chunk.remaining, 0u);
  buffer.start(3); // a new start forgets everything
  buffer.drain(10, chunk);
  EXPECT_EQ(chunk.events.size(), 3u);
  EXPECT_EQ(chunk.dropped, 0u);
}

TEST(TraceBuffer, SpansRecordOnlyWhenStartedAtConstruction) {
  TraceBuffer buffer;
  {
    TraceSpan off(&buffer, TraceLane::Client, "op", "before");
  }
  buffer.start();
  {
    TraceSpan span(&buffer, TraceLane::Controller, "controller", "compile");
    EXPECT_TRUE(span.active());
    span.setBytes(42);
  }
  TraceChunk chunk;
  buffer.drain(10, chunk);
  ASSERT_EQ(chunk.events.size(), 1u);
  EXPECT_EQ(chunk.events[0].name, "compile");
  EXPECT_EQ(chunk.events[0].lane, TraceLane::Controller);
  EXPECT_EQ(chunk.events[0].bytes, 42);
  EXPECT_LE(chunk.events[0].startNs, chunk.events[0].endNs);
}

TEST(TraceBuffer, DrainsAtMostTheChunkLimit) {
  TraceBuffer buffer;
  buffer.start(TraceBuffer::kMaxDrainEvents + 10);
  for (size_t i = 0; i < TraceBuffer::kMaxDrainEvents + 10; ++i)
    buffer.record(eventNamed("e"));
  TraceChunk chunk;
  buffer.drain(SIZE_MAX, chunk);
  EXPECT_EQ(chunk.events.size(), TraceBuffer::kMaxDrainEvents);
  EXPECT_EQ(chunk.remaining, 10u);
}

// Two ranks run exp -> all_reduce -> add; each records a run span, two
// kernels on the compute lane and the all_reduce on the comm lane, with
// their bytes and locations, in stream order.
TEST(Trace, RankStateRecordsEveryInstructionOnItsLane) {
  const int world = 2;
  FakeCollectiveHub hub(world, std::chrono::seconds(5));
  runRanks(world, [&](int rank) {
    ProgramBuilder b;
    int x = b.input(F32, {4});
    int y = b.buffer(F32, {4});
    int reduced = b.buffer(F32, {4});
    int z = b.buffer(F32, {4});
    int produced = b.event();
    int communicated = b.event();
    b.add("exp", {x}, {y}).set_record_event(produced);
    Instruction &allReduce = b.add("all_reduce", {y}, {reduced}, COMM);
    setInts(allReduce, "group", {0, 1});
    setString(allReduce, "reduce", "sum");
    allReduce.add_wait_events(produced);
    allReduce.set_record_event(communicated);
    b.add("add", {reduced, x}, {z}).add_wait_events(communicated);
    b.output(z);
    auto comm = hub.communicator(rank);
    RankState state(rank, comm.get());
    state.upload(7, b.program());
    state.put(1, makeTensor<float>(F32, {4}, {0, 1, 2, 3}));
    ASSERT_FALSE(state.run(7, {1}, {2})); // off: nothing recorded
    EXPECT_EQ(state.traceBuffer().size(), 0u);

    int64_t before = traceClockNs();
    state.trace(TraceAction::Start, 100, 0);
    ASSERT_FALSE(state.run(7, {1}, {3}));
    TraceChunk chunk = state.trace(TraceAction::Drain, 0, 100);
    EXPECT_EQ(chunk.rank, rank);
    EXPECT_GE(chunk.clockNs, before);
    ASSERT_EQ(chunk.events.size(), 4u);
    std::vector<std::string> compute, comms; // in recording order
    for (const TraceEvent &e : chunk.events) {
      EXPECT_GE(e.startNs, before);
      EXPECT_LE(e.startNs, e.endNs);
      EXPECT_LE(e.endNs, chunk.clockNs);
      (e.lane == TraceLane::Comm ? comms : compute).push_back(e.name);
      if (e.category == "kernel" || e.category == "collective") {
        EXPECT_EQ(e.bytes, 16);
        EXPECT_EQ(e.location.rfind("test.py:", 0), 0u) << e.location;
      }
    }
    EXPECT_EQ(comms, std::vector<std::string>{"all_reduce"});
    // The run span is recorded when the run ends, after its kernels.
    EXPECT_EQ(compute, (std::vector<std::string>{"exp", "add", "run test"}));
    auto named = [&](const std::string &name) -> const TraceEvent & {
      for (const TraceEvent &e : chunk.events)
        if (e.name == name)
          return e;
      ADD_FAILURE() << "no event " << name;
      return chunk.events[0];
    };
    const TraceEvent &exp = named("exp"), &add = named("add"),
                     &reduce = named("all_reduce"), &run = named("run test");
    // Stream order through the events: exp, then all_reduce, then add.
    EXPECT_LE(exp.endNs, reduce.startNs);
    EXPECT_LE(reduce.endNs, add.startNs);
    EXPECT_LE(run.startNs, exp.startNs);
    EXPECT_GE(run.endNs, add.endNs);

    // Drained and stopped: later runs are not recorded.
    ASSERT_FALSE(state.run(7, {1}, {4}));
    EXPECT_EQ(state.trace(TraceAction::Drain, 0, 100).events.size(), 0u);
  });
}

} // namespace
} // namespace dtorch::rt::test
