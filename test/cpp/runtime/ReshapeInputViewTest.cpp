// The executor runs a reshape of a program input as a view of the input (no
// copy), except when the input is donated to the run; the values are the
// same either way, with and without buffer planning, and the input is
// never written.
#include "TestSupport.h"

#include "dtorch/runtime/ProgramValidator.h"
#include "dtorch/runtime/RankState.h"

#include <cmath>

namespace dtorch::rt::test {
namespace {

using ::dtorch::wire::F32;

const std::vector<float> kX = {0.5f, -1, 2, 0.25f, 3, -0.75f};

// x [2, 3] -> reshape -> r [6] -> exp -> e [6] (in place over r when
// planned) -> neg -> y [6]; outputs y and r.
struct ReshapeChain {
  ProgramBuilder b;
  int x, r, e, y;
  explicit ReshapeChain(bool planned) {
    x = b.input(F32, {2, 3});
    r = b.buffer(F32, {6});
    e = b.buffer(F32, {6});
    y = b.buffer(F32, {6});
    b.add("reshape", {x}, {r});
    b.add("exp", {r}, {e});
    b.add("neg", {e}, {y});
    b.output(y);
    if (planned) {
      // e takes r's slot (exp in place); the input and the output keep
      // their own storage.
      setBufferPlan(b.program(), {-1, 0, 0, -1}, 64);
    } else {
      b.output(r);
    }
  }
};

std::vector<float> expected() {
  std::vector<float> y;
  for (float v : kX)
    y.push_back(-std::exp(v));
  return y;
}

TEST(ReshapeInputView, AReshapeOfAnInputSharesItsMemory) {
  ReshapeChain c(/*planned=*/false);
  ASSERT_NO_THROW(validateProgram(c.b.program(), -1));
  Executor executor(nullptr);
  Tensor x = makeTensor<float>(F32, {2, 3}, kX);
  std::vector<Tensor> out = executor.runValidated(c.b.program(), {x}, {}, {});
  EXPECT_EQ(valuesOf<float>(out[0]), expected());
  ASSERT_EQ(out[1].shape(), std::vector<int64_t>({6}));
  EXPECT_EQ(out[1].data(), x.data()); // a view, not a copy
  EXPECT_EQ(valuesOf<float>(out[1]), kX);
  EXPECT_EQ(executor.lastRunMemory().reshapeViews, 1u);
  // e and y have storage of their own (no planning here), r none.
  EXPECT_EQ(executor.lastRunMemory().ownBytes, 48u);
  EXPECT_EQ(valuesOf<float>(x), kX);
}

TEST(ReshapeInputView, ADonatedInputIsCopied) {
  ReshapeChain c(/*planned=*/false);
  Executor executor(nullptr);
  Tensor x = makeTensor<float>(F32, {2, 3}, kX);
  const void *xData = x.data();
  std::vector<Tensor> out =
      executor.runValidated(c.b.program(), {std::move(x)}, {}, {true});
  EXPECT_NE(out[1].data(), xData);
  EXPECT_EQ(valuesOf<float>(out[1]), kX);
  EXPECT_EQ(valuesOf<float>(out[0]), expected());
  EXPECT_EQ(executor.lastRunMemory().reshapeViews, 0u);
}

TEST(ReshapeInputView, APlannedSlotWrittenInPlaceLeavesTheInputAlone) {
  // The exp writes e into r's arena slot; r itself is the input's memory,
  // so the exp must read x there and write the arena, never x.
  ReshapeChain c(/*planned=*/true);
  ASSERT_NO_THROW(validateProgram(c.b.program(), -1));
  Executor executor(nullptr);
  Tensor x = makeTensor<float>(F32, {2, 3}, kX);
  for (int run = 0; run < 2; ++run) {
    std::vector<Tensor> out = executor.runValidated(c.b.program(), {x}, {}, {});
    EXPECT_EQ(valuesOf<float>(out[0]), expected());
    EXPECT_EQ(valuesOf<float>(x), kX);
    EXPECT_EQ(executor.lastRunMemory().reshapeViews, 1u);
  }
}

TEST(ReshapeInputView, AReshapeOfAnOutputSharesItsMemory) {
  // y = exp(x) is an output (storage of its own, written once); r =
  // reshape(y), also an output, views it. t = reshape(e) of a planned
  // temporary stays a copy: e's arena slot is reused (here by w).
  ProgramBuilder b;
  int x = b.input(F32, {2, 3});
  int y = b.buffer(F32, {2, 3});
  int r = b.buffer(F32, {6});
  int e = b.buffer(F32, {2, 3});
  int t = b.buffer(F32, {6});
  int w = b.buffer(F32, {6});
  b.add("exp", {x}, {y});
  b.add("reshape", {y}, {r});
  b.add("neg", {x}, {e});
  b.add("reshape", {e}, {t});
  b.add("neg", {t}, {w});
  b.output(y);
  b.output(r);
  b.output(w);
  Program &program = b.program();
  setBufferPlan(program, {-1, -1, -1, 0, 64, -1}, 128);
  ASSERT_NO_THROW(validateProgram(program, -1));
  Executor executor(nullptr);
  Tensor xt = makeTensor<float>(F32, {2, 3}, kX);
  std::vector<Tensor> out = executor.runValidated(program, {xt}, {}, {});
  EXPECT_EQ(out[1].data(), out[0].data());
  std::vector<float> ex, negx;
  for (float v : kX) {
    ex.push_back(std::exp(v));
    negx.push_back(v);
  }
  EXPECT_EQ(valuesOf<float>(out[1]), ex);
  EXPECT_EQ(valuesOf<float>(out[2]), negx); // -(-x)
  EXPECT_EQ(executor.lastRunMemory().reshapeViews, 1u);
}

TEST(ReshapeInputView, RankStateKeepsTheInputWhenTheViewIsAResult) {
  // The view shares the input's storage: a later run that is given the
  // input as donated must not write over the result that views it.
  ReshapeChain c(/*planned=*/false);
  RankState state(0, nullptr);
  state.upload(1, c.b.program());
  state.put(10, makeTensor<float>(F32, {2, 3}, kX));
  ASSERT_FALSE(state.run(1, {10}, {20, 21}, {}, {}));
  EXPECT_EQ(valuesOf<float>(state.fetch(21)), kX);
  // Donor pairing: y may take x's storage (read elementwise by the chain).
  Program donating = c.b.program();
  setOutputDonors(donating, {0, -1});
  state.upload(2, donating);
  ASSERT_FALSE(state.run(2, {10}, {30, 31}, {}, {10}));
  EXPECT_EQ(valuesOf<float>(state.fetch(30)), expected());
  EXPECT_EQ(valuesOf<float>(state.fetch(21)), kX); // untouched
  EXPECT_EQ(valuesOf<float>(state.fetch(31)), kX);
}

} // namespace
} // namespace dtorch::rt::test
