// Executor streams: the COMM stream runs on one thread kept across runs,
// failures on either stream name the instruction and leave the executor
// usable, and a collective overlaps later compute.
#include "TestSupport.h"

#include "dtorch/runtime/Kernels.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::COMM;
using ::dtorch::wire::F32;
using Clock = std::chrono::steady_clock;

// A one-rank communicator whose all_reduce copies its input after an
// optional delay, records the thread and the time span of every call, and
// throws while `failNext` is set.
class ScriptedCommunicator : public Communicator {
public:
  int rank() const override { return 0; }
  void all_reduce(const Tensor &x, Tensor &out, const Group &,
                  ReduceOp) override {
    Clock::time_point start = Clock::now();
    if (failNext.exchange(false))
      throw RuntimeError("scripted communicator failure");
    std::this_thread::sleep_for(delay);
    std::memcpy(out.data(), x.data(), x.nbytes());
    std::lock_guard<std::mutex> lock(mutex);
    threads.push_back(std::this_thread::get_id());
    spans.push_back({start, Clock::now()});
  }
  void all_gather(const Tensor &, Tensor &, const Group &, int64_t,
                  const std::vector<int64_t> &) override {
    throw RuntimeError("not scripted");
  }
  void reduce_scatter(const Tensor &, Tensor &, const Group &, ReduceOp,
                      int64_t, const std::vector<int64_t> &) override {
    throw RuntimeError("not scripted");
  }
  void all_to_all(const Tensor &, Tensor &, const Group &, int64_t,
                  const std::vector<int64_t> &, int64_t,
                  const std::vector<int64_t> &) override {
    throw RuntimeError("not scripted");
  }
  void broadcast(const Tensor &, Tensor &, const Group &, int64_t) override {
    throw RuntimeError("not scripted");
  }
  void send(const Tensor &, int64_t, int64_t) override {
    throw RuntimeError("not scripted");
  }
  void recv(Tensor &, int64_t, int64_t) override {
    throw RuntimeError("not scripted");
  }

  std::chrono::milliseconds delay{0};
  std::atomic<bool> failNext{false};
  std::mutex mutex;
  std::vector<std::thread::id> threads;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> spans;
};

// Compute spans of the kernel "test_timed_copy" (sleeps 100 ms, then
// copies) and whether "test_failing_copy" throws.
std::mutex timedMutex;
std::vector<std::pair<Clock::time_point, Clock::time_point>> timedSpans;
std::atomic<bool> failCompute{false};

void registerTestKernels() {
  Kernel timed;
  timed.numInputs = 1;
  timed.run = [](const AttrReader &, const std::vector<const Tensor *> &in,
                 const std::vector<Tensor *> &out) {
    Clock::time_point start = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::memcpy(out[0]->data(), in[0]->data(), in[0]->nbytes());
    std::lock_guard<std::mutex> lock(timedMutex);
    timedSpans.push_back({start, Clock::now()});
  };
  registerKernel("test_timed_copy", F32, kCpuDevice, timed);
  Kernel failing;
  failing.numInputs = 1;
  failing.run = [](const AttrReader &, const std::vector<const Tensor *> &in,
                   const std::vector<Tensor *> &out) {
    if (failCompute.exchange(false))
      throw RuntimeError("scripted kernel failure");
    std::memcpy(out[0]->data(), in[0]->data(), in[0]->nbytes());
  };
  registerKernel("test_failing_copy", F32, kCpuDevice, failing);
}

// y = all_reduce(neg(x)) on COMM; z = copy(x) by `computeOp` on COMPUTE,
// which does not wait for the collective; out = y + z waits for it.
Program overlapProgram(const std::string &computeOp) {
  ProgramBuilder b;
  int x = b.input(F32, {4});
  int a = b.buffer(F32, {4});
  int y = b.buffer(F32, {4});
  int z = b.buffer(F32, {4});
  int out = b.buffer(F32, {4});
  int negated = b.event();
  int reduced = b.event();
  b.add("neg", {x}, {a}).set_record_event(negated);
  Instruction &reduce = b.add("all_reduce", {a}, {y}, COMM);
  setInts(reduce, "group", {0});
  setString(reduce, "reduce", "sum");
  reduce.add_wait_events(negated);
  reduce.set_record_event(reduced);
  b.add(computeOp, {x}, {z});
  b.add("add", {y, z}, {out}).add_wait_events(reduced);
  b.output(out);
  return b.program();
}

std::vector<float> runOnce(Executor &executor, const Program &program) {
  return valuesOf<float>(
      executor.run(program, {makeTensor<float>(F32, {4}, {1, 2, 3, 4})})[0]);
}

TEST(ExecutorStreams, CommThreadIsKeptAcrossRuns) {
  registerTestKernels();
  ScriptedCommunicator comm;
  Executor executor(&comm);
  EXPECT_EQ(executor.commThreadId(), std::thread::id());
  Program program = overlapProgram("copy");
  for (int run = 0; run < 5; ++run)
    EXPECT_EQ(runOnce(executor, program), (std::vector<float>{0, 0, 0, 0}));
  ASSERT_EQ(comm.threads.size(), 5u);
  std::set<std::thread::id> distinct(comm.threads.begin(), comm.threads.end());
  EXPECT_EQ(distinct.size(), 1u);
  EXPECT_EQ(*distinct.begin(), executor.commThreadId());
  EXPECT_NE(executor.commThreadId(), std::this_thread::get_id());
}

TEST(ExecutorStreams, CommFailureNamesInstructionAndNextRunWorks) {
  registerTestKernels();
  ScriptedCommunicator comm;
  Executor executor(&comm);
  Program program = overlapProgram("copy");
  EXPECT_EQ(runOnce(executor, program), (std::vector<float>{0, 0, 0, 0}));
  std::thread::id before = executor.commThreadId();
  comm.failNext = true;
  expectRuntimeError([&] { runOnce(executor, program); },
                     {"instruction 1 ('all_reduce' at test.py:2)",
                      "scripted communicator failure"});
  EXPECT_EQ(runOnce(executor, program), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(executor.commThreadId(), before);
}

TEST(ExecutorStreams, ComputeFailureNamesInstructionAndNextRunWorks) {
  registerTestKernels();
  ScriptedCommunicator comm;
  comm.delay = std::chrono::milliseconds(20);
  Executor executor(&comm);
  Program program = overlapProgram("test_failing_copy");
  failCompute = true;
  expectRuntimeError([&] { runOnce(executor, program); },
                     {"instruction 2 ('test_failing_copy' at test.py:3)",
                      "scripted kernel failure"});
  // The failed run's collective may or may not have started; the next run's
  // does.
  size_t before = comm.threads.size();
  EXPECT_EQ(runOnce(executor, program), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(comm.threads.size(), before + 1);
}

TEST(ExecutorStreams, CollectiveOverlapsLaterCompute) {
  registerTestKernels();
  ScriptedCommunicator comm;
  comm.delay = std::chrono::milliseconds(150);
  Executor executor(&comm);
  {
    std::lock_guard<std::mutex> lock(timedMutex);
    timedSpans.clear();
  }
  EXPECT_EQ(runOnce(executor, overlapProgram("test_timed_copy")),
            (std::vector<float>{0, 0, 0, 0}));
  ASSERT_EQ(comm.spans.size(), 1u);
  ASSERT_EQ(timedSpans.size(), 1u);
  auto [commStart, commEnd] = comm.spans[0];
  auto [computeStart, computeEnd] = timedSpans[0];
  // The collective started before the later compute instruction finished
  // and was still running when it began: the two streams overlapped.
  EXPECT_LT(commStart, computeEnd);
  EXPECT_LT(computeStart, commEnd);
}

} // namespace
} // namespace dtorch::rt::test
