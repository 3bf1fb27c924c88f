// dtensor programs of one dtensor.fused_sgd on a one-rank mesh, for the
// tests of its generated kernels (host and GPU).
#pragma once

#include "FusedAdamSources.h"

#include <cstdio>
#include <string>
#include <vector>

namespace dtorch::sgdsources {

using adamsources::AdamParam;

struct SgdConfig {
  double momentum = 0.9, dampening = 0, weightDecay = 0;
  bool nesterov = false, maximize = false, firstStep = false;
  bool hasMomentum() const { return momentum != 0; }
  /// Tensors per parameter among the operands after lr.
  int inputsPerParam() const { return hasMomentum() && !firstStep ? 3 : 2; }
  int resultsPerParam() const { return hasMomentum() ? 2 : 1; }
};

/// func @step(lr, params..., grads... [, buffers...]) returning the op's
/// results.
inline std::string fusedSgdSource(const std::vector<AdamParam> &params,
                                  const SgdConfig &c) {
  std::string scalar = "!dtensor.tensor<f64, #m, [R]>";
  std::string args = "%lr: " + scalar;
  std::string operands = "%lr", operandTypes = scalar;
  std::string returns, resultTypes;
  for (int k = 0; k < c.inputsPerParam(); ++k)
    for (size_t i = 0; i < params.size(); ++i) {
      std::string name = "%t" + std::to_string(k) + "_" + std::to_string(i);
      std::string t = adamsources::adamTensorType(params[i]);
      args += ", " + name + ": " + t;
      operands += ", " + name;
      operandTypes += ", " + t;
    }
  int numResults = static_cast<int>(c.resultsPerParam() * params.size());
  for (int r = 0; r < numResults; ++r) {
    std::string t = adamsources::adamTensorType(params[r % params.size()]);
    resultTypes += (r ? ", " : "") + t;
    returns += (r ? ", %r#" : "%r#") + std::to_string(r);
  }
  char attrs[512];
  std::snprintf(attrs, sizeof attrs,
                "{dampening = %.17e : f64, first_step = %d : i64, maximize = "
                "%d : i64, momentum = %.17e : f64, nesterov = %d : i64, "
                "weight_decay = %.17e : f64}",
                c.dampening, c.firstStep ? 1 : 0, c.maximize ? 1 : 0,
                c.momentum, c.nesterov ? 1 : 0, c.weightDecay);
  return "#m = #dtensor.mesh<[1]>\nfunc.func @step(" + args + ") -> (" +
         resultTypes + ") {\n  %r:" + std::to_string(numResults) +
         " = dtensor.fused_sgd " + operands + " " + attrs + " : (" +
         operandTypes + ") -> (" + resultTypes + ")\n  return " + returns +
         " : " + resultTypes + "\n}\n";
}

} // namespace dtorch::sgdsources
