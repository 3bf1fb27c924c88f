//===- PointToPointProgramsTest.cpp - transfers run on every backend -----===//
//
// dtensor.transfer compiled to class programs: the positions that send or
// receive get programs of their own, the emitted send/recv instructions sit
// on the COMM stream with the peer as a coordinate of the axis, each worker
// resolves it to the global rank, and the resolved programs, run on the
// fake, in-process shared-memory and Gloo communicators, move exactly the
// blocks the transfer names (hostshm_tests covers the cross-process
// transport). A pp x dp mesh checks that the ranks of one dp coordinate
// exchange with each other.
//
//===----------------------------------------------------------------------===//
#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/GlooCollectives.h"
#include "dtorch/runtime/InMemoryKeyValueStore.h"
#include "dtorch/runtime/SharedMemoryCollectives.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace dtorch;

namespace {

using Factory = std::function<std::unique_ptr<rt::Communicator>(int)>;

void onThreads(int n, const std::function<void(int)> &body) {
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception &e) {
        errors[r] = e.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(errors[r], "") << "rank " << r;
}

/// The communicators of 4 ranks of each in-process backend.
std::vector<
    std::pair<std::string, std::vector<std::unique_ptr<rt::Communicator>>>>
everyBackend(std::vector<std::shared_ptr<void>> &keepAlive) {
  const int world = 4;
  std::vector<
      std::pair<std::string, std::vector<std::unique_ptr<rt::Communicator>>>>
      out;
  auto fake =
      std::make_shared<rt::FakeCollectiveHub>(world, std::chrono::seconds(20));
  auto shm = std::make_shared<rt::SharedMemoryHub>(
      std::set<int64_t>{0, 1, 2, 3}, world, std::chrono::seconds(20));
  keepAlive.push_back(fake);
  keepAlive.push_back(shm);
  out.emplace_back("fake",
                   std::vector<std::unique_ptr<rt::Communicator>>(world));
  out.emplace_back("shared memory",
                   std::vector<std::unique_ptr<rt::Communicator>>(world));
  out.emplace_back("gloo",
                   std::vector<std::unique_ptr<rt::Communicator>>(world));
  for (int r = 0; r < world; ++r) {
    out[0].second[r] = fake->communicator(r);
    out[1].second[r] = shm->communicator(r);
  }
  auto store = std::make_shared<rt::InMemoryKeyValueStore>();
  rt::GlooOptions options;
  options.deadline = std::chrono::seconds(20);
  onThreads(world, [&](int r) {
    out[2].second[r] = rt::connectGloo(r, world, store, options);
  });
  return out;
}

/// A tensor of `shape` whose element i is base + i.
rt::Tensor counting(std::vector<int64_t> shape, float base) {
  rt::Tensor t = rt::Tensor::empty(wire::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data_as<float>()[i] = base + static_cast<float>(i);
  return t;
}

std::vector<float> values(const rt::Tensor &t) {
  return {t.data_as<float>(), t.data_as<float>() + t.numel()};
}

const char *kRing = R"(
#m = #dtensor.mesh<[4], names = ["pp"]>
func.func @ring(%x: !dtensor.tensor<8x3xf32, #m, [S(0)]>) -> (!dtensor.tensor<8x3xf32, #m, [S(0)]>, !dtensor.tensor<8x3xf32, #m, [S(0)]>) {
  %0 = dtensor.transfer %x {axis = 0 : i64, sources = array<i64: 0, 1, 2, 3>, destinations = array<i64: 1, 2, 3, 0>} : !dtensor.tensor<8x3xf32, #m, [S(0)]>
  %1 = dtensor.neg %0 : (!dtensor.tensor<8x3xf32, #m, [S(0)]>) -> !dtensor.tensor<8x3xf32, #m, [S(0)]>
  %2 = dtensor.transfer %1 {axis = 0 : i64, sources = array<i64: 0>, destinations = array<i64: 2>} : !dtensor.tensor<8x3xf32, #m, [S(0)]>
  return %0, %2 : !dtensor.tensor<8x3xf32, #m, [S(0)]>, !dtensor.tensor<8x3xf32, #m, [S(0)]>
}
)";

TEST(PointToPointPrograms, SendersAndReceiversGetProgramsOfTheirOwn) {
  CompileResult result = compileModule(kRing, "ring.mlir");
  ASSERT_TRUE(result.ok) << result.error;
  const CompiledFunction &fn = result.functions.at(0);
  // Positions 0 (sends in both), 2 (receives in the second), and 1 and 3
  // (ring only) differ in role: 0 and 2 have their own programs.
  EXPECT_NE(fn.programAt(0), fn.programAt(2));
  EXPECT_NE(fn.programAt(0), fn.programAt(1));
  int sends = 0, recvs = 0;
  const wire::Program &first = fn.programs[fn.programAt(0)];
  for (const wire::Instruction &inst : first.instructions()) {
    if (inst.op() != "send" && inst.op() != "recv")
      continue;
    EXPECT_EQ(inst.stream(), wire::COMM) << inst.op();
    EXPECT_EQ(inst.attrs().at("axis").i(), 0);
    (inst.op() == "send" ? sends : recvs)++;
  }
  // The ring's batched exchange (one send, one recv) and the second
  // transfer's send.
  EXPECT_EQ(sends, 2);
  EXPECT_EQ(recvs, 1);
  // Resolved for position 0, the peer is the global rank there (the mesh's
  // ranks are its positions reversed).
  rt::RankContext context = rt::RankContext::of({4}, {3, 2, 1, 0}, 3);
  wire::Program resolved = rt::resolveForRank(first, context);
  std::vector<int64_t> peers;
  for (const wire::Instruction &inst : resolved.instructions())
    if (inst.op() == "send" || inst.op() == "recv") {
      EXPECT_EQ(inst.attrs().count("axis"), 0u);
      peers.push_back(inst.attrs().at("peer").i());
    }
  // send to coordinate 1 (rank 2), recv from 3 (rank 0), send to 2 (rank 1).
  EXPECT_EQ(peers, (std::vector<int64_t>{2, 0, 1}));
}

TEST(PointToPointPrograms, TransfersMoveTheBlocksOnEveryBackend) {
  CompileResult result = compileModule(kRing, "ring.mlir");
  ASSERT_TRUE(result.ok) << result.error;
  std::vector<wire::Program> programs =
      emitted::programsByPosition(result.functions.at(0));
  std::vector<std::shared_ptr<void>> keepAlive;
  for (auto &[name, backendComms] : everyBackend(keepAlive)) {
    auto &comms = backendComms; // a lambda may not capture a binding (C++17)
    std::vector<std::vector<rt::Tensor>> outputs(4);
    onThreads(4, [&](int r) {
      rt::Executor exec(comms[r].get());
      // Two runs: the second reuses the executor's streams and arena.
      for (int run = 0; run < 2; ++run)
        outputs[r] = exec.run(programs[r], {counting({2, 3}, 100.f * r)});
    });
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(outputs[r].size(), 2u) << name;
      // The ring: position r holds what r - 1 held.
      EXPECT_EQ(values(outputs[r][0]),
                values(counting({2, 3}, 100.f * ((r + 3) % 4))))
          << name << ", rank " << r;
      // The negated ring's block 0 (which came from 3) arrives at 2 only.
      std::vector<float> want = values(counting({2, 3}, 100.f * 3));
      for (float &v : want)
        v = r == 2 ? -v : 0.f;
      EXPECT_EQ(values(outputs[r][1]), want) << name << ", rank " << r;
    }
  }
}

TEST(PointToPointPrograms,
     StagesThatAreDataParallelInsideExchangeByDpCoordinate) {
  const char *text = R"(
#m = #dtensor.mesh<[2, 2], names = ["pp", "dp"]>
func.func @stages(%x: !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]> {
  %0 = dtensor.transfer %x {axis = 0 : i64, sources = array<i64: 0>, destinations = array<i64: 1>} : !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>
  %1 = dtensor.neg %0 : (!dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>
  %2 = dtensor.transfer %1 {axis = 0 : i64, sources = array<i64: 1>, destinations = array<i64: 0>} : !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>
  return %2 : !dtensor.tensor<4x6xf32, #m, [S(0), S(1)]>
}
)";
  CompileResult result = compileModule(text, "stages.mlir");
  ASSERT_TRUE(result.ok) << result.error;
  const CompiledFunction &fn = result.functions.at(0);
  ASSERT_EQ(fn.programs.size(), 2u); // one per stage, whatever dp is
  std::vector<wire::Program> programs = emitted::programsByPosition(fn);
  std::vector<std::shared_ptr<void>> keepAlive;
  for (auto &[name, backendComms] : everyBackend(keepAlive)) {
    auto &comms = backendComms; // a lambda may not capture a binding (C++17)
    std::vector<rt::Tensor> outputs(4);
    onThreads(4, [&](int r) {
      rt::Executor exec(comms[r].get());
      outputs[r] = exec.run(programs[r], {counting({2, 3}, 10.f * r)})[0];
    });
    // Position (pp, dp) = (r / 2, r % 2): stage 0 ends with the negation of
    // its own block (there and back), stage 1 with zeros.
    for (int r = 0; r < 4; ++r) {
      std::vector<float> want = values(counting({2, 3}, 10.f * r));
      for (float &v : want)
        v = r < 2 ? -v : 0.f;
      EXPECT_EQ(values(outputs[r]), want) << name << ", rank " << r;
    }
  }
}

TEST(PointToPointPrograms, ComputeThatDoesNotNeedTheMessageOverlapsIt) {
  // Stage 1 receives stage 0's block while it computes exp(w) * 3 on its
  // own: the receive is issued before that compute, which never waits for
  // it; only the add that reads the message does.
  const char *text = R"(
#m = #dtensor.mesh<[2], names = ["pp"]>
func.func @overlap(%x: !dtensor.tensor<4x8xf32, #m, [S(0)]>, %w: !dtensor.tensor<4x8xf32, #m, [S(0)]>) -> !dtensor.tensor<4x8xf32, #m, [S(0)]> {
  %0 = dtensor.transfer %x {axis = 0 : i64, sources = array<i64: 0>, destinations = array<i64: 1>} : !dtensor.tensor<4x8xf32, #m, [S(0)]>
  %1 = dtensor.exp %w : (!dtensor.tensor<4x8xf32, #m, [S(0)]>) -> !dtensor.tensor<4x8xf32, #m, [S(0)]>
  %2 = dtensor.mul %1, %1 : (!dtensor.tensor<4x8xf32, #m, [S(0)]>, !dtensor.tensor<4x8xf32, #m, [S(0)]>) -> !dtensor.tensor<4x8xf32, #m, [S(0)]>
  %3 = dtensor.add %0, %2 : (!dtensor.tensor<4x8xf32, #m, [S(0)]>, !dtensor.tensor<4x8xf32, #m, [S(0)]>) -> !dtensor.tensor<4x8xf32, #m, [S(0)]>
  return %3 : !dtensor.tensor<4x8xf32, #m, [S(0)]>
}
)";
  CompileOptions options;
  options.fuseElementwise = false; // the kernels stay instructions of their own
  CompileResult result = compileModule(text, "overlap.mlir", options);
  ASSERT_TRUE(result.ok) << result.error;
  const CompiledFunction &fn = result.functions.at(0);
  const wire::Program &receiver = fn.programs[fn.programAt(1)];
  int recv = -1, exp = -1, add = -1;
  for (int i = 0; i < receiver.instructions_size(); ++i) {
    const std::string &op = receiver.instructions(i).op();
    if (op == "recv")
      recv = i;
    else if (op == "exp")
      exp = i;
    else if (op == "add")
      add = i;
  }
  ASSERT_GE(recv, 0);
  ASSERT_GE(exp, 0);
  ASSERT_GE(add, 0);
  EXPECT_LT(recv, exp)
      << "the receive is issued before the independent compute";
  EXPECT_EQ(receiver.instructions(recv).stream(), wire::COMM);
  EXPECT_EQ(receiver.instructions(exp).wait_events_size(), 0);
  int event = receiver.instructions(recv).record_event();
  ASSERT_GE(event, 0);
  const auto &waits = receiver.instructions(add).wait_events();
  EXPECT_NE(std::find(waits.begin(), waits.end(), event), waits.end())
      << "the add waits for the message";
  // And the sender's send waits for nothing: its input is the argument.
  const wire::Program &sender = fn.programs[fn.programAt(0)];
  for (const wire::Instruction &inst : sender.instructions())
    if (inst.op() == "send")
      EXPECT_EQ(inst.wait_events_size(), 0);
}

} // namespace
