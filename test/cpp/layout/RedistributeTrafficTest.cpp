//===- RedistributeTrafficTest.cpp - bytes sent per rank, explanations ---===//
#include "dtorch/RedistributeTraffic.h"
#include "dtorch/Explain.h"

#include <gtest/gtest.h>

using namespace dtorch;

namespace {
const Placement R = Placement::replicate();
Placement S(int64_t d) { return Placement::shard(d); }
Placement P(ReduceOp op = ReduceOp::Sum) { return Placement::partial(op); }
using Bytes = std::vector<int64_t>;

Bytes total(const std::vector<int64_t> &shape, int64_t esize,
            const std::vector<int64_t> &mesh, const Placements &src,
            const Placements &dst) {
  return totalBytesSent(redistributeTraffic(shape, esize, mesh, src, dst),
                        meshSize(mesh));
}
} // namespace

TEST(RedistributeTraffic, AllGatherSendsOwnPieceToEveryPeer) {
  // 8x4 f32 rows over 4 ranks: 8 elements each, sent to 3 peers.
  EXPECT_EQ(total({8, 4}, 4, {4}, {S(0)}, {R}), (Bytes{96, 96, 96, 96}));
  // Uneven 7x5: pieces of 2, 2, 2, 1 rows.
  EXPECT_EQ(total({7, 5}, 4, {4}, {S(0)}, {R}), (Bytes{120, 120, 120, 60}));
  // f64 doubles it.
  EXPECT_EQ(total({8, 4}, 8, {4}, {S(0)}, {R}), (Bytes{192, 192, 192, 192}));
}

TEST(RedistributeTraffic, AllReduceIsReduceScatterThenAllGather) {
  // 32 elements, 4 chunks of 8: 24 sent in the reduce-scatter, 3 x 8 in the
  // gather.
  EXPECT_EQ(total({8, 4}, 4, {4}, {P()}, {R}), (Bytes{192, 192, 192, 192}));
  // 35 elements: chunks 8, 9, 9, 9.
  EXPECT_EQ(total({7, 5}, 1, {4}, {P()}, {R}),
            (Bytes{27 + 24, 26 + 27, 53, 53}));
  // Max reduces the same way.
  EXPECT_EQ(total({8, 4}, 4, {4}, {P(ReduceOp::Max)}, {R}),
            (Bytes{192, 192, 192, 192}));
}

TEST(RedistributeTraffic, ReduceScatterAndAllToAllKeepTheirOwnPart) {
  // P -> S(0): 32 elements, 8 kept.
  EXPECT_EQ(total({8, 4}, 4, {4}, {P()}, {S(0)}), (Bytes{96, 96, 96, 96}));
  // Uneven: 7 rows to 2, 2, 2, 1; every rank holds all 35 elements.
  EXPECT_EQ(total({7, 5}, 1, {4}, {P()}, {S(0)}), (Bytes{25, 25, 25, 30}));
  // S(0) -> S(1) on 2 ranks of a 4x4: a 2x4 piece, a 2x2 part kept.
  EXPECT_EQ(total({4, 4}, 4, {2}, {S(0)}, {S(1)}), (Bytes{16, 16}));
  // Uneven 7x5 on 2: rank 0 holds 4x5 and keeps 4x3, rank 1 holds 3x5 and
  // keeps 3x2.
  EXPECT_EQ(total({7, 5}, 1, {2}, {S(0)}, {S(1)}), (Bytes{8, 9}));
}

TEST(RedistributeTraffic, LocalStepsSendNothing) {
  EXPECT_EQ(total({8, 4}, 4, {4}, {R}, {S(1)}), (Bytes{0, 0, 0, 0}));
  EXPECT_EQ(total({8, 4}, 4, {4}, {R}, {P()}), (Bytes{0, 0, 0, 0}));
  EXPECT_EQ(total({8, 4}, 4, {4}, {S(0)}, {S(0)}), (Bytes{0, 0, 0, 0}));
}

TEST(RedistributeTraffic, TwoAxesCountEachStepOnItsOwnPiece) {
  // [P(sum), S(1)] -> [R, R] on 2x2 of an 8x4 f32: all_reduce on axis 0 of
  // an 8x2 piece (16 elements: 8 + 8), then all_gather on axis 1 of the 8x2
  // piece (16).
  auto steps = redistributeTraffic({8, 4}, 4, {2, 2}, {P(), S(1)}, {R, R});
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step.kind, RedistributeStep::Kind::AllReduce);
  EXPECT_EQ(steps[0].bytesSent, (Bytes{64, 64, 64, 64}));
  EXPECT_EQ(steps[1].step.kind, RedistributeStep::Kind::AllGather);
  EXPECT_EQ(steps[1].bytesSent, (Bytes{64, 64, 64, 64}));
  // Nested split of 7 rows: [S(0), S(0)] pieces 2, 2 | 2, 1 rows of 5.
  // Axis 1 is gathered first (rows 2 / 1), then axis 0 (rows 4 / 3).
  auto nested = redistributeTraffic({7, 5}, 1, {2, 2}, {S(0), S(0)}, {R, R});
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[0].step.axis, 1);
  EXPECT_EQ(nested[0].bytesSent, (Bytes{10, 10, 10, 5}));
  EXPECT_EQ(nested[1].bytesSent, (Bytes{20, 20, 15, 15}));
}

TEST(Explain, TextUsesMeshDimNames) {
  RedistributionExplanation e;
  e.reason = RedistributionExplanation::Reason::Operand;
  e.uses = {{"dtensor.add", 0}};
  e.shape = {8, 4};
  e.elementType = "f32";
  e.elementBytes = 4;
  e.meshShape = {2, 2};
  e.meshDimNames = {"dp", "tp"};
  e.before = {S(0), P()};
  e.after = {S(0), R};
  planTraffic(e);
  EXPECT_EQ(e.bytesSent, (Bytes{64, 64, 64, 64}));
  EXPECT_EQ(changeText(e), "tp: P(sum) -> R");
  EXPECT_EQ(placementsText(e.before, e.meshDimNames), "dp: S(0), tp: P(sum)");
  EXPECT_EQ(explanationText(e),
            "redistribute for operand 0 of dtensor.add: 8x4xf32 tp: P(sum) -> "
            "R by all_reduce(sum) on \"tp\"; each rank sends 64 bytes");

  e.meshDimNames.clear();
  EXPECT_EQ(changeText(e), "dim 1: P(sum) -> R");
  EXPECT_EQ(stepText(e.steps[0].step, e.meshDimNames),
            "all_reduce(sum) on mesh dim 1");
}

TEST(Explain, ReasonsAndLocalSteps) {
  RedistributionExplanation e;
  e.reason = RedistributionExplanation::Reason::Result;
  e.source = "dtensor.matmul";
  e.shape = {7, 5};
  e.elementType = "f32";
  e.elementBytes = 4;
  e.meshShape = {4};
  e.before = {R};
  e.after = {S(1)};
  planTraffic(e);
  EXPECT_EQ(explanationText(e),
            "redistribute for the result of dtensor.matmul (computed as [R], "
            "declared [S(1)]): 7x5xf32 R -> S(1) by local_slice on mesh dim "
            "0; no communication");
  e.reason = RedistributionExplanation::Reason::Operand;
  e.uses = {{"dtensor.add", 1}, {"dtensor.mul", 0}, {"func.return", 2}};
  EXPECT_EQ(reasonText(e), "operand 1 of dtensor.add, operand 0 of "
                           "dtensor.mul and result 2 of the function");
  e.reason = RedistributionExplanation::Reason::Explicit;
  EXPECT_EQ(reasonText(e), "an explicit redistribute");
  EXPECT_EQ(bytesText({8, 9}), "8 to 9 bytes");
}
