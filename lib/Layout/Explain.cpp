//===- Explain.cpp - why a redistribution happens, in the user's names ---===//
#include "dtorch/Explain.h"

#include <algorithm>

namespace dtorch {
namespace {

std::string shapeText(const std::vector<int64_t> &shape,
                      const std::string &elementType) {
  std::string s;
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + elementType;
}

std::string useText(const RedistributionUse &u) {
  if (u.op == "func.return")
    return "result " + std::to_string(u.operand) + " of the function";
  return "operand " + std::to_string(u.operand) + " of " + u.op;
}

} // namespace

void planTraffic(RedistributionExplanation &e) {
  e.steps = redistributeTraffic(e.shape, e.elementBytes, e.meshShape, e.before,
                                e.after);
  e.bytesSent = totalBytesSent(e.steps, meshSize(e.meshShape));
}

std::string meshAxisText(const std::vector<std::string> &names, int64_t axis) {
  if (axis >= 0 && axis < (int64_t)names.size())
    return "\"" + names[axis] + "\"";
  return "mesh dim " + std::to_string(axis);
}

std::string placementsText(const Placements &placements,
                           const std::vector<std::string> &names) {
  if (names.size() != placements.size())
    return placementsStr(placements);
  std::string s;
  for (size_t i = 0; i < placements.size(); ++i)
    s += (i ? ", " : "") + names[i] + ": " + placements[i].str();
  return s;
}

std::string changeText(const RedistributionExplanation &e) {
  bool named = e.meshDimNames.size() == e.before.size();
  std::string s;
  for (size_t i = 0; i < e.before.size() && i < e.after.size(); ++i) {
    if (e.before[i] == e.after[i])
      continue;
    if (!s.empty())
      s += ", ";
    if (named)
      s += e.meshDimNames[i] + ": ";
    else if (e.before.size() > 1)
      s += "dim " + std::to_string(i) + ": ";
    s += e.before[i].str() + " -> " + e.after[i].str();
  }
  return s.empty() ? "unchanged" : s;
}

std::string stepText(const RedistributeStep &step,
                     const std::vector<std::string> &names) {
  using K = RedistributeStep::Kind;
  std::string s = stepKindName(step.kind);
  if (step.kind == K::AllReduce || step.kind == K::ReduceScatter)
    s += std::string("(") + reduceOpName(step.op) + ")";
  return s + " on " + meshAxisText(names, step.axis);
}

std::string reasonText(const RedistributionExplanation &e) {
  using R = RedistributionExplanation::Reason;
  switch (e.reason) {
  case R::Operand: {
    std::string s;
    for (size_t i = 0; i < e.uses.size(); ++i)
      s += (i == 0                   ? ""
            : i + 1 == e.uses.size() ? " and "
                                     : ", ") +
           useText(e.uses[i]);
    return s.empty() ? "an operand" : s;
  }
  case R::Result:
    return "the result of " + e.source + " (computed as " +
           placementsStr(e.before) + ", declared " + placementsStr(e.after) +
           ")";
  case R::Explicit:
    return "an explicit redistribute";
  }
  return "?";
}

std::string bytesText(const std::vector<int64_t> &bytesSent) {
  if (bytesSent.empty())
    return "0 bytes";
  auto [lo, hi] = std::minmax_element(bytesSent.begin(), bytesSent.end());
  if (*lo == *hi)
    return std::to_string(*hi) + " bytes";
  return std::to_string(*lo) + " to " + std::to_string(*hi) + " bytes";
}

std::string explanationText(const RedistributionExplanation &e) {
  std::string s = "redistribute for " + reasonText(e) + ": " +
                  shapeText(e.shape, e.elementType) + " " + changeText(e);
  bool anyCollective = false;
  for (size_t i = 0; i < e.steps.size(); ++i) {
    s += (i ? ", " : " by ") + stepText(e.steps[i].step, e.meshDimNames);
    anyCollective |= communicates(e.steps[i].step.kind);
  }
  if (!anyCollective)
    return s + "; no communication";
  return s + "; each rank sends " + bytesText(e.bytesSent);
}

} // namespace dtorch
