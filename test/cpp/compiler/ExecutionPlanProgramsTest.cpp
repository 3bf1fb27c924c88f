//===- ExecutionPlanProgramsTest.cpp - compiled programs through plans ---===//
//
// Programs the compiler emits, with generated kernels (fusion), library
// kernels (matmul, reshape), buffer planning and donation, run through an
// execution plan made once (runtime/include/dtorch/runtime/ExecutionPlan.h)
// and without one (the program resolved on every run): several runs with
// other inputs, donated or not, give the same bits and the same memory
// counts.
//
//===----------------------------------------------------------------------===//

#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/ExecutionPlan.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/ProgramValidator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace dtorch;

namespace {

// gelu-like chain around a matmul and reshapes: the elementwise parts fuse
// into generated kernels, matmul and reshape stay library kernels.
const char *kSource = R"(#m = #dtensor.mesh<[1]>
func.func @f(%x: !dtensor.tensor<16x8xf32, #m, [R]>, %w: !dtensor.tensor<8x8xf32, #m, [R]>, %b: !dtensor.tensor<16x8xf32, #m, [R]>) -> (!dtensor.tensor<128xf32, #m, [R]>, !dtensor.tensor<8x8xf32, #m, [R]>) {
  %h = dtensor.matmul %x, %w : (!dtensor.tensor<16x8xf32, #m, [R]>, !dtensor.tensor<8x8xf32, #m, [R]>) -> !dtensor.tensor<16x8xf32, #m, [R]>
  %a = dtensor.add %h, %b : (!dtensor.tensor<16x8xf32, #m, [R]>, !dtensor.tensor<16x8xf32, #m, [R]>) -> !dtensor.tensor<16x8xf32, #m, [R]>
  %t = dtensor.tanh %a : (!dtensor.tensor<16x8xf32, #m, [R]>) -> !dtensor.tensor<16x8xf32, #m, [R]>
  %e = dtensor.exp %t : (!dtensor.tensor<16x8xf32, #m, [R]>) -> !dtensor.tensor<16x8xf32, #m, [R]>
  %r = dtensor.reshape %e : (!dtensor.tensor<16x8xf32, #m, [R]>) -> !dtensor.tensor<128xf32, #m, [R]>
  %n = dtensor.neg %r : (!dtensor.tensor<128xf32, #m, [R]>) -> !dtensor.tensor<128xf32, #m, [R]>
  %g = dtensor.matmul %w, %w : (!dtensor.tensor<8x8xf32, #m, [R]>, !dtensor.tensor<8x8xf32, #m, [R]>) -> !dtensor.tensor<8x8xf32, #m, [R]>
  %u = dtensor.sub %w, %g : (!dtensor.tensor<8x8xf32, #m, [R]>, !dtensor.tensor<8x8xf32, #m, [R]>) -> !dtensor.tensor<8x8xf32, #m, [R]>
  return %n, %u : !dtensor.tensor<128xf32, #m, [R]>, !dtensor.tensor<8x8xf32, #m, [R]>
}
)";

rt::Tensor randomTensor(std::vector<int64_t> shape, unsigned seed) {
  rt::Tensor t = rt::Tensor::empty(wire::F32, std::move(shape));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data_as<float>()[i] = dist(gen);
  return t;
}

int countOp(const wire::Program &program, const std::string &op) {
  int n = 0;
  for (const auto &inst : program.instructions())
    n += inst.op() == op;
  return n;
}

TEST(ExecutionPlanPrograms, GeneratedAndLibraryKernelsGiveTheSameBits) {
  CompileOptions options;
  options.fuseElementwise = true;
  options.planBuffers = true;
  CompileResult result = compileModule(kSource, "plan.mlir", options);
  ASSERT_TRUE(result.ok) << result.error;
  wire::Program program = emitted::programsByPosition(result.functions[0])[0];
  ASSERT_NO_THROW(rt::validateProgram(program, -1));
  EXPECT_GE(countOp(program, rt::kFusedOp), 1);
  EXPECT_EQ(countOp(program, "matmul"), 2);
  EXPECT_GT(program.arena_bytes(), 0);

  rt::Executor planned(nullptr), unplanned(nullptr);
  planned.setExecutionPlans(true);
  unplanned.setExecutionPlans(false);
  std::shared_ptr<rt::ExecutionPlan> plan =
      planned.makePlan(std::make_shared<const wire::Program>(program));
  EXPECT_EQ(plan->instructionCount(),
            static_cast<size_t>(program.instructions_size()));
  for (unsigned run = 0; run < 4; ++run) {
    SCOPED_TRACE("run " + std::to_string(run));
    bool donate = run % 2 == 1;
    std::vector<bool> donated(3, false);
    donated[1] = donate; // w, which the sub may write over
    std::vector<std::vector<rt::Tensor>> inputs(2);
    for (auto &in : inputs) {
      in.push_back(randomTensor({16, 8}, 10 + run));
      in.push_back(randomTensor({8, 8}, 20 + run));
      in.push_back(randomTensor({16, 8}, 30 + run));
    }
    std::vector<rt::Tensor> a =
        planned.runPlanned(*plan, inputs[0], {}, donated);
    rt::RunMemory memoryPlanned = planned.lastRunMemory();
    std::vector<rt::Tensor> b =
        unplanned.runValidated(program, inputs[1], {}, donated);
    rt::RunMemory memoryUnplanned = unplanned.lastRunMemory();
    ASSERT_EQ(a.size(), 2u);
    ASSERT_EQ(b.size(), 2u);
    for (size_t k = 0; k < a.size(); ++k) {
      ASSERT_EQ(a[k].shape(), b[k].shape());
      EXPECT_EQ(std::memcmp(a[k].data(), b[k].data(), a[k].nbytes()), 0)
          << "output " << k;
    }
    EXPECT_EQ(memoryPlanned.ownBytes, memoryUnplanned.ownBytes);
    EXPECT_EQ(memoryPlanned.allocations, memoryUnplanned.allocations);
    EXPECT_EQ(memoryPlanned.donations, memoryUnplanned.donations);
    EXPECT_EQ(memoryPlanned.reshapeViews, memoryUnplanned.reshapeViews);
  }
}

} // namespace
