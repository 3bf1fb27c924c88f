//===- AllToAllVProgramTest.cpp - rank.all_to_all_v emitted and run -------===//
//
// A class function with rank.all_to_all_v goes through the program emitter:
// one `all_to_all_v` instruction on the COMM stream naming its mesh axis,
// with the send counts as a second input and the receive counts as a second
// output. Each worker resolves the axis to its group, and the programs, run
// on the fake communicator of 4 ranks, exchange rows by counts that the
// program computed from its input (a data-dependent exchange): the output
// keeps its static upper bound of rows, zero after the rows received.
//
//===----------------------------------------------------------------------===//
#include "ProgramEmitter.h"

#include "dtensor/IR/DTensor.h"
#include "rank/IR/Rank.h"

#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/MeshContext.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

using namespace dtorch;

namespace {

// Every rank sends rows to the coordinate its counts name; the counts are
// the program's second input, as a kernel upstream would compute them.
constexpr const char *kProgram = R"mlir(
func.func @dispatch_class0(%x: tensor<4x2xf32>, %c: tensor<4xi64>) -> (tensor<8x2xf32>, tensor<4xi64>) attributes {rank.mesh = array<i64: 4>, rank.positions = [array<i64: 0, 4>]} {
  %rows, %counts = rank.all_to_all_v %x, %c {axis = 0 : i64} : (tensor<4x2xf32>, tensor<4xi64>) -> (tensor<8x2xf32>, tensor<4xi64>)
  return %rows, %counts : tensor<8x2xf32>, tensor<4xi64>
}
)mlir";

rt::Tensor floats(std::vector<int64_t> shape, const std::vector<float> &v) {
  rt::Tensor t = rt::Tensor::empty(wire::F32, std::move(shape));
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

rt::Tensor longs(const std::vector<int64_t> &v) {
  rt::Tensor t = rt::Tensor::empty(wire::I64, {(int64_t)v.size()});
  std::memcpy(t.data(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

// Rank r keeps one row and sends (r + 1) % 3 rows to coordinate
// (r + 1) % 4: counts that differ per rank, some zero.
std::vector<int64_t> countsOf(int rank) {
  std::vector<int64_t> counts(4, 0);
  counts[rank] = 1;
  counts[(rank + 1) % 4] = (rank + 1) % 3;
  return counts;
}

TEST(AllToAllVProgram, EmittedAsOneCommInstructionAndRunByCounts) {
  mlir::DialectRegistry registry;
  registry.insert<dtensor::DTensorDialect, rank::RankDialect,
                  mlir::func::FuncDialect>();
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kProgram, &ctx);
  ASSERT_TRUE(module);
  auto fn = *module->getOps<mlir::func::FuncOp>().begin();
  mlir::FailureOr<wire::Program> emitted = emitProgram(fn);
  ASSERT_TRUE(mlir::succeeded(emitted));
  const wire::Program &program = *emitted;
  ASSERT_EQ(program.instructions_size(), 1);
  const wire::Instruction &inst = program.instructions(0);
  EXPECT_EQ(inst.op(), "all_to_all_v");
  EXPECT_EQ(inst.stream(), wire::COMM);
  EXPECT_EQ(inst.inputs_size(), 2);
  EXPECT_EQ(inst.outputs_size(), 2);
  EXPECT_EQ(inst.attrs().at("axis").i(), 0);

  const int world = 4;
  rt::FakeCollectiveHub hub(world, std::chrono::seconds(10));
  std::vector<std::vector<rt::Tensor>> outputs(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      try {
        wire::Program resolved = rt::resolveForRank(
            program, rt::RankContext::of({world}, {0, 1, 2, 3}, rank));
        std::vector<int64_t> counts = countsOf(rank);
        std::vector<float> x;
        for (int k = 0; k < 4; ++k)
          x.insert(x.end(), {float(rank), float(k)});
        auto comm = hub.communicator(rank);
        rt::Executor executor(comm.get());
        outputs[rank] =
            executor.run(resolved, {floats({4, 2}, x), longs(counts)});
      } catch (const std::exception &e) {
        errors[rank] = e.what();
      }
    });
  for (auto &t : threads)
    t.join();
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(errors[rank], "") << "rank " << rank;
    // Sender `from` cuts its rows by its counts in coordinate order; the
    // piece for this rank arrives in coordinate order of the senders.
    std::vector<int64_t> wantCounts(world, 0);
    std::vector<float> wantRows;
    for (int from = 0; from < world; ++from) {
      std::vector<int64_t> sent = countsOf(from);
      int64_t offset = 0;
      for (int to = 0; to < rank; ++to)
        offset += sent[to];
      wantCounts[from] = sent[rank];
      for (int64_t k = 0; k < sent[rank]; ++k)
        wantRows.insert(wantRows.end(), {float(from), float(offset + k)});
    }
    wantRows.resize(16, 0.0f);
    const rt::Tensor &rows = outputs[rank][0], &counts = outputs[rank][1];
    std::vector<float> gotRows(rows.data_as<float>(),
                               rows.data_as<float>() + rows.numel());
    std::vector<int64_t> gotCounts(counts.data_as<int64_t>(),
                                   counts.data_as<int64_t>() + counts.numel());
    EXPECT_EQ(gotCounts, wantCounts) << "rank " << rank;
    EXPECT_EQ(gotRows, wantRows) << "rank " << rank;
  }
}

// The segmented form (what dtensor.all_to_all_v lowers to): 4 slot segments
// of 2 rows, rank r filling (r + j) % 3 rows of segment j; the receiver
// gets each sender's rows at the front of the sender's segment.
constexpr const char *kSegmentedProgram = R"mlir(
func.func @slots_class0(%x: tensor<8x1xf32>, %c: tensor<4xi64>) -> (tensor<8x1xf32>, tensor<4xi64>) attributes {rank.mesh = array<i64: 4>, rank.positions = [array<i64: 0, 4>]} {
  %rows, %counts = rank.all_to_all_v %x, %c {axis = 0 : i64, segment_rows = 2 : i64} : (tensor<8x1xf32>, tensor<4xi64>) -> (tensor<8x1xf32>, tensor<4xi64>)
  return %rows, %counts : tensor<8x1xf32>, tensor<4xi64>
}
)mlir";

TEST(AllToAllVProgram, SegmentedSlotsKeepEachSendersRowsInItsSegment) {
  mlir::DialectRegistry registry;
  registry.insert<dtensor::DTensorDialect, rank::RankDialect,
                  mlir::func::FuncDialect>();
  mlir::MLIRContext ctx(registry);
  ctx.loadAllAvailableDialects();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kSegmentedProgram, &ctx);
  ASSERT_TRUE(module);
  auto fn = *module->getOps<mlir::func::FuncOp>().begin();
  mlir::FailureOr<wire::Program> emitted = emitProgram(fn);
  ASSERT_TRUE(mlir::succeeded(emitted));
  const wire::Program &program = *emitted;
  ASSERT_EQ(program.instructions_size(), 1);
  EXPECT_EQ(program.instructions(0).attrs().at("segment_rows").i(), 2);

  const int world = 4;
  auto fill = [](int from, int to) { return int64_t((from + to) % 3); };
  rt::FakeCollectiveHub hub(world, std::chrono::seconds(10));
  std::vector<std::vector<rt::Tensor>> outputs(world);
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank)
    threads.emplace_back([&, rank] {
      try {
        wire::Program resolved = rt::resolveForRank(
            program, rt::RankContext::of({world}, {0, 1, 2, 3}, rank));
        std::vector<int64_t> counts;
        std::vector<float> x;
        for (int to = 0; to < world; ++to) {
          counts.push_back(fill(rank, to));
          for (int k = 0; k < 2; ++k) // unfilled rows hold -1, never sent
            x.push_back(k < counts.back() ? float(10 * rank + to) + 0.5f * k
                                          : -1.0f);
        }
        auto comm = hub.communicator(rank);
        rt::Executor executor(comm.get());
        outputs[rank] =
            executor.run(resolved, {floats({8, 1}, x), longs(counts)});
      } catch (const std::exception &e) {
        errors[rank] = e.what();
      }
    });
  for (auto &t : threads)
    t.join();
  for (int rank = 0; rank < world; ++rank) {
    ASSERT_EQ(errors[rank], "") << "rank " << rank;
    std::vector<float> wantRows;
    std::vector<int64_t> wantCounts;
    for (int from = 0; from < world; ++from) {
      wantCounts.push_back(fill(from, rank));
      for (int k = 0; k < 2; ++k)
        wantRows.push_back(
            k < wantCounts.back() ? float(10 * from + rank) + 0.5f * k : 0.0f);
    }
    const rt::Tensor &rows = outputs[rank][0], &counts = outputs[rank][1];
    EXPECT_EQ(std::vector<float>(rows.data_as<float>(),
                                 rows.data_as<float>() + rows.numel()),
              wantRows)
        << "rank " << rank;
    EXPECT_EQ(std::vector<int64_t>(counts.data_as<int64_t>(),
                                   counts.data_as<int64_t>() + counts.numel()),
              wantCounts)
        << "rank " << rank;
  }
}

} // namespace
