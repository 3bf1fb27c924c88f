// Each mesh position's program of a compiled function: the class program
// that runs there, resolved for that position as a worker would (the mesh's
// global ranks are its positions).
#pragma once

#include "dtorch/Compiler.h"
#include "dtorch/runtime/MeshContext.h"

#include <numeric>
#include <vector>

namespace dtorch::emitted {

inline rt::RankContext positionContext(const std::vector<int64_t> &mesh,
                                       int64_t position) {
  std::vector<int64_t> ranks(meshSize(mesh));
  std::iota(ranks.begin(), ranks.end(), 0);
  return rt::RankContext::of(mesh, ranks, position);
}

inline std::vector<wire::Program>
programsByPosition(const CompiledFunction &fn) {
  std::vector<wire::Program> out;
  for (int64_t p = 0; p < meshSize(fn.meshShape); ++p) {
    int k = fn.programAt(p);
    if (k < 0)
      throw std::runtime_error("no program runs at mesh position " +
                               std::to_string(p));
    out.push_back(
        rt::resolveForRank(fn.programs[k], positionContext(fn.meshShape, p)));
  }
  return out;
}

} // namespace dtorch::emitted
