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
  s += "}";
  if (!evenFactors.empty()) {
    s += " even={";
    for (size_t i = 0; i < evenFactors.size(); ++i)
      s += (i ? ", " : "") + factorName(evenFactors[i]);
    s += "}";
  }
  return s;
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

/// True when every even factor of the rule is split evenly by the mesh axes
/// whose choice shards it.
bool evenFactorsDivide(const ShardingRule &rule,
                       const std::vector<const AxisChoice *> &perAxis,
                       const std::vector<int64_t> &meshShape) {
  for (int64_t f : rule.evenFactors) {
    int64_t parts = 1;
    for (size_t a = 0; a < perAxis.size(); ++a)
      if (perAxis[a]->kind == AxisChoice::Kind::Factor &&
          perAxis[a]->factor == f)
        parts *= meshShape[a];
    if (rule.factorSizes[f] % parts != 0)
      return false;
  }
  return true;
}

/// Bytes one rank would send to reduce the Partial axes of the candidate's
/// result with reduce_scatters (the cheapest way to resolve a partial). The
/// piece is the result's, counting only the shards an operand already had on
/// that axis: a shard made by slicing a replicated operand is free either
/// way, so it must not make the pending reduction look cheaper.
double partialResultCost(const ShardingStrategy &cand,
                         const std::vector<Placements> &operandPlacements,
                         const std::vector<int64_t> &shape,
                         int64_t elementBytes,
                         const std::vector<int64_t> &meshShape) {
  double local = (double)elementBytes;
  for (int64_t s : shape)
    local *= (double)s;
  bool anyPartial = false;
  for (size_t a = 0; a < cand.result.size(); ++a) {
    anyPartial |= cand.result[a].isPartial();
    if (!cand.result[a].isShard())
      continue;
    bool kept = false;
    for (size_t k = 0; k < operandPlacements.size(); ++k)
      kept |= operandPlacements[k][a].isShard() &&
              cand.operands[k][a] == operandPlacements[k][a];
    if (kept)
      local /= (double)meshShape[a];
  }
  if (!anyPartial)
    return 0;
  double cost = 0;
  for (size_t a = 0; a < cand.result.size(); ++a)
    if (cand.result[a].isPartial()) {
      double n = (double)meshShape[a];
      cost += (n - 1) / n * local;
      local /= n;
    }
  return cost;
}

/// Mesh axes that shard a tensor dim some earlier axis already shards.
int nestedSplits(const Placements &ps) {
  int n = 0;
  for (size_t a = 0; a < ps.size(); ++a)
    for (size_t b = 0; b < a; ++b)
      if (ps[a].isShard() && ps[b].isShard(ps[a].dim)) {
        ++n;
        break;
      }
  return n;
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
  int bestNested = std::numeric_limits<int>::max();
  int bestTrivial = std::numeric_limits<int>::max();
  ShardingStrategy cand;
  cand.operands.assign(nOps, Placements(nAxes));
  cand.result.assign(nAxes, Placement::replicate());
  std::vector<const AxisChoice *> perAxis(nAxes);
  auto advance = [&] {
    size_t a = 0;
    while (a < nAxes && ++pick[a] == choices.size())
      pick[a++] = 0;
    return a < nAxes;
  };
  while (true) {
    for (size_t a = 0; a < nAxes; ++a)
      perAxis[a] = &choices[pick[a]];
    if (!rule.evenFactors.empty() &&
        !evenFactorsDivide(rule, perAxis, meshShape)) {
      if (!advance())
        break;
      continue;
    }
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
    // With no required result (the client's inference), a Partial result
    // only defers communication: a fetch or any non-linear use reduces it.
    // Rank strategies with that reduction added, so that a strategy does not
    // win by leaving its communication to the next op.
    double score = cost;
    if (!requiredResult)
      score += partialResultCost(cand, operandPlacements, resultShape,
                                 elementBytes, meshShape);
    int nested = nestedSplits(cand.result);
    // A shard or partial on a mesh axis of size 1 saves nothing and leaves
    // a (one-rank) collective for whoever needs the value replicated.
    int trivial = 0;
    for (size_t a = 0; a < nAxes; ++a)
      trivial += meshShape[a] == 1 && !cand.result[a].isReplicate();
    // Communication first; then leaving operands as they are (even a free
    // local slice copies data); then less local work; then fewer tensor dims
    // split by several mesh axes (a nest constrains later redistributions);
    // then fewer shards on axes of size 1.
    bool better = score < bestCost - 1e-9 ||
                  (score <= bestCost + 1e-9 &&
                   (changes < bestChanges ||
                    (changes == bestChanges &&
                     (work < bestWork ||
                      (work == bestWork &&
                       (nested < bestNested ||
                        (nested == bestNested && trivial < bestTrivial)))))));
    if (better) {
      bestCost = score;
      bestNested = nested;
      bestTrivial = trivial;
      bestChanges = changes;
      bestWork = work;
      best = cand;
    }
    if (!advance())
      break;
  }
  return best;
}

bool isLocalStrategy(const ShardingRule &rule,
                     const std::vector<Placements> &operandPlacements,
                     const Placements &result,
                     const std::vector<int64_t> &meshShape) {
  const size_t nAxes = result.size();
  ShardingStrategy cand;
  cand.operands.assign(rule.operands.size(), Placements(nAxes));
  cand.result.assign(nAxes, Placement::replicate());
  std::vector<AxisChoice> choices = axisChoices(rule);
  std::vector<const AxisChoice *> perAxis(nAxes, nullptr);
  for (size_t a = 0; a < nAxes; ++a) {
    for (const AxisChoice &c : choices) {
      applyChoice(rule, c, a, cand);
      bool same = cand.result[a] == result[a];
      for (size_t k = 0; same && k < rule.operands.size(); ++k)
        same = cand.operands[k][a] == operandPlacements[k][a];
      if (same) {
        perAxis[a] = &c;
        break;
      }
    }
    if (!perAxis[a])
      return false;
  }
  return rule.evenFactors.empty() ||
         (meshShape.size() == nAxes &&
          evenFactorsDivide(rule, perAxis, meshShape));
}

} // namespace dtorch
