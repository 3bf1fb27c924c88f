//===- FusedKernelRowsTest.cpp - generated kernels split into row ranges -===//
//
// An elementwise generated kernel of at least two rows also exports
// `<symbol>_rows`, which computes only rows [begin, end) of the outermost
// dim; the executor cuts large outputs into row ranges run by the rank's
// threads (runtime ParallelFor.h). Any cut must give the whole kernel's
// bits, write only its rows, and read operands broadcast along the rows
// whole; kernels without rows to split export no such entry.
//
//===----------------------------------------------------------------------===//

#include "ProgramsByPosition.h"
#include "dtorch/Compiler.h"
#include "dtorch/runtime/Blas.h"
#include "dtorch/runtime/Executable.h"
#include "dtorch/runtime/Executor.h"
#include "dtorch/runtime/Half.h"
#include "dtorch/runtime/ParallelFor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace dtorch;

namespace {

std::string tensorType(const std::string &shape, const std::string &dtype) {
  return "!dtensor.tensor<" + shape + "x" + dtype + ", #m, [R]>";
}

/// y = gelu(x * w + b) * 2 over rows x cols: w a row, b a column.
std::string geluChain(const std::string &dtype, int64_t rows, int64_t cols) {
  std::string r = std::to_string(rows), c = std::to_string(cols);
  std::string x = tensorType(r + "x" + c, dtype);
  std::string w = tensorType(c, dtype);
  std::string b = tensorType(r + "x1", dtype);
  return "#m = #dtensor.mesh<[1]>\n"
         "func.func @f(%x: " +
         x + ", %w: " + w + ", %b: " + b + ") -> " + x +
         " {\n"
         "  %wb = dtensor.broadcast_to %w : (" +
         w + ") -> " + x + "\n  %m = dtensor.mul %x, %wb : (" + x + ", " + x +
         ") -> " + x + "\n  %bb = dtensor.broadcast_to %b : (" + b + ") -> " +
         x + "\n  %s = dtensor.add %m, %bb : (" + x + ", " + x + ") -> " + x +
         "\n  %g = dtensor.gelu %s : (" + x + ") -> " + x +
         "\n  %c = dtensor.full 2.0 : " + x +
         "\n  %y = dtensor.mul %g, %c : (" + x + ", " + x + ") -> " + x +
         "\n  return %y : " + x + "\n}\n";
}

wire::Program fusedProgram(const std::string &source) {
  CompileOptions options;
  options.fuseElementwise = true;
  CompileResult result = compileModule(source, "rows.mlir", options);
  EXPECT_TRUE(result.ok) << result.error;
  return emitted::programsByPosition(result.functions[0])[0];
}

/// Random bytes that are finite values of `dtype` in [-3, 3].
rt::Tensor randomTensor(const wire::TensorSpec &spec, std::mt19937 &rng) {
  rt::Tensor t = rt::Tensor::emptyLike(spec);
  std::uniform_real_distribution<float> u(-3, 3);
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v = u(rng);
    switch (t.dtype()) {
    case wire::F32:
      t.data_as<float>()[i] = v;
      break;
    case wire::F64:
      t.data_as<double>()[i] = v;
      break;
    case wire::F16:
      t.data_as<rt::Half>()[i] = rt::Half(v);
      break;
    case wire::BF16:
      t.data_as<rt::BFloat16>()[i] = rt::BFloat16(v);
      break;
    default:
      ADD_FAILURE() << "unexpected dtype";
    }
  }
  return t;
}

struct Call {
  rt::GeneratedKernelFn whole = nullptr;
  rt::GeneratedRowsKernelFn rows = nullptr;
  std::vector<rt::Tensor> inputs;
  std::vector<void *> in;
  std::vector<double> scalars;
  wire::TensorSpec output;
};

/// The fused kernel of `program`, its entries, random inputs and scalars.
Call prepare(const wire::Program &program, std::mt19937 &rng) {
  Call call;
  EXPECT_EQ(program.executables_size(), 1);
  const wire::Executable &exe = program.executables(0);
  call.whole = rt::loadExecutable(exe);
  call.rows = rt::loadExecutableRows(exe);
  for (const wire::TensorSpec &spec : exe.inputs())
    call.inputs.push_back(randomTensor(spec, rng));
  for (rt::Tensor &t : call.inputs)
    call.in.push_back(t.data());
  for (const auto &inst : program.instructions())
    if (inst.op() == "fused") {
      auto it = inst.attrs().find("scalars");
      if (it != inst.attrs().end()) {
        const std::string &bytes = it->second.data();
        call.scalars.resize(bytes.size() / sizeof(double));
        std::memcpy(call.scalars.data(), bytes.data(), bytes.size());
      }
    }
  call.scalars.resize(exe.num_scalars());
  call.output = exe.outputs(0);
  return call;
}

rt::Tensor runWhole(const Call &call) {
  rt::Tensor y = rt::Tensor::emptyLike(call.output);
  std::memset(y.data(), 0xA5, y.nbytes());
  void *out = y.data();
  call.whole(call.in.data(), &out, call.scalars.data());
  return y;
}

bool sameBytes(const rt::Tensor &a, const rt::Tensor &b) {
  return a.nbytes() == b.nbytes() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(FusedKernelRows, AnyCutGivesTheWholeKernelsBitsEveryFloatDtype) {
  std::mt19937 rng(5);
  for (const char *dtype : {"f32", "f64", "f16", "bf16"}) {
    SCOPED_TRACE(dtype);
    // 1001 columns: no multiple of a vector width.
    Call call = prepare(fusedProgram(geluChain(dtype, 7, 1001)), rng);
    ASSERT_NE(call.rows, nullptr) << "no row entry";
    rt::Tensor whole = runWhole(call);
    // Uneven cuts, run one after another and in parallel.
    std::vector<int64_t> cuts = {0, 1, 4, 6, 7};
    rt::Tensor serial = rt::Tensor::emptyLike(call.output);
    void *out = serial.data();
    for (size_t p = 0; p + 1 < cuts.size(); ++p)
      call.rows(call.in.data(), &out, call.scalars.data(), cuts[p],
                cuts[p + 1]);
    EXPECT_TRUE(sameBytes(whole, serial));
    rt::Tensor parallel = rt::Tensor::emptyLike(call.output);
    void *pout = parallel.data();
    rt::parallelFor(static_cast<int>(cuts.size() - 1), [&](int p) {
      call.rows(call.in.data(), &pout, call.scalars.data(), cuts[p],
                cuts[p + 1]);
    });
    EXPECT_TRUE(sameBytes(whole, parallel));
  }
}

TEST(FusedKernelRows, ARangeWritesOnlyItsRows) {
  std::mt19937 rng(9);
  Call call = prepare(fusedProgram(geluChain("f32", 6, 33)), rng);
  ASSERT_NE(call.rows, nullptr);
  rt::Tensor whole = runWhole(call);
  rt::Tensor part = rt::Tensor::emptyLike(call.output);
  std::memset(part.data(), 0xA5, part.nbytes());
  void *out = part.data();
  call.rows(call.in.data(), &out, call.scalars.data(), 2, 5);
  size_t row = 33 * sizeof(float);
  const char *got = static_cast<const char *>(part.data());
  const char *want = static_cast<const char *>(whole.data());
  for (int64_t r = 0; r < 6; ++r) {
    bool inside = r >= 2 && r < 5;
    for (size_t i = 0; i < row; ++i) {
      unsigned char expected =
          inside ? static_cast<unsigned char>(want[r * row + i]) : 0xA5;
      ASSERT_EQ(static_cast<unsigned char>(got[r * row + i]), expected)
          << "row " << r << " byte " << i;
    }
  }
}

TEST(FusedKernelRows, OneDimensionalKernelsSplitSingleRowsDoNot) {
  std::mt19937 rng(3);
  std::string t = tensorType("1000", "f32");
  std::string flat = "#m = #dtensor.mesh<[1]>\nfunc.func @f(%a: " + t +
                     ") -> " + t + " {\n  %e = dtensor.exp %a : (" + t +
                     ") -> " + t + "\n  %c = dtensor.full 3.0 : " + t +
                     "\n  %y = dtensor.mul %e, %c : (" + t + ", " + t +
                     ") -> " + t + "\n  return %y : " + t + "\n}\n";
  Call call = prepare(fusedProgram(flat), rng);
  ASSERT_NE(call.rows, nullptr);
  rt::Tensor whole = runWhole(call);
  rt::Tensor cut = rt::Tensor::emptyLike(call.output);
  void *out = cut.data();
  call.rows(call.in.data(), &out, call.scalars.data(), 0, 333);
  call.rows(call.in.data(), &out, call.scalars.data(), 333, 1000);
  EXPECT_TRUE(sameBytes(whole, cut));

  Call single = prepare(fusedProgram(geluChain("f32", 1, 40)), rng);
  EXPECT_EQ(single.rows, nullptr);
  EXPECT_NE(single.whole, nullptr);
}

TEST(FusedKernelRows, TheExecutorSplitsLargeOutputsAmongTheRanksThreads) {
  if (const char *fixed = std::getenv("DTORCH_KERNEL_THREADS"); fixed && *fixed)
    GTEST_SKIP() << "DTORCH_KERNEL_THREADS is set: the thread share is fixed";
  std::mt19937 rng(13);
  // 300 x 1001 float32: 1.2 MB of output, above the split threshold.
  wire::Program program = fusedProgram(geluChain("f32", 300, 1001));
  auto spec = [](std::vector<int64_t> shape) {
    wire::TensorSpec s;
    s.set_dtype(wire::F32);
    for (int64_t e : shape)
      s.add_shape(e);
    return s;
  };
  // The function's arguments: x, w (a row), b (a column).
  std::vector<rt::Tensor> inputs = {randomTensor(spec({300, 1001}), rng),
                                    randomTensor(spec({1001}), rng),
                                    randomTensor(spec({300, 1}), rng)};
  int before = rt::blas::threads();
  rt::Executor executor(nullptr);
  rt::blas::setThreads(3);
  std::vector<rt::Tensor> split = executor.run(program, inputs);
  int helpers = rt::parallelForHelpers();
  EXPECT_EQ(rt::kernelParts(300, 1201200), 3);
  rt::blas::setThreads(1);
  EXPECT_EQ(rt::kernelParts(300, 1201200), 1);
  std::vector<rt::Tensor> single = executor.run(program, inputs);
  rt::blas::setThreads(before);
  ASSERT_EQ(split.size(), 1u);
  ASSERT_EQ(single.size(), 1u);
  EXPECT_TRUE(sameBytes(single[0], split[0]));
  EXPECT_EQ(rt::kernelParts(300, 1000), 1);  // too small to split
  EXPECT_EQ(rt::kernelParts(1, 1 << 24), 1); // one row
  EXPECT_GE(helpers, 2);
}

TEST(ParallelFor, RunsEveryPartOnceAndRethrows) {
  std::vector<std::atomic<int>> runs(9);
  rt::parallelFor(9, [&](int part) { runs[part].fetch_add(1); });
  for (auto &r : runs)
    EXPECT_EQ(r.load(), 1);
  std::atomic<int> ran{0};
  EXPECT_THROW(rt::parallelFor(4,
                               [&](int part) {
                                 ran.fetch_add(1);
                                 if (part == 2)
                                   throw std::runtime_error("part 2");
                               }),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 4);
}

TEST(ParallelFor, WorksInAChildForkedAfterHelpersStarted) {
  std::atomic<int> parent{0};
  rt::parallelFor(3, [&](int) { parent.fetch_add(1); });
  ASSERT_EQ(parent.load(), 3);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Two parts that each wait for the other to start: only a live helper
    // (the child's own, the parent's are not copied by fork) can run one.
    std::atomic<int> started{0}, together{0};
    rt::parallelFor(2, [&](int) {
      started.fetch_add(1);
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (started.load() < 2 && std::chrono::steady_clock::now() < until)
        std::this_thread::yield();
      together.fetch_add(started.load() == 2);
    });
    _exit(together.load() == 2 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

} // namespace
