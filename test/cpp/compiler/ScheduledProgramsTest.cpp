//===- ScheduledProgramsTest.cpp - collectives placed for overlap --------===//
//
// A data-parallel gradient step compiled through the whole pipeline: its
// gradient all_reduces are bucketed into one, issued before the unrelated
// compute after them (so they overlap it), every collective waits for the
// compute instruction before it, and the program still computes the same
// values on every rank.
//
//===----------------------------------------------------------------------===//
#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/FakeCollectives.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

using namespace dtorch;

namespace {

// x: the batch, Shard(0) over 2 ranks; w: a replicated weight. g1 = x^T x
// and g2 = the column sums of x are partial sums made replicated (two
// all_reduces in program order at the end); z = (w w) w is compute that
// needs no collective, written between them.
const char *kGradientStep = R"(
#m = #dtensor.mesh<[2]>
func.func @step(%x: !dtensor.tensor<4x8xf32, #m, [S(0)]>, %w: !dtensor.tensor<8x8xf32, #m, [R]>) -> (!dtensor.tensor<8x8xf32, #m, [R]>, !dtensor.tensor<8x8xf32, #m, [R]>, !dtensor.tensor<8xf32, #m, [R]>) {
  %xt = dtensor.transpose %x perm = [1, 0] : (!dtensor.tensor<4x8xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(1)]>
  %g1 = dtensor.matmul %xt, %x : (!dtensor.tensor<8x4xf32, #m, [S(1)]>, !dtensor.tensor<4x8xf32, #m, [S(0)]>) -> !dtensor.tensor<8x8xf32, #m, [R]>
  %z0 = dtensor.matmul %w, %w : (!dtensor.tensor<8x8xf32, #m, [R]>, !dtensor.tensor<8x8xf32, #m, [R]>) -> !dtensor.tensor<8x8xf32, #m, [R]>
  %z = dtensor.matmul %z0, %w : (!dtensor.tensor<8x8xf32, #m, [R]>, !dtensor.tensor<8x8xf32, #m, [R]>) -> !dtensor.tensor<8x8xf32, #m, [R]>
  %g2 = dtensor.sum %x dims = [0] : (!dtensor.tensor<4x8xf32, #m, [S(0)]>) -> !dtensor.tensor<8xf32, #m, [R]>
  return %g1, %z, %g2 : !dtensor.tensor<8x8xf32, #m, [R]>, !dtensor.tensor<8x8xf32, #m, [R]>, !dtensor.tensor<8xf32, #m, [R]>
}
)";

TEST(ScheduledPrograms, GradientAllReducesAreBucketedAndIssuedEarly) {
  CompileResult result = compileModule(kGradientStep, "step.mlir");
  ASSERT_TRUE(result.ok) << result.error;
  ASSERT_EQ(result.functions.size(), 1u);
  const CompiledFunction &fn = result.functions[0];
  ASSERT_EQ(fn.programs.size(), 1u);
  const wire::Program &program = fn.programs[0];
  int allReduces = 0, firstReduce = -1, lastMatmul = -1, lastCompute = -1;
  for (int i = 0; i < program.instructions_size(); ++i) {
    const wire::Instruction &inst = program.instructions(i);
    if (inst.op() == "all_reduce") {
      ++allReduces;
      if (firstReduce < 0)
        firstReduce = i;
    }
    if (inst.op() == "matmul")
      lastMatmul = i;
    if (inst.stream() == wire::COMM) {
      // A scheduled collective waits for the compute instruction before it.
      ASSERT_GE(lastCompute, 0);
      int event = program.instructions(lastCompute).record_event();
      ASSERT_GE(event, 0) << "instruction " << lastCompute;
      EXPECT_NE(std::find(inst.wait_events().begin(), inst.wait_events().end(),
                          event),
                inst.wait_events().end())
          << "instruction " << i;
    } else {
      lastCompute = i;
    }
  }
  EXPECT_EQ(allReduces, 1); // g1 and g2 in one bucket
  // The bucket is reduced before the last matmul of the unrelated chain.
  EXPECT_LT(firstReduce, lastMatmul);

  // Both ranks (each run validates its program) compute x^T x, z and the
  // column sums of the whole batch.
  std::vector<wire::Program> programs = emitted::programsByPosition(fn);
  rt::FakeCollectiveHub hub(2, std::chrono::seconds(20));
  std::vector<std::vector<rt::Tensor>> outputs(2);
  std::vector<std::string> errors(2);
  auto xAt = [](int64_t row, int64_t col) {
    return 0.25f * static_cast<float>(row + 1) -
           0.125f * static_cast<float>(col);
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        rt::Tensor x = rt::Tensor::empty(wire::F32, {2, 8});
        for (int64_t i = 0; i < 2; ++i)
          for (int64_t j = 0; j < 8; ++j)
            x.data_as<float>()[i * 8 + j] = xAt(2 * r + i, j);
        rt::Tensor w = rt::Tensor::empty(wire::F32, {8, 8});
        for (int64_t i = 0; i < 64; ++i)
          w.data_as<float>()[i] = (i % 9 == 0) ? 1.f : 0.f; // identity
        auto comm = hub.communicator(r);
        rt::Executor exec(comm.get());
        outputs[r] = exec.run(programs[r], {x, w});
      } catch (const std::exception &e) {
        errors[r] = e.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    ASSERT_EQ(outputs[r].size(), 3u);
    const float *g1 = outputs[r][0].data_as<float>();
    const float *z = outputs[r][1].data_as<float>();
    const float *g2 = outputs[r][2].data_as<float>();
    for (int64_t i = 0; i < 8; ++i) {
      float column = 0;
      for (int64_t k = 0; k < 4; ++k)
        column += xAt(k, i);
      EXPECT_NEAR(g2[i], column, 1e-5f) << "rank " << r << " g2[" << i << "]";
      for (int64_t j = 0; j < 8; ++j) {
        float dot = 0;
        for (int64_t k = 0; k < 4; ++k)
          dot += xAt(k, i) * xAt(k, j);
        EXPECT_NEAR(g1[i * 8 + j], dot, 1e-4f) << "rank " << r;
        EXPECT_EQ(z[i * 8 + j], i == j ? 1.f : 0.f) << "rank " << r;
      }
    }
  }
}

} // namespace
