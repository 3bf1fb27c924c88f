//===- RowReductionSources.h - dtensor functions ending in row reductions -===//
//
// Test sources shared by the host row-kernel tests (FusedKernelTest.cpp),
// the GPU code generator's tests (GpuKernelCodegenTest.cpp, ptxas) and the
// GPU runs (test/cpp/cuda/GpuFusedKernelTest.cpp): a small builder of
// dtensor functions over one mesh of 1 rank, and the groups the fusion pass
// makes into row kernels (layer_norm, softmax, log_softmax, cross-entropy).
//
//===----------------------------------------------------------------------===//
#ifndef DTORCH_TEST_CPP_COMPILER_ROWREDUCTIONSOURCES_H
#define DTORCH_TEST_CPP_COMPILER_ROWREDUCTIONSOURCES_H

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace dtorch::row_sources {

/// A small builder of dtensor functions over one mesh of 1 rank.
struct Source {
  std::string dtype;
  std::string text;
  int next = 0;
  std::string type(const std::string &shape) const {
    return "!dtensor.tensor<" + shape + "x" + dtype + ", #m, [R]>";
  }
  std::string scalarType() const {
    return "!dtensor.tensor<" + dtype + ", #m, [R]>";
  }
  std::string op(const std::string &body, const std::string &resultType) {
    std::string name = "%v" + std::to_string(next++);
    text += "  " + name + " = " + body + " -> " + resultType + "\n";
    return name;
  }
  std::string unary(const std::string &k, const std::string &x,
                    const std::string &t) {
    return op("dtensor." + k + " " + x + " : (" + t + ")", t);
  }
  std::string binary(const std::string &k, const std::string &x,
                     const std::string &y, const std::string &t) {
    return op("dtensor." + k + " " + x + ", " + y + " : (" + t + ", " + t + ")",
              t);
  }
  std::string reduce(const std::string &k, const std::string &x,
                     const std::string &dims, bool keepdim,
                     const std::string &from, const std::string &to) {
    return op("dtensor." + k + " " + x + " dims = [" + dims + "]" +
                  (keepdim ? " keepdim" : "") + " : (" + from + ")",
              to);
  }
  std::string broadcast(const std::string &x, const std::string &from,
                        const std::string &to) {
    return op("dtensor.broadcast_to " + x + " : (" + from + ")", to);
  }
  std::string fill(double v, const std::string &t) {
    std::string name = "%v" + std::to_string(next++);
    char value[64];
    std::snprintf(value, sizeof value, "%.17g", v);
    std::string literal = value;
    if (literal.find_first_of(".en") == std::string::npos)
      literal += ".0";
    text += "  " + name + " = dtensor.full " + literal + " : " + t + "\n";
    return name;
  }
  std::string function(
      const std::string &args,
      const std::vector<std::pair<std::string, std::string>> &results) const {
    std::string types, names;
    for (size_t i = 0; i < results.size(); ++i) {
      types += (i ? ", " : "") + results[i].second;
      names += (i ? ", " : "") + results[i].first;
    }
    return "#m = #dtensor.mesh<[1]>\nfunc.func @f(" + args + ") -> (" + types +
           ") {\n" + text + "  return " + names + " : " + types + "\n}\n";
  }
};

inline const char *kFloatDtypes[] = {"f32", "f64", "f16", "bf16"};

/// `x` [rows, n] normalized per row (layer_norm: mean, centered, mean of
/// squares, eps, rsqrt; then weight and bias of shape [n]); also returns the
/// per-row mean (a per-row result of the group).
inline std::string layerNormSource(const std::string &dtype, int64_t rows,
                                   int64_t n) {
  Source s{dtype, {}};
  std::string r = std::to_string(rows), c = std::to_string(n);
  std::string row = s.type(r + "x" + c), kept = s.type(r + "x1"),
              vec = s.type(c);
  std::string mean =
      s.op("dtensor.mean %x dims = [1] keepdim : (" + row + ")", kept);
  std::string centered =
      s.binary("sub", "%x", s.broadcast(mean, kept, row), row);
  std::string sq = s.binary("mul", centered, centered, row);
  std::string var =
      s.op("dtensor.mean " + sq + " dims = [1] keepdim : (" + row + ")", kept);
  std::string inv =
      s.unary("rsqrt", s.binary("add", var, s.fill(1e-5, kept), kept), kept);
  std::string y = s.binary("mul", centered, s.broadcast(inv, kept, row), row);
  y = s.binary("mul", y, s.broadcast("%w", vec, row), row);
  y = s.binary("add", y, s.broadcast("%b", vec, row), row);
  return s.function("%x: " + row + ", %w: " + vec + ", %b: " + vec,
                    {{y, row}, {mean, kept}});
}

/// softmax over the last dim of [rows, n], with `unary` in place of exp
/// (exp itself, or `neg`, whose generated and hand-written forms are
/// bitwise equal, to check the reductions' order alone).
inline std::string softmaxSource(const std::string &dtype, int64_t rows,
                                 int64_t n, const std::string &unary) {
  Source s{dtype, {}};
  std::string r = std::to_string(rows), c = std::to_string(n);
  std::string row = s.type(r + "x" + c), kept = s.type(r + "x1");
  std::string m = s.reduce("max", "%x", "1", true, row, kept);
  std::string e = s.unary(
      unary, s.binary("sub", "%x", s.broadcast(m, kept, row), row), row);
  std::string total = s.reduce("sum", e, "1", true, row, kept);
  std::string y = s.binary("div", e, s.broadcast(total, kept, row), row);
  return s.function("%x: " + row, {{y, row}});
}

/// log_softmax over the last two dims of [2, rows, 3, n] with a per-row
/// result whose reduced dims are dropped (min, then a sum scaled as a
/// mean).
inline std::string logSoftmaxSource(const std::string &dtype, int64_t rows,
                                    int64_t n) {
  Source s{dtype, {}};
  std::string r = std::to_string(rows), c = std::to_string(n);
  std::string row = s.type("2x" + r + "x3x" + c),
              kept = s.type("2x" + r + "x1x1"), dropped = s.type("2x" + r);
  std::string m = s.reduce("max", "%x", "2, 3", true, row, kept);
  std::string shifted = s.binary("sub", "%x", s.broadcast(m, kept, row), row);
  std::string lse = s.unary(
      "log",
      s.reduce("sum", s.unary("exp", shifted, row), "2, 3", true, row, kept),
      kept);
  std::string y = s.binary("sub", shifted, s.broadcast(lse, kept, row), row);
  std::string low = s.reduce("min", y, "3, 2", false, row, dropped);
  std::string avg =
      s.op("dtensor.mean " + y + " dims = [2, 3] : (" + row + ")", dropped);
  return s.function("%x: " + row, {{y, row}, {low, dropped}, {avg, dropped}});
}

/// Cross-entropy of logits `x` [rows, n] against one-hot (or soft) targets
/// `t` [rows, n], per row: -sum(t * log_softmax(x)); returns the per-row
/// losses [rows] (reduced dims dropped) and the log-probabilities.
inline std::string crossEntropySource(const std::string &dtype, int64_t rows,
                                      int64_t n) {
  Source s{dtype, {}};
  std::string r = std::to_string(rows), c = std::to_string(n);
  std::string row = s.type(r + "x" + c), kept = s.type(r + "x1"),
              dropped = s.type(r);
  std::string m = s.reduce("max", "%x", "1", true, row, kept);
  std::string shifted = s.binary("sub", "%x", s.broadcast(m, kept, row), row);
  std::string lse = s.unary(
      "log",
      s.reduce("sum", s.unary("exp", shifted, row), "1", true, row, kept),
      kept);
  std::string logp = s.binary("sub", shifted, s.broadcast(lse, kept, row), row);
  std::string picked = s.binary("mul", "%t", logp, row);
  std::string loss = s.unary(
      "neg", s.reduce("sum", picked, "1", false, row, dropped), dropped);
  return s.function("%x: " + row + ", %t: " + row,
                    {{loss, dropped}, {logp, row}});
}

/// The gradient of cross-entropy's logits `x` [rows, n] against targets
/// `t` [rows, n], scaled per row by `g` [rows, 1]: (softmax(x) - t) * g.
inline std::string crossEntropyBackwardSource(const std::string &dtype,
                                              int64_t rows, int64_t n) {
  Source s{dtype, {}};
  std::string r = std::to_string(rows), c = std::to_string(n);
  std::string row = s.type(r + "x" + c), kept = s.type(r + "x1");
  std::string m = s.reduce("max", "%x", "1", true, row, kept);
  std::string e = s.unary(
      "exp", s.binary("sub", "%x", s.broadcast(m, kept, row), row), row);
  std::string total = s.reduce("sum", e, "1", true, row, kept);
  std::string p = s.binary("div", e, s.broadcast(total, kept, row), row);
  std::string y = s.binary("mul", s.binary("sub", p, "%t", row),
                           s.broadcast("%g", kept, row), row);
  return s.function("%x: " + row + ", %t: " + row + ", %g: " + kept,
                    {{y, row}});
}

/// rms_norm of `x` [rows, n] with weight `w` [n]: x * rsqrt(mean(x*x) + eps)
/// * w.
inline std::string rmsNormSource(const std::string &dtype, int64_t rows,
                                 int64_t n) {
  Source s{dtype, {}};
  std::string r = std::to_string(rows), c = std::to_string(n);
  std::string row = s.type(r + "x" + c), kept = s.type(r + "x1"),
              vec = s.type(c);
  std::string sq = s.binary("mul", "%x", "%x", row);
  std::string ms =
      s.op("dtensor.mean " + sq + " dims = [1] keepdim : (" + row + ")", kept);
  std::string inv =
      s.unary("rsqrt", s.binary("add", ms, s.fill(1e-6, kept), kept), kept);
  std::string y = s.binary("mul", "%x", s.broadcast(inv, kept, row), row);
  y = s.binary("mul", y, s.broadcast("%w", vec, row), row);
  return s.function("%x: " + row + ", %w: " + vec, {{y, row}});
}

} // namespace dtorch::row_sources

#endif // DTORCH_TEST_CPP_COMPILER_ROWREDUCTIONSOURCES_H
