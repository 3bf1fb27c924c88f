//===- OpRules.cpp - the sharding rules of every op family ---------------===//
#include "dtorch/OpRules.h"

#include <algorithm>
#include <map>
#include <string>

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

} // namespace

const ElementwiseTraits *elementwiseTraits(std::string_view op, size_t arity) {
  // a+b and a-b are additive in both operands at once; a*b is linear in each
  // operand; a/b in its numerator; -a in a; max/min commute with themselves.
  static const std::map<std::string, ElementwiseTraits, std::less<>> binary = {
      {"add", {kLinear, {}}},
      {"sub", {kLinear, {}}},
      {"mul", {{}, {0, 1}}},
      {"div", {{}, {0}}},
      {"maximum", {{ReduceOp::Max}, {}}},
      {"minimum", {{ReduceOp::Min}, {}}},
      {"pow", {{}, {}}},
  };
  static const std::map<std::string, ElementwiseTraits, std::less<>> unary = {
      {"neg", {{}, {0}}},
      {"abs", {{}, {}}},
      {"relu", {{}, {}}},
      {"exp", {{}, {}, true}},
      {"log", {{}, {}, true}},
      {"sqrt", {{}, {}, true}},
      {"rsqrt", {{}, {}, true}},
      {"tanh", {{}, {}, true}},
      {"sigmoid", {{}, {}, true}},
      {"gelu", {{}, {}, true}},
      {"silu", {{}, {}, true}},
      {"sin", {{}, {}, true}},
      {"cos", {{}, {}, true}},
      // Element type conversion is monotone: max/min commute with it.
      {"cast", {{ReduceOp::Max, ReduceOp::Min}, {}}},
  };
  const auto &table = arity == 2 ? binary : unary;
  auto it = table.find(op);
  return (arity == 1 || arity == 2) && it != table.end() ? &it->second
                                                         : nullptr;
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

ShardingRule bmm(const Shape &a, const Shape &b) {
  ShardingRule rule;
  rule.factorSizes = {a[0], a[1], b[2], a[2]};
  rule.operands = {{0, 1, 3}, {0, 3, 2}};
  rule.results = {{0, 1, 2}};
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
      rule.operands[0][i0] = rule.factorSizes.size();
      rule.results[0][j0] = rule.factorSizes.size();
      rule.factorSizes.push_back(in[i0]);
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

} // namespace dtorch::rules
