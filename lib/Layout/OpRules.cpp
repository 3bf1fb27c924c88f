//===- OpRules.cpp - the sharding rules of every op family ---------------===//
#include "dtorch/OpRules.h"
#include "dtorch/OpRegistry.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <string_view>
#include <unordered_map>

namespace dtorch::rules {
namespace {

Shape iota(int64_t n) {
  Shape v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = i;
  return v;
}

const std::vector<ReduceOp> kAll = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max,
                                    ReduceOp::Min};
const std::vector<ReduceOp> kLinear = {ReduceOp::Sum, ReduceOp::Avg};

int64_t addFactor(ShardingRule &rule, int64_t size) {
  rule.factorSizes.push_back(size);
  return static_cast<int64_t>(rule.factorSizes.size()) - 1;
}

} // namespace

const ElementwiseTraits *elementwiseTraits(std::string_view op, size_t arity) {
  // The partial pass-through of each elementwise op is declared with the op
  // in ODS (jointPartial, linearOperands, floatOnly) and reaches us through
  // the generated registry. Asked once per recorded elementwise op: one
  // hashed lookup, keyed by views of the registry's static names.
  struct Entry {
    ElementwiseTraits traits;
    int numOperands; // -1: any
  };
  static const std::unordered_map<std::string_view, Entry> table = [] {
    std::unordered_map<std::string_view, Entry> t;
    for (const OpInfo &info : opRegistry()) {
      std::string_view family = info.family;
      if (family == "unary" || family == "binary" || family == "compare" ||
          family == "where" || family == "cast" || family == "triangle")
        t[info.name] =
            Entry{ElementwiseTraits{info.jointPartial, info.linearOperands,
                                    info.floatOnly},
                  info.numOperands};
    }
    return t;
  }();
  auto it = table.find(op);
  if (it == table.end())
    return nullptr;
  if (it->second.numOperands >= 0 &&
      static_cast<size_t>(it->second.numOperands) != arity)
    return nullptr;
  return &it->second.traits;
}

ShardingRule elementwise(const Shape &shape, size_t numOperands,
                         const ElementwiseTraits &traits) {
  ShardingRule rule;
  rule.factorSizes = shape;
  rule.operands.assign(numOperands, iota(shape.size()));
  rule.results = {iota(shape.size())};
  rule.jointPartial = traits.joint;
  rule.linearOperands = traits.linear;
  return rule;
}

ShardingRule creation(const Shape &shape) {
  return elementwise(shape, 0, ElementwiseTraits{});
}

ShardingRule pointToPoint(const Shape &shape, size_t numOperands) {
  return elementwise(shape, numOperands,
                     ElementwiseTraits{{ReduceOp::Sum, ReduceOp::Avg,
                                        ReduceOp::Max, ReduceOp::Min},
                                       {},
                                       false});
}

// Factors: the position dim (dim 0 of input, counts and result), then the
// input's dims after the slot rows; the slot rows and the counts' segments
// have none (never split: the exchange needs them whole on each rank).
ShardingRule allToAllV(const Shape &input) {
  ShardingRule rule;
  rule.factorSizes.push_back(input[0]);
  std::vector<int64_t> dims = {0, -1};
  for (size_t d = 2; d < input.size(); ++d) {
    dims.push_back(static_cast<int64_t>(rule.factorSizes.size()));
    rule.factorSizes.push_back(input[d]);
  }
  rule.operands = {dims, {0, -1}};
  rule.results = {dims};
  rule.linearOperands = {0};
  rule.evenFactors = {0};
  return rule;
}

// Factors: i (rows), j (cols), k (contracted), b (batch).
ShardingRule matmul(const Shape &a, const Shape &b) {
  ShardingRule rule;
  rule.factorSizes = {a[0], b[1], a[1]};
  rule.operands = {{0, 2}, {2, 1}};
  rule.results = {{0, 1}};
  rule.reductionOp = ReduceOp::Sum;
  rule.linearOperands = {0, 1};
  return rule;
}

// Factors: the batch dims, then M, N and the contracted K.
ShardingRule bmm(const Shape &a, const Shape &b) {
  ShardingRule rule;
  int64_t nb = static_cast<int64_t>(a.size()) - 2;
  rule.factorSizes.assign(a.begin(), a.end() - 2);
  rule.factorSizes.insert(rule.factorSizes.end(),
                          {a[nb], b[nb + 1], a[nb + 1]});
  std::vector<int64_t> lhs = iota(nb), rhs = iota(nb), res = iota(nb);
  lhs.insert(lhs.end(), {nb, nb + 2});
  rhs.insert(rhs.end(), {nb + 2, nb + 1});
  res.insert(res.end(), {nb, nb + 1});
  rule.operands = {lhs, rhs};
  rule.results = {res};
  rule.reductionOp = ReduceOp::Sum;
  rule.linearOperands = {0, 1};
  return rule;
}

// A sharded mean divides by the global count on every rank, so the partial
// results add up: its reduction is a sum, like sum's.
ShardingRule reduction(const Shape &input, const std::vector<int64_t> &dims,
                       bool keepdim, bool isMax) {
  ShardingRule rule;
  rule.factorSizes = input;
  rule.operands = {iota(input.size())};
  Shape res;
  for (int64_t d = 0; d < (int64_t)input.size(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced)
      res.push_back(d);
    else if (keepdim)
      res.push_back(-1);
  }
  rule.results = {res};
  rule.reductionOp = isMax ? ReduceOp::Max : ReduceOp::Sum;
  rule.jointPartial = isMax ? std::vector<ReduceOp>{ReduceOp::Max} : kLinear;
  return rule;
}

// Dims are grouped into the shortest runs with equal products (size-1 dims
// belong to none). A 1:1 run keeps its factor, uneven splits included. In a
// split or merge ([B, H] -> [B*H], [B*H] -> [B, H], [6, 4] -> [2, 12]) only
// the outer dims can share a factor: splitting the group's elements into k
// contiguous blocks is Shard of the input's outer dim and Shard of the
// result's outer dim exactly when k divides both outer extents. So they share
// an even factor of size gcd(outer in, outer out): the strategy code shards
// it only on mesh axes whose sizes multiply to a divisor of it; otherwise the
// outer dim is gathered first, and explain() shows that redistribution.
ShardingRule reshape(const Shape &in, const Shape &out) {
  ShardingRule rule;
  rule.operands = {Shape(in.size(), -1)};
  rule.results = {Shape(out.size(), -1)};
  rule.jointPartial = kAll;
  int64_t numel = 1;
  for (int64_t s : in)
    numel *= s;
  if (numel == 0)
    return rule;
  size_t i = 0, j = 0;
  while (i < in.size() || j < out.size()) {
    if (i < in.size() && in[i] == 1) {
      ++i;
      continue;
    }
    if (j < out.size() && out[j] == 1) {
      ++j;
      continue;
    }
    if (i == in.size() || j == out.size())
      break;
    size_t i0 = i, j0 = j;
    int64_t pi = in[i++], po = out[j++];
    while (pi != po) {
      if (pi < po)
        pi *= in[i++];
      else
        po *= out[j++];
    }
    if (i - i0 == 1 && j - j0 == 1) {
      int64_t f = addFactor(rule, in[i0]);
      rule.operands[0][i0] = rule.results[0][j0] = f;
    } else if (int64_t g = std::gcd(in[i0], out[j0]); g > 1) {
      int64_t f = addFactor(rule, g);
      rule.operands[0][i0] = rule.results[0][j0] = f;
      rule.evenFactors.push_back(f);
    }
  }
  return rule;
}

ShardingRule transpose(const Shape &input, const std::vector<int64_t> &perm) {
  ShardingRule rule;
  rule.factorSizes = input;
  rule.operands = {iota(input.size())};
  rule.results = {perm};
  rule.jointPartial = kAll;
  return rule;
}

// Result dims aligned with an input dim of the same extent share its factor;
// broadcast dims (new, or extent 1 in the input) are result-only factors, so
// sharding them slices the broadcast value locally.
ShardingRule broadcastTo(const Shape &in, const Shape &out) {
  ShardingRule rule;
  rule.factorSizes = out;
  rule.results = {iota(out.size())};
  rule.operands = {Shape(in.size(), -1)};
  size_t lead = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] == out[lead + d])
      rule.operands[0][d] = lead + d;
  rule.jointPartial = kAll; // copying elements commutes with every reduction
  return rule;
}

// The reduced dim is whole on every rank (an index is not a partial value);
// the other dims keep their factors.
ShardingRule argReduction(const Shape &input, int64_t dim, bool keepdim) {
  ShardingRule rule;
  rule.factorSizes = input;
  rule.operands = {iota(input.size())};
  rule.operands[0][dim] = -1;
  Shape res;
  for (int64_t d = 0; d < (int64_t)input.size(); ++d)
    if (d != dim)
      res.push_back(d);
    else if (keepdim)
      res.push_back(-1);
  rule.results = {res};
  return rule;
}

// The searched dim is whole on every rank (and becomes k indices); the other
// dims keep their factors.
ShardingRule topk(const Shape &input, int64_t dim, int64_t k) {
  ShardingRule rule;
  rule.factorSizes = input;
  rule.operands = {iota(input.size())};
  rule.results = {iota(input.size())};
  rule.operands[0][dim] = rule.results[0][dim] = -1;
  (void)k;
  return rule;
}

// A dim read whole (offset 0, stride 1, full size) keeps its factor; a cut
// dim is whole on every rank.
ShardingRule slice(const Shape &input, const Shape &offsets, const Shape &sizes,
                   const Shape &strides) {
  ShardingRule rule;
  rule.operands = {Shape(input.size(), -1)};
  rule.results = {Shape(input.size(), -1)};
  rule.jointPartial = kAll;
  for (size_t d = 0; d < input.size(); ++d)
    if (offsets[d] == 0 && strides[d] == 1 && sizes[d] == input[d]) {
      int64_t f = addFactor(rule, input[d]);
      rule.operands[0][d] = rule.results[0][d] = f;
    }
  return rule;
}

ShardingRule concat(const std::vector<Shape> &inputs, int64_t dim) {
  ShardingRule rule;
  const Shape &first = inputs.at(0);
  Shape factorOf(first.size(), -1);
  for (size_t d = 0; d < first.size(); ++d)
    if ((int64_t)d != dim)
      factorOf[d] = addFactor(rule, first[d]);
  rule.operands.assign(inputs.size(), factorOf);
  rule.results = {factorOf};
  rule.jointPartial = kAll;
  return rule;
}

// result[p] = input[p with p[dim] = index[p]]: the index and the result share
// `dim` and every dim where the input's extent is the index's (the input
// shares those too); a dim where the index is shorter is whole everywhere.
// Gathering is linear in the input.
ShardingRule gather(const Shape &input, const Shape &index, int64_t dim) {
  ShardingRule rule;
  rule.operands = {Shape(input.size(), -1), Shape(index.size(), -1)};
  rule.results = {Shape(index.size(), -1)};
  for (size_t d = 0; d < index.size(); ++d) {
    // The kernel reads the input at the index's local position on every dim
    // but `dim`: those dims may be split only where both extents agree (the
    // pieces then line up); a shorter index stays whole there.
    if ((int64_t)d != dim && input[d] != index[d])
      continue;
    int64_t f = addFactor(rule, index[d]);
    rule.operands[1][d] = rule.results[0][d] = f;
    if ((int64_t)d != dim)
      rule.operands[0][d] = f;
  }
  rule.linearOperands = {0};
  return rule;
}

// Rows of `input` along `dim` picked by a 1-D index. The picked dim of the
// input is a reduction factor: a rank holding part of it looks up the rows
// it has and writes zeros for the others, so the pieces add up (P(sum)).
ShardingRule indexSelect(const Shape &input, const Shape &index, int64_t dim) {
  ShardingRule rule;
  rule.operands = {Shape(input.size(), -1), Shape(1, -1)};
  rule.results = {Shape(input.size(), -1)};
  for (size_t d = 0; d < input.size(); ++d) {
    if ((int64_t)d == dim)
      continue;
    int64_t f = addFactor(rule, input[d]);
    rule.operands[0][d] = rule.results[0][d] = f;
  }
  int64_t picked = addFactor(rule, index[0]);
  rule.operands[1][0] = rule.results[0][dim] = picked;
  rule.operands[0][dim] = addFactor(rule, input[dim]); // reduction factor
  rule.reductionOp = ReduceOp::Sum;
  rule.linearOperands = {0};
  return rule;
}

// out = input; out[p with p[dim] = index[p]] += src[p]. Dims other than
// `dim` where all three extents agree keep a shared factor; the others are
// whole everywhere.
ShardingRule scatterAdd(const Shape &input, const Shape &index,
                        const Shape &src, int64_t dim) {
  ShardingRule rule;
  rule.operands = {Shape(input.size(), -1), Shape(index.size(), -1),
                   Shape(src.size(), -1)};
  rule.results = {Shape(input.size(), -1)};
  for (size_t d = 0; d < input.size(); ++d) {
    // The kernel adds src at the index's local position into the input's:
    // a dim may be split only where all three extents agree.
    if ((int64_t)d == dim || index[d] != input[d] || src[d] != input[d])
      continue;
    int64_t f = addFactor(rule, input[d]);
    rule.operands[0][d] = rule.results[0][d] = f;
    rule.operands[1][d] = rule.operands[2][d] = f;
  }
  return rule;
}

} // namespace dtorch::rules
