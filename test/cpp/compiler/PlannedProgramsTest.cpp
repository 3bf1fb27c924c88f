//===- PlannedProgramsTest.cpp - buffer planning in emitted programs -----===//
//
// With CompileOptions::planBuffers (the default) every class program carries
// an arena offset per buffer (-1 for inputs and outputs) and the arena size,
// which the runtime's validator accepts and the executor runs with the same
// results as the unplanned program; without it no buffer is planned.
//
//===----------------------------------------------------------------------===//

#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/FakeCollectives.h"
#include "dtorch/runtime/ProgramValidator.h"

#include <gtest/gtest.h>

#include <thread>

using namespace dtorch;

namespace {

// Uneven shards (5 rows over 2 ranks: two classes), an all_gather, an
// elementwise chain and a reduction: temporaries on both streams.
const char *kChain = R"(
#m = #dtensor.mesh<[2]>
func.func @f(%x: !dtensor.tensor<5x4xf32, #m, [S(0)]>) -> !dtensor.tensor<5xf32, #m, [R]> {
  %0 = dtensor.all_gather %x on axis 0 : !dtensor.tensor<5x4xf32, #m, [S(0)]> -> !dtensor.tensor<5x4xf32, #m, [R]>
  %1 = dtensor.exp %0 : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5x4xf32, #m, [R]>
  %2 = dtensor.neg %1 : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5x4xf32, #m, [R]>
  %3 = dtensor.mul %2, %0 : (!dtensor.tensor<5x4xf32, #m, [R]>, !dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5x4xf32, #m, [R]>
  %4 = dtensor.sum %3 dims = [1] : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5xf32, #m, [R]>
  return %4 : !dtensor.tensor<5xf32, #m, [R]>
}
)";

std::vector<std::vector<float>> runOnTwoRanks(const CompiledFunction &fn) {
  std::vector<wire::Program> programs = emitted::programsByPosition(fn);
  rt::FakeCollectiveHub hub(2, std::chrono::seconds(10));
  std::vector<std::vector<float>> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      auto comm = hub.communicator(r);
      rt::Executor executor(comm.get());
      int rows = r == 0 ? 3 : 2;
      rt::Tensor x = rt::Tensor::empty(wire::F32, {rows, 4});
      float *data = x.data_as<float>();
      for (int i = 0; i < rows * 4; ++i)
        data[i] = 0.05f * (r * 12 + i);
      std::vector<rt::Tensor> out = executor.run(programs[r], {x});
      const float *y = out[0].data_as<float>();
      results[r].assign(y, y + out[0].numel());
    });
  for (std::thread &t : threads)
    t.join();
  return results;
}

TEST(PlannedPrograms, EveryClassIsPlannedValidAndComputesTheSame) {
  CompileOptions planned, unplanned;
  planned.planBuffers = true;
  unplanned.planBuffers = false;
  // The chain's kernels one by one (fusion would make them one rank.fused,
  // tested with planning in rank-plan-buffers.mlir and FusedKernelTest).
  planned.fuseElementwise = unplanned.fuseElementwise = false;
  CompileResult on = compileModule(kChain, "chain.mlir", planned);
  CompileResult off = compileModule(kChain, "chain.mlir", unplanned);
  ASSERT_TRUE(on.ok) << on.error;
  ASSERT_TRUE(off.ok) << off.error;
  ASSERT_EQ(on.functions[0].programs.size(), 2u); // two classes
  for (const wire::Program &program : off.functions[0].programs) {
    EXPECT_EQ(program.buffer_offsets_size(), 0);
    EXPECT_EQ(program.arena_bytes(), 0);
  }
  for (const wire::Program &program : on.functions[0].programs) {
    ASSERT_EQ(program.buffer_offsets_size(), program.buffers_size());
    EXPECT_GT(program.arena_bytes(), 0);
    int64_t temporaries = 0;
    for (int b = 0; b < program.buffers_size(); ++b)
      if (program.buffer_offsets(b) >= 0)
        temporaries += 5 * 4 * 4;
    for (int id : program.inputs())
      EXPECT_EQ(program.buffer_offsets(id), -1);
    for (int id : program.outputs())
      EXPECT_EQ(program.buffer_offsets(id), -1);
    // The gathered value is read by the mul, so exp -> neg share a slot and
    // the gathered value keeps its own: less than one slot per temporary.
    EXPECT_LT(program.arena_bytes(), temporaries);
    for (const wire::Instruction &inst : program.instructions())
      EXPECT_EQ(inst.attrs().count("rank.arena_offset"), 0u) << inst.op();
  }
  std::vector<wire::Program> resolved =
      emitted::programsByPosition(on.functions[0]);
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_NO_THROW(rt::validateProgram(resolved[rank], rank));
  EXPECT_EQ(runOnTwoRanks(on.functions[0]), runOnTwoRanks(off.functions[0]));
}

} // namespace
