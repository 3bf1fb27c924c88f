//===- ShardingRule.cpp - factor-based sharding rules and strategies -----===//
#include "dtorch/ShardingRule.h"

#include "dtorch/Redistribute.h"

#include <algorithm>
#include <limits>

namespace dtorch {

bool ShardingRule::isReductionFactor(int64_t f) const {
  for (const auto &r : results)
    if (std::find(r.begin(), r.end(), f) != r.end())
      return false;
  for (const auto &o : operands)
    if (std::find(o.begin(), o.end(), f) != o.end())
      return true;
  return false;
}

static std::string factorName(int64_t f) {
  if (f < 0)
    return "_";
  std::string s(1, char('i' + f % 18));
  if (f >= 18)
    s += std::to_string(f / 18);
  return s;
}

static std::string factorLists(const std::vector<std::vector<int64_t>> &ls) {
  std::string s = "(";
  for (size_t k = 0; k < ls.size(); ++k) {
    s += k ? ", [" : "[";
    for (size_t d = 0; d < ls[k].size(); ++d)
      s += (d ? ", " : "") + factorName(ls[k][d]);
    s += "]";
  }
  return s + ")";
}

std::string ShardingRule::str() const {
  std::string s = factorLists(operands) + " -> " + factorLists(results);
  std::string red;
  for (size_t f = 0; f < factorSizes.size(); ++f)
    if (isReductionFactor(f))
      red += (red.empty() ? "" : ", ") + factorName(f);
  s += " reduction={" + red + "}";
  if (!red.empty())
    s += std::string(":") + reduceOpName(reductionOp);
  s += " joint={";
  for (size_t i = 0; i < jointPartial.size(); ++i)
    s += std::string(i ? ", " : "") + reduceOpName(jointPartial[i]);
  s += "} linear={";
  for (size_t i = 0; i < linearOperands.size(); ++i)
    s += (i ? ", " : "") + std::to_string(linearOperands[i]);
  return s + "}";
}

namespace {

struct AxisChoice {
  enum class Kind { Replicate, Factor, Joint, Linear } kind;
  int64_t factor = -1;         // Factor
  ReduceOp op = ReduceOp::Sum; // Joint, Linear
  int64_t operand = -1;        // Linear
};

std::vector<AxisChoice> axisChoices(const ShardingRule &rule) {
  using K = AxisChoice::Kind;
  std::vector<AxisChoice> cs;
  for (size_t f = 0; f < rule.factorSizes.size(); ++f)
    cs.push_back({K::Factor, (int64_t)f});
  cs.push_back({K::Replicate});
  for (ReduceOp op : rule.jointPartial)
    cs.push_back({K::Joint, -1, op});
  for (int64_t k : rule.linearOperands)
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg})
      cs.push_back({K::Linear, -1, op, k});
  return cs;
}

int64_t dimOf(const std::vector<int64_t> &factors, int64_t f) {
  auto it = std::find(factors.begin(), factors.end(), f);
  return it == factors.end() ? -1 : it - factors.begin();
}

/// Sets the placements on mesh axis `a` of every operand and the result that
/// choice `c` implies.
void applyChoice(const ShardingRule &rule, const AxisChoice &c, size_t a,
                 ShardingStrategy &s) {
  using K = AxisChoice::Kind;
  for (size_t k = 0; k < rule.operands.size(); ++k) {
    Placement p = Placement::replicate();
    if (c.kind == K::Factor) {
      int64_t d = dimOf(rule.operands[k], c.factor);
      if (d >= 0)
        p = Placement::shard(d);
    } else if (c.kind == K::Joint ||
               (c.kind == K::Linear && c.operand == (int64_t)k)) {
      p = Placement::partial(c.op);
    }
    s.operands[k][a] = p;
  }
  Placement r = Placement::replicate();
  if (c.kind == K::Factor) {
    int64_t d = rule.results.empty() ? -1 : dimOf(rule.results[0], c.factor);
    if (d >= 0)
      r = Placement::shard(d);
    else if (rule.isReductionFactor(c.factor))
      r = Placement::partial(rule.reductionOp);
  } else if (c.kind != K::Replicate) {
    r = Placement::partial(c.op);
  }
  s.result[a] = r;
}

} // namespace

ShardingStrategy
chooseStrategy(const ShardingRule &rule,
               const std::vector<std::vector<int64_t>> &operandShapes,
               const std::vector<Placements> &operandPlacements,
               const std::vector<int64_t> &resultShape, int64_t elementBytes,
               const std::vector<int64_t> &meshShape,
               const Placements *requiredResult) {
  using K = AxisChoice::Kind;
  const size_t nAxes = meshShape.size();
  const size_t nOps = rule.operands.size();
  std::vector<AxisChoice> choices = axisChoices(rule);
  std::vector<size_t> pick(nAxes, 0);

  double baseWork = 1;
  for (int64_t s : rule.factorSizes)
    baseWork *= (double)std::max<int64_t>(s, 1);

  ShardingStrategy best;
  double bestCost = std::numeric_limits<double>::infinity();
  double bestWork = std::numeric_limits<double>::infinity();
  int bestChanges = std::numeric_limits<int>::max();
  ShardingStrategy cand;
  cand.operands.assign(nOps, Placements(nAxes));
  cand.result.assign(nAxes, Placement::replicate());
  while (true) {
    double work = baseWork;
    for (size_t a = 0; a < nAxes; ++a) {
      applyChoice(rule, choices[pick[a]], a, cand);
      if (choices[pick[a]].kind == K::Factor)
        work /= (double)meshShape[a];
    }
    double cost = 0;
    int changes = 0;
    for (size_t k = 0; k < nOps; ++k) {
      cost += redistributeCost(operandShapes[k], elementBytes, meshShape,
                               operandPlacements[k], cand.operands[k]);
      for (size_t a = 0; a < nAxes; ++a)
        changes += cand.operands[k][a] != operandPlacements[k][a];
    }
    if (requiredResult)
      cost += redistributeCost(resultShape, elementBytes, meshShape,
                               cand.result, *requiredResult);
    cand.cost = cost;
    // Communication first; then leaving operands as they are (even a free
    // local slice copies data); then less local work.
    bool better = cost < bestCost - 1e-9 ||
                  (cost <= bestCost + 1e-9 &&
                   (changes < bestChanges ||
                    (changes == bestChanges && work < bestWork)));
    if (better) {
      bestCost = cost;
      bestChanges = changes;
      bestWork = work;
      best = cand;
    }
    size_t a = 0;
    while (a < nAxes && ++pick[a] == choices.size())
      pick[a++] = 0;
    if (a == nAxes)
      break;
  }
  return best;
}

bool isLocalStrategy(const ShardingRule &rule,
                     const std::vector<Placements> &operandPlacements,
                     const Placements &result) {
  const size_t nAxes = result.size();
  ShardingStrategy cand;
  cand.operands.assign(rule.operands.size(), Placements(nAxes));
  cand.result.assign(nAxes, Placement::replicate());
  std::vector<AxisChoice> choices = axisChoices(rule);
  for (size_t a = 0; a < nAxes; ++a) {
    bool found = false;
    for (const AxisChoice &c : choices) {
      applyChoice(rule, c, a, cand);
      bool same = cand.result[a] == result[a];
      for (size_t k = 0; same && k < rule.operands.size(); ++k)
        same = cand.operands[k][a] == operandPlacements[k][a];
      if (same) {
        found = true;
        break;
      }
    }
    if (!found)
      return false;
  }
  return true;
}

} // namespace dtorch
