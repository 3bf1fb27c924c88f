//===- DTensorDecompositions.td - torch ops built from dialect ops -*- tablegen -*-===//
//
// Operators of torch's API that are not dialect ops: the Python function of
// each (python/dtorch/_decompositions.py, found by the record's name) emits
// the dialect ops in `uses`, so their sharding follows from those ops'
// rules. The registry checks at import that every record has its function.
//
//===----------------------------------------------------------------------===//
#ifndef DTENSOR_DECOMPOSITIONS
#define DTENSOR_DECOMPOSITIONS

include "DTensorRegistry.td"

class Decomp<string name, string what, list<string> ops,
             list<string> fns = [name], list<string> methods = [name]>
    : DTorch_Decomposition<name> {
  let summary = what;
  let uses = ops;
  let torchFunctions = fns;
  let tensorMethods = methods;
}

def : Decomp<"softmax", "exp(x - max) / sum along a dim",
             ["max", "sub", "exp", "sum", "div"]>;
def : Decomp<"log_softmax", "x - max - log(sum(exp(x - max))) along a dim",
             ["max", "sub", "exp", "sum", "log"]>;
def : Decomp<"logsumexp", "log(sum(exp(x))) along dims, stable",
             ["max", "sub", "exp", "sum", "log", "add"]>;
def : Decomp<"var", "variance with a correction (Bessel's by default)",
             ["mean", "sub", "mul", "sum", "div"]>;
def : Decomp<"std", "square root of var", ["mean", "sub", "mul", "sum", "div", "sqrt"]>;
def : Decomp<"clamp", "elementwise bounds", ["maximum", "minimum"],
             ["clamp", "clip"], ["clamp", "clip"]>;
def : Decomp<"masked_fill", "value where mask is true", ["where", "full"],
             ["masked_fill"], ["masked_fill"]>;
def : Decomp<"one_hot", "a new last dim of 0/1 per class",
             ["iota", "eq", "cast"], ["one_hot"], []>;
def : Decomp<"dropout", "zeroes with probability p, scales the rest by 1/(1-p)",
             ["random", "ge", "where", "mul"], ["dropout"], []>;
def : Decomp<"layer_norm", "normalizes the last dims, then weight and bias",
             ["mean", "sub", "mul", "rsqrt", "add"], ["layer_norm"], []>;
def : Decomp<"rms_norm", "x / rms(x) over the last dims, times weight",
             ["mul", "mean", "add", "rsqrt"], ["rms_norm"], []>;
def : Decomp<"cross_entropy", "log_softmax + picked class, with ignore_index and label smoothing",
             ["max", "sub", "exp", "sum", "log", "gather", "ne", "where", "mean", "div"],
             ["cross_entropy"], []>;
def : Decomp<"mse_loss", "mean of squared differences", ["sub", "mul", "mean"],
             ["mse_loss"], []>;
def : Decomp<"scaled_dot_product_attention",
             "softmax(q k^T * scale + mask) v, causal or masked",
             ["transpose", "bmm", "mul", "iota", "ge", "where", "max", "sub", "exp", "sum", "div"],
             ["scaled_dot_product_attention"], []>;
def : Decomp<"linear", "x @ w^T + b", ["transpose", "matmul", "add"], ["linear"], []>;
def : Decomp<"stack", "unsqueeze then cat", ["reshape", "concat"], ["stack"], []>;
def : Decomp<"max_dim", "max(dim) and min(dim): values and indices",
             ["max", "argmax", "min", "argmin"], ["max", "min"], ["max", "min"]>;
def : Decomp<"square", "x * x", ["mul"]>;
def : Decomp<"topk", "the k largest (or smallest) values and their indices",
             ["topk_indices", "gather"]>;

#endif // DTENSOR_DECOMPOSITIONS
