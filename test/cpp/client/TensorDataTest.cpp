// assemblePieces reduces Partial axes with the runtime's reduction, so a
// fetched Partial value equals what an all_reduce of the pieces gives on the
// workers, NaN included (max/min propagate NaN as torch does).
#include "TensorData.h"

#include "dtorch/runtime/FakeCollectives.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

namespace dtorch::client {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

rt::Tensor floats(const Shape &shape, const std::vector<float> &values) {
  rt::Tensor t = rt::Tensor::empty(wire::F32, shape);
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

std::vector<float> valuesOf(const rt::Tensor &t) {
  return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel());
}

// Element i equal, NaN matching NaN.
void expectSameFloats(const std::vector<float> &got,
                      const std::vector<float> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i << ": " << got[i];
    else
      EXPECT_EQ(got[i], want[i]) << "at " << i;
  }
}

// What the workers' all_reduce (fake collective backend) gives for `pieces`.
rt::Tensor allReduced(const std::vector<rt::Tensor> &pieces, ReduceOp op) {
  int n = static_cast<int>(pieces.size());
  rt::FakeCollectiveHub hub(n, std::chrono::seconds(5));
  std::vector<rt::Tensor> outs(n);
  std::vector<std::thread> threads;
  rt::Group group;
  for (int r = 0; r < n; ++r)
    group.push_back(r);
  for (int r = 0; r < n; ++r) {
    outs[r] = rt::Tensor::empty(pieces[r].dtype(), pieces[r].shape());
    threads.emplace_back([&, r] {
      hub.communicator(r)->all_reduce(pieces[r], outs[r], group,
                                      rt::parseReduceOp(reduceOpName(op)));
    });
  }
  for (auto &t : threads)
    t.join();
  return outs[0];
}

// Three ranks, a NaN on every rank, one column without NaN.
const std::vector<std::vector<float>> kPieces = {
    {1, 5, kNaN, 2}, {kNaN, 3, 0, 7}, {2, kNaN, 1, -1}};

std::vector<rt::Tensor> piecesOf(const std::vector<std::vector<float>> &v) {
  std::vector<rt::Tensor> pieces;
  for (const auto &values : v)
    pieces.push_back(floats({4}, values));
  return pieces;
}

TEST(AssemblePieces, PartialMaxAndMinPropagateNaNFromEveryRank) {
  for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
    SCOPED_TRACE(reduceOpName(op));
    std::vector<rt::Tensor> pieces = piecesOf(kPieces);
    rt::Tensor full =
        assemblePieces(pieces, {4}, wire::F32, {3}, {Placement::partial(op)});
    float last = op == ReduceOp::Max ? 7 : -1;
    expectSameFloats(valuesOf(full), {kNaN, kNaN, kNaN, last});
    expectSameFloats(valuesOf(full), valuesOf(allReduced(pieces, op)));
  }
}

TEST(AssemblePieces, PartialSumAndAvgMatchTheCollectives) {
  std::vector<rt::Tensor> pieces =
      piecesOf({{1, 2, 3, 4}, {10, 20, 30, kNaN}, {100, 200, 300, 400}});
  rt::Tensor sum = assemblePieces(pieces, {4}, wire::F32, {3},
                                  {Placement::partial(ReduceOp::Sum)});
  expectSameFloats(valuesOf(sum), {111, 222, 333, kNaN});
  expectSameFloats(valuesOf(sum), valuesOf(allReduced(pieces, ReduceOp::Sum)));
  rt::Tensor avg = assemblePieces(pieces, {4}, wire::F32, {3},
                                  {Placement::partial(ReduceOp::Avg)});
  expectSameFloats(valuesOf(avg), valuesOf(allReduced(pieces, ReduceOp::Avg)));
  expectSameFloats(valuesOf(avg), {37, 74, 111, kNaN});
}

TEST(AssemblePieces, ShardedAxisNextToAPartialMaxAxis) {
  // Mesh 2x2, [S(0), P(max)] of a 4x1 tensor: mesh row i holds rows 2i, 2i+1;
  // the two columns of the mesh hold candidates for the max.
  std::vector<rt::Tensor> pieces = {
      floats({2, 1}, {1, kNaN}), floats({2, 1}, {3, 4}), floats({2, 1}, {5, 6}),
      floats({2, 1}, {kNaN, 0})};
  rt::Tensor full =
      assemblePieces(pieces, {4, 1}, wire::F32, {2, 2},
                     {Placement::shard(0), Placement::partial(ReduceOp::Max)});
  expectSameFloats(valuesOf(full), {3, kNaN, kNaN, 6});
}

TEST(AssemblePieces, ScatterThenAssembleIsTheIdentityForEveryPlacement) {
  rt::Tensor value = floats({3, 2}, {1, kNaN, -2, 4, 0.5f, 8});
  for (ReduceOp op :
       {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
    SCOPED_TRACE(reduceOpName(op));
    Placements placements = {Placement::partial(op), Placement::shard(0)};
    std::vector<rt::Tensor> pieces = scatterPieces(value, {2, 2}, placements);
    rt::Tensor back =
        assemblePieces(pieces, {3, 2}, wire::F32, {2, 2}, placements);
    expectSameFloats(valuesOf(back), valuesOf(value));
  }
}

TEST(AssemblePieces, PiecesOfTheWrongShapeAreAnError) {
  std::vector<rt::Tensor> pieces = {floats({2}, {1, 2}),
                                    floats({3}, {1, 2, 3})};
  EXPECT_THROW(assemblePieces(pieces, {2}, wire::F32, {2},
                              {Placement::partial(ReduceOp::Max)}),
               DTorchError);
}

} // namespace
} // namespace dtorch::client
