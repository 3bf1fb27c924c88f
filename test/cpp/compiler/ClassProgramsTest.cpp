//===- ClassProgramsTest.cpp - one program per local-shape class ---------===//
//
// The compiler emits one program per local-shape class of the mesh: an even
// split gives one program whatever the world size (its size and compile
// time do not grow with the mesh), a remainder adds classes, and every mesh
// position finds exactly one program that, resolved for it, computes its
// piece.
//
//===----------------------------------------------------------------------===//
#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/FakeCollectives.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

using namespace dtorch;

namespace {

/// matmul + relu + sum with a redistribution (the partial sum all-reduced),
/// on a 1-D mesh of `world` ranks, `rowsPerRank` rows each.
std::string threeOpGraph(int64_t world, int64_t rows) {
  std::ostringstream os;
  std::string mesh = "#dtensor.mesh<[" + std::to_string(world) + "]>";
  std::string x = "!dtensor.tensor<" + std::to_string(rows) + "x16xf32, " +
                  mesh + ", [S(0)]>";
  std::string w = "!dtensor.tensor<16x8xf32, " + mesh + ", [R]>";
  std::string h = "!dtensor.tensor<" + std::to_string(rows) + "x8xf32, " +
                  mesh + ", [S(0)]>";
  std::string s = "!dtensor.tensor<f32, " + mesh + ", [R]>";
  os << "func.func @f(%x: " << x << ", %w: " << w << ") -> " << s << " {\n"
     << "  %0 = dtensor.matmul %x, %w : (" << x << ", " << w << ") -> " << h
     << "\n  %1 = dtensor.relu %0 : (" << h << ") -> " << h
     << "\n  %2 = dtensor.sum %1 dims = [0, 1] : (" << h << ") -> " << s
     << "\n  return %2 : " << s << "\n}\n";
  return os.str();
}

TEST(ClassPrograms, AnEvenSplitIsOneProgramAtAnyWorldSize) {
  size_t bytesAt4 = 0;
  double secondsAt4 = 0;
  for (int64_t world : {4, 64, 1024, 4096}) {
    std::string text = threeOpGraph(world, 2 * world);
    auto start = std::chrono::steady_clock::now();
    CompileResult result = compileModule(text, "three_ops.mlir");
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    ASSERT_TRUE(result.ok) << result.error;
    const CompiledFunction &fn = result.functions.at(0);
    ASSERT_EQ(fn.programs.size(), 1u) << world << " ranks";
    for (int64_t p : {int64_t(0), world / 2, world - 1})
      EXPECT_EQ(fn.programAt(p), 0);
    EXPECT_EQ(fn.programAt(world), -1);
    size_t bytes = fn.programs[0].ByteSizeLong();
    std::printf("3-op graph on %5lld ranks: %zu program(s), %zu bytes, "
                "%.2f ms to compile\n",
                static_cast<long long>(world), fn.programs.size(), bytes,
                seconds * 1e3);
    if (world == 4) {
      bytesAt4 = bytes;
      secondsAt4 = seconds;
    }
    // Only the numbers in the text grow (the mesh extent, the row count).
    EXPECT_LT(bytes, bytesAt4 + 64) << world << " ranks";
    (void)secondsAt4;
  }
}

TEST(ClassPrograms, ARemainderAddsAClassAndEveryPositionHasOne) {
  // 10 rows on 4 ranks: 3, 3, 3, 1.
  CompileResult result = compileModule(threeOpGraph(4, 10), "uneven.mlir");
  ASSERT_TRUE(result.ok) << result.error;
  const CompiledFunction &fn = result.functions.at(0);
  ASSERT_EQ(fn.programs.size(), 2u);
  EXPECT_EQ(fn.programAt(0), fn.programAt(2));
  EXPECT_NE(fn.programAt(2), fn.programAt(3));
  EXPECT_EQ(fn.programs[fn.programAt(3)]
                .buffers(fn.programs[fn.programAt(3)].inputs(0))
                .shape(0),
            1);
  // Each position's resolved program runs and the all-reduced sums agree.
  std::vector<wire::Program> programs = emitted::programsByPosition(fn);
  rt::FakeCollectiveHub hub(4, std::chrono::seconds(20));
  std::vector<float> sums(4);
  std::vector<std::string> errors(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      try {
        int64_t rows = r < 3 ? 3 : 1;
        rt::Tensor x = rt::Tensor::empty(wire::F32, {rows, 16});
        for (int64_t i = 0; i < rows * 16; ++i)
          x.data_as<float>()[i] = 0.01f * (i + r);
        rt::Tensor w = rt::Tensor::empty(wire::F32, {16, 8});
        for (int64_t i = 0; i < 16 * 8; ++i)
          w.data_as<float>()[i] = 1.f;
        auto comm = hub.communicator(r);
        rt::Executor exec(comm.get());
        sums[r] = exec.run(programs[r], {x, w})[0].data_as<float>()[0];
      } catch (const std::exception &e) {
        errors[r] = e.what();
      }
    });
  for (std::thread &t : threads)
    t.join();
  float expected = 0;
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(errors[r], "");
    int64_t rows = r < 3 ? 3 : 1;
    for (int64_t i = 0; i < rows * 16; ++i)
      expected += 8 * std::max(0.f, 0.01f * (i + r));
  }
  for (int r = 0; r < 4; ++r)
    EXPECT_NEAR(sums[r], expected, 1e-3f * expected) << "rank " << r;
}

} // namespace
