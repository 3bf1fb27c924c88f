// dtensor programs of one dtensor.fused_adam on a one-rank mesh, for the
// tests of its generated kernels (host and GPU).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace dtorch::adamsources {

struct AdamParam {
  std::string shape; // "3x37", or "" for a 0-d parameter
  std::string dtype; // f32, f64, f16, bf16
};

struct AdamConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0.01;
  bool decoupled = true, amsgrad = false, maximize = false;
};

inline std::string adamTensorType(const AdamParam &p) {
  return "!dtensor.tensor<" + (p.shape.empty() ? "" : p.shape + "x") + p.dtype +
         ", #m, [R]>";
}

/// func @step(step, lr, params..., grads..., exp_avgs..., exp_avg_sqs...
/// [, maxima...]) returning the op's results.
inline std::string fusedAdamSource(const std::vector<AdamParam> &params,
                                   const AdamConfig &c) {
  int perParam = c.amsgrad ? 5 : 4;
  std::string scalar = "!dtensor.tensor<f64, #m, [R]>";
  std::string args = "%s: " + scalar + ", %lr: " + scalar;
  std::string operands = "%s, %lr", operandTypes = scalar + ", " + scalar;
  std::string results, returns, resultTypes;
  for (int k = 0; k < perParam; ++k)
    for (size_t i = 0; i < params.size(); ++i) {
      std::string name = "%t" + std::to_string(k) + "_" + std::to_string(i);
      std::string t = adamTensorType(params[i]);
      args += ", " + name + ": " + t;
      operands += ", " + name;
      operandTypes += ", " + t;
    }
  int numResults = static_cast<int>((perParam - 1) * params.size());
  for (int r = 0; r < numResults; ++r) {
    std::string t = adamTensorType(params[r % params.size()]);
    resultTypes += (r ? ", " : "") + t;
    returns += (r ? ", %r#" : "%r#") + std::to_string(r);
  }
  char attrs[512];
  std::snprintf(attrs, sizeof attrs,
                "{amsgrad = %d : i64, beta1 = %.17e : f64, beta2 = %.17e : "
                "f64, decoupled = %d : i64, eps = %.17e : f64, maximize = %d "
                ": i64, weight_decay = %.17e : f64}",
                c.amsgrad ? 1 : 0, c.beta1, c.beta2, c.decoupled ? 1 : 0, c.eps,
                c.maximize ? 1 : 0, c.weightDecay);
  return "#m = #dtensor.mesh<[1]>\nfunc.func @step(" + args + ") -> (" +
         resultTypes + ") {\n  %r:" + std::to_string(numResults) +
         " = dtensor.fused_adam " + operands + " " + attrs + " : (" +
         operandTypes + ") -> (" + resultTypes + ")\n  return " + returns +
         " : " + resultTypes + "\n}\n";
}

} // namespace dtorch::adamsources
