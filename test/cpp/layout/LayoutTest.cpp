//===- LayoutTest.cpp - placement math, plans and strategies -------------===//
#include "dtorch/Layout.h"
#include "dtorch/OpRules.h"
#include "dtorch/Redistribute.h"
#include "dtorch/ShardingRule.h"

#include <gtest/gtest.h>

using namespace dtorch;

namespace {
const Placement R = Placement::replicate();
Placement S(int64_t d) { return Placement::shard(d); }
Placement P(ReduceOp op = ReduceOp::Sum) { return Placement::partial(op); }
} // namespace

TEST(Chunks, TorchChunkSemantics) {
  EXPECT_EQ(chunkSizes(7, 4), (std::vector<int64_t>{2, 2, 2, 1}));
  EXPECT_EQ(chunkSizes(5, 4), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(chunkSizes(2, 3), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(chunkSizes(0, 2), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(chunkOffset(7, 4, 3), 6);
  EXPECT_EQ(chunkOffset(5, 4, 3), 5);
}

TEST(Mesh, CoordsAndGroups) {
  std::vector<int64_t> mesh = {2, 3};
  EXPECT_EQ(meshCoords(mesh, 4), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(meshLinear(mesh, {1, 2}), 5);
  EXPECT_EQ(axisGroup(mesh, {1, 1}, 0), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(axisGroup(mesh, {1, 1}, 1), (std::vector<int64_t>{3, 4, 5}));
}

TEST(LocalBox, NestedSplitsFollowMeshOrder) {
  // 7 rows split over axis 0 (4 + 3), then each piece over axis 1 of size 3.
  std::vector<int64_t> mesh = {2, 3};
  LocalBox b = localBox({7, 5}, mesh, {S(0), S(0)}, {1, 2});
  EXPECT_EQ(b.offset, (std::vector<int64_t>{6, 0}));
  EXPECT_EQ(b.shape, (std::vector<int64_t>{1, 5}));
  LocalBox e = localBox({7, 5}, mesh, {S(0), S(0)}, {0, 2});
  EXPECT_EQ(e.shape, (std::vector<int64_t>{0, 5})); // 4 rows over 3: 2, 2, 0
  LocalBox p = localBox({7, 5}, mesh, {P(), S(1)}, {1, 1});
  EXPECT_EQ(p.offset, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(p.shape, (std::vector<int64_t>{7, 2}));
}

TEST(Validate, RejectsBadPlacements) {
  EXPECT_NE(validatePlacements(2, 2, {S(0)}), "");
  EXPECT_NE(validatePlacements(2, 1, {S(2)}), "");
  EXPECT_NE(validatePlacements(2, 1, {S(-1)}), "");
  EXPECT_EQ(validatePlacements(2, 2, {S(1), P(ReduceOp::Max)}), "");
}

TEST(Plan, StepsPerAxis) {
  using K = RedistributeStep::Kind;
  auto kinds = [](const Placements &a, const Placements &b) {
    std::vector<K> ks;
    for (const RedistributeStep &s :
         planRedistribute({8, 8}, std::vector<int64_t>(a.size(), 2), a, b))
      ks.push_back(s.kind);
    return ks;
  };
  EXPECT_EQ(kinds({S(0)}, {R}), (std::vector<K>{K::AllGather}));
  EXPECT_EQ(kinds({R}, {S(1)}), (std::vector<K>{K::LocalSlice}));
  EXPECT_EQ(kinds({P()}, {R}), (std::vector<K>{K::AllReduce}));
  EXPECT_EQ(kinds({P()}, {S(0)}), (std::vector<K>{K::ReduceScatter}));
  EXPECT_EQ(kinds({S(0)}, {S(1)}), (std::vector<K>{K::AllToAll}));
  EXPECT_EQ(kinds({R}, {P()}), (std::vector<K>{K::ToPartial}));
  EXPECT_EQ(kinds({P(ReduceOp::Max)}, {P()}),
            (std::vector<K>{K::AllReduce, K::ToPartial}));
  EXPECT_TRUE(kinds({S(0), R}, {S(0), R}).empty());
  // Nested: the inner split must move first.
  std::vector<RedistributeStep> nested =
      planRedistribute({8, 8}, {2, 2}, {S(0), S(0)}, {R, S(0)});
  ASSERT_FALSE(nested.empty());
  EXPECT_EQ(nested.front().axis, 1);
  EXPECT_EQ(nested.back().after, (Placements{R, S(0)}));
  // Every step changes exactly the axis it names.
  for (const RedistributeStep &s :
       planRedistribute({8, 8}, {2, 2}, {P(), S(0)}, {S(1), R}))
    for (size_t a = 0; a < 2; ++a)
      if ((int64_t)a != s.axis)
        EXPECT_EQ(s.before[a], s.after[a]);
}

TEST(Cost, CheaperPathsCostLess) {
  std::vector<int64_t> shape = {64, 64}, mesh = {4};
  double gather = redistributeCost(shape, 4, mesh, {S(0)}, {R});
  double slice = redistributeCost(shape, 4, mesh, {R}, {S(0)});
  double allReduce = redistributeCost(shape, 4, mesh, {P()}, {R});
  double reduceScatter = redistributeCost(shape, 4, mesh, {P()}, {S(0)});
  EXPECT_EQ(slice, 0);
  EXPECT_GT(gather, 0);
  EXPECT_LT(reduceScatter, allReduce);
}

TEST(Strategy, MatmulContractingShardGivesPartial) {
  ShardingRule rule = rules::matmul({8, 6}, {6, 4});
  ShardingStrategy s = chooseStrategy(rule, {{8, 6}, {6, 4}}, {{S(1)}, {S(0)}},
                                      {8, 4}, 4, {4}, nullptr);
  EXPECT_EQ(s.cost, 0);
  EXPECT_EQ(s.result, (Placements{P()}));
  EXPECT_TRUE(isLocalStrategy(rule, {{S(1)}, {S(0)}}, {P()}, {4}));
  EXPECT_FALSE(isLocalStrategy(rule, {{S(1)}, {S(0)}}, {R}, {4}));
}

TEST(Strategy, RequiredResultIsRespected) {
  ShardingRule rule =
      rules::elementwise({8, 8}, 2, *rules::elementwiseTraits("add", 2));
  Placements want = {S(1)};
  ShardingStrategy s = chooseStrategy(rule, {{8, 8}, {8, 8}}, {{S(0)}, {S(0)}},
                                      {8, 8}, 4, {4}, &want);
  EXPECT_TRUE(isLocalStrategy(rule, s.operands, s.result, {4}));
  EXPECT_GT(s.cost, 0);
}

// On a mesh axis of size 1 a shard saves nothing: a replicated operand
// broadcast (as autograd does) stays replicated instead of becoming Shard
// and needing a one-rank all_gather for a replicated use.
TEST(Strategy, AxisOfSizeOneStaysReplicated) {
  ShardingRule rule = rules::broadcastTo({16}, {8, 16});
  ShardingStrategy free =
      chooseStrategy(rule, {{16}}, {{R}}, {8, 16}, 4, {1}, nullptr);
  EXPECT_EQ(free.result, (Placements{R}));
  Placements want = {R};
  ShardingStrategy required =
      chooseStrategy(rule, {{16}}, {{R}}, {8, 16}, 4, {1}, &want);
  EXPECT_EQ(required.result, (Placements{R}));
  // With ranks to share the work, sharding still wins. (One placement per
  // mesh axis: {R} alone made chooseStrategy read past the operand's
  // placements, an ASan report of make test-asan.)
  ShardingStrategy wide =
      chooseStrategy(rule, {{16}}, {{R, R}}, {8, 16}, 4, {1, 2}, nullptr);
  EXPECT_EQ(wide.result[0], R);
  EXPECT_TRUE(wide.result[1].isShard());
}

TEST(Strategy, PartialPassesThroughLinearOps) {
  auto add = rules::elementwise({4}, 2, *rules::elementwiseTraits("add", 2));
  EXPECT_TRUE(isLocalStrategy(add, {{P()}, {P()}}, {P()}, {2}));
  EXPECT_FALSE(isLocalStrategy(add, {{P()}, {R}}, {P()}, {2}));
  auto mul = rules::elementwise({4}, 2, *rules::elementwiseTraits("mul", 2));
  EXPECT_TRUE(isLocalStrategy(mul, {{P()}, {R}}, {P()}, {2}));
  EXPECT_FALSE(isLocalStrategy(mul, {{P()}, {P()}}, {P()}, {2}));
  auto relu = rules::elementwise({4}, 1, *rules::elementwiseTraits("relu", 1));
  EXPECT_FALSE(isLocalStrategy(relu, {{P()}}, {P()}, {2}));
  auto mx = rules::reduction({4, 4}, {1}, false, /*isMax=*/true);
  EXPECT_TRUE(isLocalStrategy(mx, {{S(1)}}, {P(ReduceOp::Max)}, {2}));
}

TEST(Rules, ReshapeKeepsOneToOneDimsAndEvenOuterDims) {
  ShardingRule r = rules::reshape({4, 6, 5}, {4, 2, 3, 5});
  EXPECT_EQ(r.operands[0], (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(r.results[0], (std::vector<int64_t>{0, 1, -1, 2}));
  EXPECT_EQ(r.factorSizes, (std::vector<int64_t>{4, 2, 5}));
  EXPECT_EQ(r.str(), "([i, j, k]) -> ([i, j, _, k]) reduction={} joint={sum, "
                     "avg, max, min} linear={} even={j}");
  // [6, 4] -> [2, 12]: the outer dims share gcd(6, 2) = 2.
  ShardingRule g = rules::reshape({6, 4}, {2, 12});
  EXPECT_EQ(g.factorSizes, (std::vector<int64_t>{2}));
  EXPECT_EQ(g.operands[0], (std::vector<int64_t>{0, -1}));
  EXPECT_EQ(g.results[0], (std::vector<int64_t>{0, -1}));
  // Coprime outer dims share nothing.
  ShardingRule c = rules::reshape({3, 4}, {4, 3});
  EXPECT_TRUE(c.factorSizes.empty());
}

TEST(Strategy, ReshapeKeepsAShardOnlyWhenTheOuterDimSplitsEvenly) {
  auto infer = [](const std::vector<int64_t> &in,
                  const std::vector<int64_t> &out, const Placements &p,
                  const std::vector<int64_t> &mesh) {
    return chooseStrategy(rules::reshape(in, out), {in}, {p}, out, 4, mesh,
                          nullptr);
  };
  // Merge [B, H] -> [B*H]: B = 8 splits over 4 ranks, B = 6 does not.
  EXPECT_EQ(infer({8, 6}, {48}, {S(0)}, {4}).result, (Placements{S(0)}));
  ShardingStrategy uneven = infer({6, 4}, {24}, {S(0)}, {4});
  EXPECT_EQ(uneven.result, (Placements{R}));
  EXPECT_EQ(uneven.operands[0], (Placements{R}));
  EXPECT_GT(uneven.cost, 0);
  // Split [B*H] -> [B, H] keeps S(0) on the new dim 0.
  EXPECT_EQ(infer({48}, {8, 6}, {S(0)}, {4}).result, (Placements{S(0)}));
  EXPECT_EQ(infer({24}, {6, 4}, {S(0)}, {4}).result, (Placements{R}));
  // [8, 6] -> [2, 4, 6] keeps S(0) on 2 ranks, not on 4.
  EXPECT_EQ(infer({8, 6}, {2, 4, 6}, {S(0)}, {2}).result, (Placements{S(0)}));
  // On 4 ranks an all_to_all onto the 6 columns beats gathering the rows.
  EXPECT_EQ(infer({8, 6}, {2, 4, 6}, {S(0)}, {4}).result, (Placements{S(2)}));
  // Nested over two axes: the product of their sizes must divide B.
  EXPECT_EQ(infer({8, 6}, {48}, {S(0), S(0)}, {2, 2}).result,
            (Placements{S(0), S(0)}));
  EXPECT_EQ(infer({6, 4}, {24}, {S(0), S(0)}, {2, 2}).result,
            (Placements{S(0), R}));
  ShardingRule merge = rules::reshape({6, 4}, {24});
  EXPECT_TRUE(isLocalStrategy(merge, {{S(0), R}}, {S(0), R}, {2, 2}));
  EXPECT_FALSE(isLocalStrategy(merge, {{S(0), S(0)}}, {S(0), S(0)}, {2, 2}));
  EXPECT_FALSE(isLocalStrategy(merge, {{S(0)}}, {S(0)}, {4}));
}
