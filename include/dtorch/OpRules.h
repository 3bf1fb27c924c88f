//===- OpRules.h - the sharding rules of every op family ----------*- C++
//-*-===//
//
// MLIR-free builders of each op family's ShardingRule. The dialect's ops
// return them from ShardingRuleOpInterface::getShardingRule, and the client
// core calls them at op-call time to infer result placements, so both sides
// always agree.
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_OPRULES_H
#define DTORCH_OPRULES_H

#include "dtorch/ShardingRule.h"

#include <string_view>

namespace dtorch::rules {

using Shape = std::vector<int64_t>;

/// How the partial placements pass through an elementwise op.
struct ElementwiseTraits {
  std::vector<ReduceOp> joint;
  std::vector<int64_t> linear;
  bool floatOnly = false; // needs a float element type
};
/// Traits of a unary or binary elementwise op by name; null when unknown.
const ElementwiseTraits *elementwiseTraits(std::string_view op, size_t arity);

/// Operands and result share `shape` dim by dim.
ShardingRule elementwise(const Shape &shape, size_t numOperands,
                         const ElementwiseTraits &traits);
/// Creation ops (full, random, constant): only a result.
ShardingRule creation(const Shape &shape);
/// Point-to-point moves (transfer, send: one operand; recv: none): every
/// rank's piece moves whole, so the operand and the result share every dim
/// and a partial of any reduction stays one (each summand moves as it is; a
/// received piece is the summand it was).
ShardingRule pointToPoint(const Shape &shape, size_t numOperands);
/// dtensor.all_to_all_v on an input [n, rows, ...] and counts [n, segments]:
/// dim 0 (the positions of the exchange's axis) shared by all three, the
/// rows and segments never split, the other dims pass through; linear in
/// the input (a partial sum stays one).
ShardingRule allToAllV(const Shape &input);
ShardingRule matmul(const Shape &lhs, const Shape &rhs);
ShardingRule bmm(const Shape &lhs, const Shape &rhs);
/// sum/mean (reduction sum, joint sum/avg) and max (reduction max, joint max).
ShardingRule reduction(const Shape &input, const std::vector<int64_t> &dims,
                       bool keepdim, bool isMax);
/// Runs of dims with equal products; 1:1 runs keep their factor.
ShardingRule reshape(const Shape &input, const Shape &result);
ShardingRule transpose(const Shape &input, const std::vector<int64_t> &perm);
/// numpy broadcasting of `input` to `result` (trailing dims aligned).
ShardingRule broadcastTo(const Shape &input, const Shape &result);

/// argmax/argmin over one dim: the dim is whole on every rank.
ShardingRule argReduction(const Shape &input, int64_t dim, bool keepdim);
/// topk_indices along `dim`: the dim is whole on every rank.
ShardingRule topk(const Shape &input, int64_t dim, int64_t k);
/// A strided box: whole dims keep their factor.
ShardingRule slice(const Shape &input, const Shape &offsets, const Shape &sizes,
                   const Shape &strides);
/// Joining along `dim`: the other dims keep their factors.
ShardingRule concat(const std::vector<Shape> &inputs, int64_t dim);
/// torch.gather: index and result share every dim.
ShardingRule gather(const Shape &input, const Shape &index, int64_t dim);
/// index_select/embedding: a sharded picked dim gives Partial(sum).
ShardingRule indexSelect(const Shape &input, const Shape &index, int64_t dim);
/// scatter_add: dims other than `dim` with equal extents keep their factor.
ShardingRule scatterAdd(const Shape &input, const Shape &index,
                        const Shape &src, int64_t dim);

} // namespace dtorch::rules

#endif // DTORCH_OPRULES_H
