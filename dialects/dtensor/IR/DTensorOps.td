//===- DTensorOps.td - dtensor ops ---------------------------*- tablegen -*-===//
#ifndef DTENSOR_OPS
#define DTENSOR_OPS

include "DTensorTypes.td"
include "ShardingRuleInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

include "DTensorRegistry.td"

class DTensor_Op<string mnemonic, list<Trait> traits = []>
    : Op<DTensor_Dialect, mnemonic, traits>, DTorch_RegistryEntry {
  let kernel = mnemonic;
}

def AnyDTensor : Type<CPred<"::llvm::isa<::dtorch::dtensor::DTensorType>($_self)">,
    "distributed tensor", "::dtorch::dtensor::DTensorType">;

// An op with a sharding rule: every operand and the result live on one mesh.
class DTensor_ComputeOp<string mnemonic, list<Trait> traits = []>
    : DTensor_Op<mnemonic, !listconcat(traits,
        [Pure, DeclareOpInterfaceMethods<ShardingRuleOpInterface>])> {
  let results = (outs AnyDTensor:$result);
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

def DTensor_FullOp : DTensor_ComputeOp<"full"> {
  let family = "creation";
  let torchFunctions = ["full", "zeros", "ones", "empty", "zeros_like", "ones_like", "full_like"];
  let test = "test/python/test_ops.py::test_creation";
  let reference = "np.full(shape, value)";
  let summary = "A tensor filled with one value";
  let description = [{
    ```mlir
    %0 = dtensor.full 1.000000e+00 : !dtensor.tensor<4x4xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins F64Attr:$value);
  let assemblyFormat = "$value attr-dict `:` qualified(type($result))";
}

def DTensor_RandomOp : DTensor_ComputeOp<"random"> {
  let family = "creation";
  let torchFunctions = ["rand", "randn", "rand_like", "randn_like"];
  let test = "test/python/test_ops.py::test_random_is_reproducible_and_placement_independent";
  let dtypes = ["f32", "f64", "f16", "bf16"];
  let summary = "Seeded random values, the same for every placement";
  let description = [{
    `distribution` is `uniform` ([0, 1)) or `normal` (mean 0, std 1). The
    value at a global index depends only on the seed and that index, so the
    global tensor does not depend on the placements.

    ```mlir
    %0 = dtensor.random seed = 7 distribution = "normal" : !dtensor.tensor<8x8xf32, #mesh, [S(1)]>
    ```
  }];
  let arguments = (ins I64Attr:$seed, StrAttr:$distribution);
  let assemblyFormat =
      "`seed` `=` $seed `distribution` `=` $distribution attr-dict `:` qualified(type($result))";
}

def DTensor_ConstantOp : DTensor_ComputeOp<"constant"> {
  let family = "creation";
  let torchFunctions = ["tensor", "distribute_tensor"];
  let test = "test/python/test_ops.py::test_creation";
  let summary = "A tensor with given global contents";
  let description = [{
    ```mlir
    %0 = dtensor.constant dense<[1.0, 2.0]> : tensor<2xf32> : !dtensor.tensor<2xf32, #mesh, [R]>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let assemblyFormat = "$value attr-dict `:` qualified(type($result))";
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class DTensor_BinaryOp<string mnemonic, string what, string ref,
                       list<string> ops = [], list<string> joint = [],
                       list<int> linear = []>
    : DTensor_ComputeOp<mnemonic> {
  let family = "binary";
  let torchFunctions = [mnemonic];
  let tensorMethods = [mnemonic];
  let pyOperators = ops;
  let jointPartial = joint;
  let linearOperands = linear;
  let reference = ref;
  let summary = "Elementwise " # what;
  let description = [{
    Operands and result have one global shape and element type; their
    placements may differ (sharding propagation reconciles them).

    ```mlir
    %2 = dtensor.}] # mnemonic # [{ %0, %1 : (!dtensor.tensor<4x4xf32, #mesh, [S(0)]>, !dtensor.tensor<4x4xf32, #mesh, [R]>) -> !dtensor.tensor<4x4xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$lhs, AnyDTensor:$rhs);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

// a+b and a-b are additive in both operands at once; a*b is linear in each
// operand; a/b in its numerator; max/min commute with themselves.
def DTensor_AddOp : DTensor_BinaryOp<"add", "addition", "a + b",
    ["__add__", "__radd__"], ["sum", "avg"]> {
  let gradient = [
    "g",
    "g"];
}
def DTensor_SubOp : DTensor_BinaryOp<"sub", "subtraction", "a - b",
    ["__sub__", "__rsub__"], ["sum", "avg"]> {
  let gradient = [
    "g",
    "-g"];
}
def DTensor_MulOp : DTensor_BinaryOp<"mul", "multiplication", "a * b",
    ["__mul__", "__rmul__"], [], [0, 1]> {
  let gradient = [
    "g * rhs",
    "g * lhs"];
}
def DTensor_DivOp : DTensor_BinaryOp<"div", "division", "a / b",
    ["__truediv__", "__rtruediv__"], [], [0]> {
  let gradient = [
    "g / rhs",
    "-g * lhs / (rhs * rhs)"];
}
def DTensor_MaximumOp : DTensor_BinaryOp<"maximum", "maximum",
    "np.maximum(a, b)", [], ["max"]> {
  let gradient = [
    "where(lhs > rhs, g, where(lhs == rhs, g * 0.5, 0.0))",
    "where(rhs > lhs, g, where(lhs == rhs, g * 0.5, 0.0))"];
}
def DTensor_MinimumOp : DTensor_BinaryOp<"minimum", "minimum",
    "np.minimum(a, b)", [], ["min"]> {
  let gradient = [
    "where(lhs < rhs, g, where(lhs == rhs, g * 0.5, 0.0))",
    "where(rhs < lhs, g, where(lhs == rhs, g * 0.5, 0.0))"];
}
def DTensor_PowOp : DTensor_BinaryOp<"pow", "power", "np.power(a, b)",
    ["__pow__", "__rpow__"]> {
  let gradient = [
    "where(rhs == 0, 0.0, g * rhs * pow(lhs, rhs - 1.0))",
    "where(lhs == 0, where(rhs >= 0, 0.0, g * result * log(lhs)), g * result * log(lhs))"];
}

class DTensor_CompareOp<string mnemonic, string what, string op, string ref>
    : DTensor_ComputeOp<mnemonic> {
  let family = "compare";
  let summary = "Elementwise " # what # " (a bool result)";
  let description = [{
    Operands share one global shape and element type; the result has that
    shape and element type `i1`. No partial value passes through a
    comparison: Partial operands are reduced first.

    ```mlir
    %2 = dtensor.}] # mnemonic # [{ %0, %1 : (!dtensor.tensor<4x4xf32, #mesh, [S(0)]>, !dtensor.tensor<4x4xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x4xi1, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$lhs, AnyDTensor:$rhs);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let torchFunctions = [mnemonic];
  let tensorMethods = [mnemonic];
  let pyOperators = [op];
  let reference = ref;
}

def DTensor_EqOp : DTensor_CompareOp<"eq", "equality", "__eq__", "a == b">;
def DTensor_NeOp : DTensor_CompareOp<"ne", "inequality", "__ne__", "a != b">;
def DTensor_LtOp : DTensor_CompareOp<"lt", "less-than", "__lt__", "a < b">;
def DTensor_LeOp : DTensor_CompareOp<"le", "less-or-equal", "__le__", "a <= b">;
def DTensor_GtOp : DTensor_CompareOp<"gt", "greater-than", "__gt__", "a > b">;
def DTensor_GeOp : DTensor_CompareOp<"ge", "greater-or-equal", "__ge__", "a >= b">;

def DTensor_WhereOp : DTensor_ComputeOp<"where"> {
  let gradient = [
    "",
    "where(cond, g, 0.0)",
    "where(cond, 0.0, g)"];
  let summary = "Elementwise choice: `cond ? lhs : rhs`";
  let description = [{
    `cond` is `i1`; all three operands and the result share one global
    shape, and `lhs`, `rhs` and the result one element type.

    ```mlir
    %3 = dtensor.where %0, %1, %2 : (!dtensor.tensor<4x4xi1, #mesh, [S(0)]>, !dtensor.tensor<4x4xf32, #mesh, [S(0)]>, !dtensor.tensor<4x4xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x4xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$cond, AnyDTensor:$lhs, AnyDTensor:$rhs);
  let assemblyFormat =
      "$cond `,` $lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let family = "where";
  let torchFunctions = ["where"];
  let tensorMethods = ["where"];
  let reference = "np.where(c, a, b)";
}

class DTensor_UnaryOp<string mnemonic, string what, string ref,
                      bit isFloatOnly = 1, list<int> linear = [],
                      list<string> ops = []>
    : DTensor_ComputeOp<mnemonic> {
  let family = "unary";
  let torchFunctions = [mnemonic];
  let tensorMethods = [mnemonic];
  let pyOperators = ops;
  let floatOnly = isFloatOnly;
  let linearOperands = linear;
  let reference = ref;
  let summary = "Elementwise " # what;
  let description = [{
    ```mlir
    %1 = dtensor.}] # mnemonic # [{ %0 : (!dtensor.tensor<4x4xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x4xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def DTensor_NegOp : DTensor_UnaryOp<"neg", "negation",
    "-x", 0, [0], ["__neg__"]> {
  let gradient = ["-g"];
}
def DTensor_AbsOp : DTensor_UnaryOp<"abs", "absolute value",
    "np.abs(x)", 0, [], ["__abs__"]> {
  let gradient = ["where(input > 0, g, where(input < 0, -g, 0.0))"];
}
def DTensor_ExpOp : DTensor_UnaryOp<"exp", "exponential",
    "np.exp(x)"> {
  let gradient = ["g * result"];
}
def DTensor_LogOp : DTensor_UnaryOp<"log", "natural logarithm",
    "np.log(x)"> {
  let gradient = ["g / input"];
}
def DTensor_SqrtOp : DTensor_UnaryOp<"sqrt", "square root",
    "np.sqrt(x)"> {
  let gradient = ["g / (result * 2.0)"];
}
def DTensor_RsqrtOp : DTensor_UnaryOp<"rsqrt", "reciprocal square root",
    "1 / np.sqrt(x)"> {
  let gradient = ["g * result * result * result * -0.5"];
}
def DTensor_ReluOp : DTensor_UnaryOp<"relu", "rectified linear unit",
    "np.maximum(x, 0)", 0> {
  let gradient = ["where(result > 0, g, 0.0)"];
}
def DTensor_TanhOp : DTensor_UnaryOp<"tanh", "hyperbolic tangent",
    "np.tanh(x)"> {
  let gradient = ["g * (1.0 - result * result)"];
}
def DTensor_SigmoidOp : DTensor_UnaryOp<"sigmoid", "logistic sigmoid",
    "1 / (1 + np.exp(-x))"> {
  let gradient = ["g * result * (1.0 - result)"];
}
def DTensor_GeluOp : DTensor_UnaryOp<"gelu", "GELU (erf form)",
    "ref_gelu(x)"> {
  let gradient = [
    "g * (where(input == 0, 0.5, result / input) + input * exp(input * input * -0.5) * 0.3989422804014327)"];
}
def DTensor_SiluOp : DTensor_UnaryOp<"silu", "SiLU (x * sigmoid(x))",
    "x / (1 + np.exp(-x))"> {
  let gradient = ["g * sigmoid(input) * (1.0 + input * (1.0 - sigmoid(input)))"];
}
def DTensor_SinOp : DTensor_UnaryOp<"sin", "sine",
    "np.sin(x)"> {
  let gradient = ["g * cos(input)"];
}
def DTensor_CosOp : DTensor_UnaryOp<"cos", "cosine",
    "np.cos(x)"> {
  let gradient = ["-g * sin(input)"];
}

def DTensor_CastOp : DTensor_ComputeOp<"cast"> {
  let gradient = ["g.to(input.dtype)"];
  let family = "cast";
  let test = "test/python/test_ops.py::test_casts_and_type_promotion";
  let tensorMethods = ["to", "float", "double", "long", "int", "bool", "half", "bfloat16"];
  // Element type conversion is monotone: max/min commute with it.
  let jointPartial = ["max", "min"];
  let summary = "Element type conversion (torch's rules)";
  let description = [{
    Floats truncate toward zero into integers; any value becomes `i1` as
    `!= 0`. The shape and placements may not change the values' layout:
    partial max/min pass through (the conversion is monotone), partial sums
    do not (rounding does not commute with addition).

    ```mlir
    %1 = dtensor.cast %0 : (!dtensor.tensor<4x4xi64, #mesh, [S(0)]>) -> !dtensor.tensor<4x4xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

def DTensor_MatmulOp : DTensor_ComputeOp<"matmul"> {
  let gradient = [
    "g @ rhs.t()",
    "lhs.t() @ g"];
  let family = "matmul";
  let torchFunctions = ["matmul", "mm"];
  let tensorMethods = ["matmul", "mm"];
  let pyOperators = ["__matmul__"];
  let linearOperands = [0, 1];
  let dtypes = ["f32", "f64", "f16", "bf16", "i32", "i64"];
  let reference = "a @ b";
  let summary = "Matrix product of two 2-D tensors";
  let description = [{
    `[M, K] x [K, N] -> [M, N]`. Contracting a sharded K gives a `P(sum)`
    result without communication.

    ```mlir
    %2 = dtensor.matmul %0, %1 : (!dtensor.tensor<8x4xf32, #mesh, [S(1)]>, !dtensor.tensor<4x6xf32, #mesh, [S(0)]>) -> !dtensor.tensor<8x6xf32, #mesh, [P(sum)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$lhs, AnyDTensor:$rhs);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def DTensor_BmmOp : DTensor_ComputeOp<"bmm"> {
  let gradient = [
    "g @ rhs.transpose(-2, -1)",
    "lhs.transpose(-2, -1) @ g"];
  let family = "matmul";
  let torchFunctions = ["bmm"];
  let tensorMethods = ["bmm"];
  let linearOperands = [0, 1];
  let dtypes = ["f32", "f64", "f16", "bf16", "i32", "i64"];
  let reference = "a @ b";
  let summary = "Batched matrix product over one or more batch dims";
  let description = [{
    `[B..., M, K] x [B..., K, N] -> [B..., M, N]` with the same batch dims
    `B...` (at least one) on both sides. Several batch dims keep each
    one's own sharding: attention's `[batch, heads, T, T]` scores sharded
    on batch and on heads multiply without merging the two dims.

    ```mlir
    %2 = dtensor.bmm %0, %1 : (!dtensor.tensor<2x8x4xf32, #mesh, [S(0)]>, !dtensor.tensor<2x4x6xf32, #mesh, [S(0)]>) -> !dtensor.tensor<2x8x6xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$lhs, AnyDTensor:$rhs);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class DTensor_ReductionOp<string mnemonic, string what, list<string> names,
                          string ref, list<string> joint>
    : DTensor_ComputeOp<mnemonic> {
  let family = "reduction";
  let torchFunctions = names;
  let tensorMethods = names;
  let jointPartial = joint;
  let dtypes = ["f32", "f64", "f16", "bf16", "i32", "i64"];
  let reference = ref;
  let summary = what # " over the given dims";
  let description = [{
    Reduces `dims` (distinct, in range); `keepdim` keeps them with extent 1.
    Reducing a sharded dim gives a partial result on that mesh dim.

    ```mlir
    %1 = dtensor.}] # mnemonic # [{ %0 dims = [1] : (!dtensor.tensor<4x6xf32, #mesh, [S(1)]>) -> !dtensor.tensor<4xf32, #mesh, [P(}] # !if(!eq(mnemonic, "max"), "max", "sum") # [{)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, DenseI64ArrayAttr:$dims,
                       UnitAttr:$keepdim);
  let assemblyFormat = "$input `dims` `=` $dims (`keepdim` $keepdim^)? attr-dict `:` functional-type(operands, results)";
}

// A sharded mean divides by the global count on every rank, so the partial
// results add up: its reduction is a sum, like sum's.
def DTensor_SumOp : DTensor_ReductionOp<"sum", "Sum", ["sum"],
    "np.sum(x, axis=dims, keepdims=keepdim)", ["sum", "avg"]> {
  let gradient = ["expand_to(g, input, dims)"];
}
def DTensor_MeanOp : DTensor_ReductionOp<"mean", "Arithmetic mean", ["mean"],
    "np.mean(x, axis=dims, keepdims=keepdim)", ["sum", "avg"]> {
  let gradient = [
    "expand_to(g, input, dims) / reduced_count(input.shape, dims)"];
  let dtypes = ["f32", "f64", "f16", "bf16"];
  let kernel = "sum"; // with scale = 1 / count
}
def DTensor_MaxOp : DTensor_ReductionOp<"max", "Maximum", ["amax"],
    "np.max(x, axis=dims, keepdims=keepdim)", ["max"]> {
  let gradient = [
    "where(input == expand_to(result, input, dims), expand_to(g, input, dims) / expand_to(sum((input == expand_to(result, input, dims)).to(g.dtype), dims, True), input, dims), 0.0)"];
}
def DTensor_MinOp : DTensor_ReductionOp<"min", "Minimum", ["amin"],
    "np.min(x, axis=dims, keepdims=keepdim)", ["min"]> {
  let gradient = [
    "where(input == expand_to(result, input, dims), expand_to(g, input, dims) / expand_to(sum((input == expand_to(result, input, dims)).to(g.dtype), dims, True), input, dims), 0.0)"];
}

class DTensor_ArgReductionOp<string mnemonic, string what, string ref>
    : DTensor_ComputeOp<mnemonic> {
  let summary = "Index of the " # what # " along one dim";
  let description = [{
    The result has element type `i64` and the input's shape without `dim`
    (kept with extent 1 under `keepdim`). Ties and NaN pick the first index,
    as torch does. `dim` must not be sharded.

    ```mlir
    %1 = dtensor.}] # mnemonic # [{ %0 {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4xi64, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, I64Attr:$dim, UnitAttr:$keepdim);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let family = "argreduce";
  let torchFunctions = [mnemonic];
  let tensorMethods = [mnemonic];
  let dtypes = ["f32", "f64", "f16", "bf16", "i32", "i64"];
  let reference = ref;
}
def DTensor_TopkIndicesOp : DTensor_ComputeOp<"topk_indices"> {
  let summary = "Indices of the k largest (or smallest) values along one dim";
  let description = [{
    The result is `i64` with the input's shape and extent `k` along `dim`,
    in order (largest first when `largest` is 1). NaN counts as the largest
    value; equal values keep their index order. `dim` must not be sharded;
    the other dims keep their placement. `topk` is this op and a gather.

    ```mlir
    %1 = dtensor.topk_indices %0 {dim = 1 : i64, k = 2 : i64, largest = 1 : i64} : (!dtensor.tensor<4x6xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x2xi64, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, I64Attr:$dim, I64Attr:$k,
                       I64Attr:$largest);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let family = "topk";
  let dtypes = ["f32", "f64", "f16", "bf16", "i32", "i64"];
  let reference = "ref_topk_indices(x, k, dim, largest)";
}

def DTensor_ArgmaxOp : DTensor_ArgReductionOp<"argmax", "maximum",
    "ref_argreduce(np.argmax, x, dim, keepdim)">;
def DTensor_ArgminOp : DTensor_ArgReductionOp<"argmin", "minimum",
    "ref_argreduce(np.argmin, x, dim, keepdim)">;

//===----------------------------------------------------------------------===//
// Shape
//===----------------------------------------------------------------------===//

def DTensor_ReshapeOp : DTensor_ComputeOp<"reshape"> {
  let gradient = ["g.reshape(input.shape)"];
  let family = "shape";
  let torchFunctions = ["reshape"];
  let tensorMethods = ["reshape", "view", "flatten", "unsqueeze", "squeeze"];
  let jointPartial = ["sum", "avg", "max", "min"];
  let reference = "x.reshape(shape)";
  let summary = "The same elements in another shape (row-major)";
  let description = [{
    A dim may stay sharded only where it maps one-to-one onto a result dim.

    ```mlir
    %1 = dtensor.reshape %0 : (!dtensor.tensor<4x6xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x2x3xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def DTensor_TransposeOp : DTensor_ComputeOp<"transpose"> {
  let gradient = ["g.permute([list(perm).index(d) for d in range(len(perm))])"];
  let family = "shape";
  let torchFunctions = ["transpose", "permute", "t"];
  let tensorMethods = ["transpose", "permute", "t"];
  let jointPartial = ["sum", "avg", "max", "min"];
  let reference = "np.transpose(x, perm)";
  let summary = "Permutes the dims: result dim i is input dim perm[i]";
  let description = [{
    ```mlir
    %1 = dtensor.transpose %0 perm = [1, 0] : (!dtensor.tensor<4x6xf32, #mesh, [S(0)]>) -> !dtensor.tensor<6x4xf32, #mesh, [S(1)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, DenseI64ArrayAttr:$perm);
  let assemblyFormat = "$input `perm` `=` $perm attr-dict `:` functional-type(operands, results)";
}

def DTensor_BroadcastToOp : DTensor_ComputeOp<"broadcast_to"> {
  let gradient = ["sum_to(g, input.shape)"];
  let family = "shape";
  let torchFunctions = ["broadcast_to"];
  let tensorMethods = ["expand", "broadcast_to"];
  let jointPartial = ["sum", "avg", "max", "min"];
  let reference = "np.broadcast_to(x, shape)";
  let summary = "Broadcasts to a larger shape (numpy rules)";
  let description = [{
    Trailing dims are aligned; an input dim of extent 1, or a missing
    leading dim, is repeated.

    ```mlir
    %1 = dtensor.broadcast_to %0 : (!dtensor.tensor<6xf32, #mesh, [R]>) -> !dtensor.tensor<4x6xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def DTensor_SliceOp : DTensor_ComputeOp<"slice"> {
  let gradient = ["scatter_slice(g, input.shape, offsets, sizes, strides)"];
  let summary = "A strided box of the input (basic indexing)";
  let description = [{
    Result dim `d` reads input elements `offsets[d] + i * strides[d]` for
    `i` in `[0, sizes[d])`. A dim that is cut (not the whole extent with
    stride 1) must not be sharded; whole dims keep their placement.

    ```mlir
    %1 = dtensor.slice %0 {offsets = array<i64: 0, 1>, sizes = array<i64: 8, 2>, strides = array<i64: 1, 2>} : (!dtensor.tensor<8x6xf32, #mesh, [S(0)]>) -> !dtensor.tensor<8x2xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, DenseI64ArrayAttr:$offsets,
                       DenseI64ArrayAttr:$sizes, DenseI64ArrayAttr:$strides);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let family = "slice";
  let torchFunctions = ["narrow", "split", "chunk"];
  let tensorMethods = ["__getitem__", "narrow", "split", "chunk"];
  let jointPartial = ["sum", "avg", "max", "min"];
  let kernel = "extract_slice";
  let reference = "x[tuple(slice(o, o + n * s, s) for o, n, s in zip(offsets, sizes, strides))]";
}

def DTensor_ConcatOp : DTensor_ComputeOp<"concat"> {
  let gradient = [
    "g.narrow(dim, concat_offset(inputs, i, dim), inputs[i].shape[dim])"];
  let summary = "Joins tensors along one dim";
  let description = [{
    Operands share the element type and every extent but `dim`'s. The
    joined dim must not be sharded; the others keep their placement.

    ```mlir
    %2 = dtensor.concat %0, %1 {dim = 1 : i64} : (!dtensor.tensor<4x2xf32, #mesh, [S(0)]>, !dtensor.tensor<4x3xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x5xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins Variadic<AnyDTensor>:$inputs, I64Attr:$dim);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
  let family = "concat";
  let torchFunctions = ["cat", "concat"];
  let jointPartial = ["sum", "avg", "max", "min"];
  let reference = "np.concatenate(xs, axis=dim)";
}

def DTensor_GatherOp : DTensor_ComputeOp<"gather"> {
  let gradient = [
    "scatter_add(zeros_like(input), dim, index, g)",
    ""];
  let summary = "torch.gather: values at indices along one dim";
  let description = [{
    `result[p] = input[p with p[dim] = index[p]]`; the result has the
    index's shape and the input's element type; `index` is `i64` with the
    input's rank. The input's `dim` must not be sharded; dims of the index
    may be.

    ```mlir
    %2 = dtensor.gather %0, %1 {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #mesh, [R]>, !dtensor.tensor<4x2xi64, #mesh, [S(0)]>) -> !dtensor.tensor<4x2xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, AnyDTensor:$index, I64Attr:$dim);
  let assemblyFormat = "$input `,` $index attr-dict `:` functional-type(operands, results)";
  let family = "index";
  let torchFunctions = ["gather"];
  let tensorMethods = ["gather"];
  let linearOperands = [0];
  let reference = "np.take_along_axis(x, index, axis=dim)";
}

def DTensor_IndexSelectOp : DTensor_ComputeOp<"index_select"> {
  let gradient = [
    "scatter_add(zeros_like(input), dim, index.reshape([-1 if d == dim else 1 for d in range(g.ndim)]).broadcast_to(g.shape), g)",
    ""];
  let summary = "Rows (along one dim) picked by a 1-D index";
  let description = [{
    The result is the input with extent `len(index)` along `dim`. A sharded
    `dim` of the input is a reduction factor: each rank looks up the rows it
    holds and writes zeros elsewhere, giving a `P(sum)` result (the vocab-
    parallel embedding) without moving the table.

    ```mlir
    %2 = dtensor.index_select %0, %1 {dim = 0 : i64} : (!dtensor.tensor<10x4xf32, #mesh, [S(0)]>, !dtensor.tensor<6xi64, #mesh, [R]>) -> !dtensor.tensor<6x4xf32, #mesh, [P(sum)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, AnyDTensor:$index, I64Attr:$dim);
  let assemblyFormat = "$input `,` $index attr-dict `:` functional-type(operands, results)";
  let family = "index";
  let torchFunctions = ["index_select", "embedding"];
  let tensorMethods = ["index_select"];
  let linearOperands = [0];
  let reference = "np.take(x, index, axis=dim)";
}

def DTensor_ScatterAddOp : DTensor_ComputeOp<"scatter_add"> {
  let gradient = [
    "g",
    "",
    "pad_to(gather(g, dim, index), src.shape)"];
  let summary = "torch.scatter_add: adds src into input at indices along one dim";
  let description = [{
    `result = input`, then `result[p with p[dim] = index[p]] += src[p]` for
    every position `p` of `index`. `dim` must not be sharded.

    ```mlir
    %3 = dtensor.scatter_add %0, %1, %2 {dim = 0 : i64} : (!dtensor.tensor<4x3xf32, #mesh, [R]>, !dtensor.tensor<2x3xi64, #mesh, [R]>, !dtensor.tensor<2x3xf32, #mesh, [R]>) -> !dtensor.tensor<4x3xf32, #mesh, [R]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, AnyDTensor:$index, AnyDTensor:$src,
                       I64Attr:$dim);
  let assemblyFormat = "$input `,` $index `,` $src attr-dict `:` functional-type(operands, results)";
  let family = "index";
  let torchFunctions = ["scatter_add"];
  let tensorMethods = ["scatter_add"];
  let dtypes = ["f32", "f64", "f16", "bf16", "i32", "i64"];
  let reference = "ref_scatter_add(x, dim, index, src)";
}

class DTensor_TriangleOp<string mnemonic, string which, string ref>
    : DTensor_ComputeOp<mnemonic> {
  let summary = "The " # which # " triangle of the last two dims";
  let description = [{
    Elements outside the triangle (relative to `diagonal`) become zero. Every
    dim may stay sharded: each rank knows its piece's global offsets.

    ```mlir
    %1 = dtensor.}] # mnemonic # [{ %0 {diagonal = 0 : i64} : (!dtensor.tensor<4x4xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x4xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, I64Attr:$diagonal);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let family = "triangle";
  let torchFunctions = [mnemonic];
  let tensorMethods = [mnemonic];
  let jointPartial = ["sum", "avg", "max", "min"];
  let reference = ref;
}
def DTensor_TrilOp : DTensor_TriangleOp<"tril", "lower", "np.tril(x, diagonal)"> {
  let gradient = ["tril(g, diagonal)"];
}
def DTensor_TriuOp : DTensor_TriangleOp<"triu", "upper", "np.triu(x, diagonal)"> {
  let gradient = ["triu(g, diagonal)"];
}

def DTensor_IotaOp : DTensor_ComputeOp<"iota"> {
  let summary = "Values that count along one dim: `start + step * i`";
  let description = [{
    ```mlir
    %0 = dtensor.iota {dim = 0 : i64, start = 0.0 : f64, step = 1.0 : f64} : () -> !dtensor.tensor<8xi64, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins I64Attr:$dim, F64Attr:$start, F64Attr:$step);
  let assemblyFormat = "attr-dict `:` functional-type(operands, results)";
  let family = "creation";
  let torchFunctions = ["arange"];
  let dtypes = ["f32", "f64", "f16", "bf16", "i32", "i64"];
  let reference = "ref_iota(shape, dim, start, step)";
}

//===----------------------------------------------------------------------===//
// Layout changes
//===----------------------------------------------------------------------===//

def DTensor_RedistributeOp : DTensor_Op<"redistribute", [Pure]> {
  let gradient = ["like_placements(g, input)"];
  let family = "layout";
  let test = "test/python/test_ops.py::test_redistribute_all_pairs";
  let tensorMethods = ["redistribute"];
  let kernel = "";
  let summary = "The same tensor with other placements";
  let description = [{
    Changes only the layout: shape, element type and mesh stay. Lowered by
    `--dtensor-lower-redistribute` into collective steps.

    ```mlir
    %1 = dtensor.redistribute %0 : !dtensor.tensor<8xf32, #mesh, [S(0)]> -> !dtensor.tensor<8xf32, #mesh, [R]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input);
  let results = (outs AnyDTensor:$result);
  let assemblyFormat = "$input attr-dict `:` qualified(type($input)) `->` qualified(type($result))";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def DTensor_TransferOp : DTensor_Op<"transfer",
    [Pure, AllTypesMatch<["input", "result"]>,
     DeclareOpInterfaceMethods<ShardingRuleOpInterface>]> {
  let gradient = ["transfer(like_placements(g, input), axis, destinations, sources)"];
  let family = "layout";
  let test = "test/python/test_pipelining.py::test_transfer_moves_blocks_between_stages";
  let kernel = "";
  let summary = "Moves blocks of a tensor between positions of a mesh axis";
  let description = [{
    Point-to-point movement between the positions of mesh axis `axis` (the
    stages of a pipeline): the input is `Shard(d)` on `axis`, split evenly
    (tensor dim d is sharded by no other axis and divisible by the axis'
    size), so the rank at coordinate c holds block c of dim d. The result
    has the input's type; its block `destinations[k]` is the input's block
    `sources[k]`, and a block that no pair names is zero. Sources are
    distinct, destinations are distinct, and no pair moves a block onto
    itself. A partial permutation along the axis, so its gradient is the
    transfer with sources and destinations swapped. SPMD lowering makes the
    ranks of a source coordinate `rank.send` their piece to the rank of the
    destination coordinate (same other coordinates), which `rank.recv`s it;
    a coordinate that both sends and receives uses `rank.batch_send_recv`.

    ```mlir
    %1 = dtensor.transfer %0 {axis = 0 : i64, destinations = array<i64: 1>, sources = array<i64: 0>} : !dtensor.tensor<2x4xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, I64Attr:$axis,
                       DenseI64ArrayAttr:$sources,
                       DenseI64ArrayAttr:$destinations);
  let results = (outs AnyDTensor:$result);
  let assemblyFormat = "$input attr-dict `:` qualified(type($input))";
  let hasVerifier = 1;
}

def DTensor_AllToAllVOp : DTensor_Op<"all_to_all_v",
    [Pure, AllTypesMatch<["input", "result"]>,
     DeclareOpInterfaceMethods<ShardingRuleOpInterface>]> {
  let gradient = ["all_to_all_v(g, transposed_counts(counts), axis)", ""];
  let family = "layout";
  let test = "test/python/test_all_to_all_v.py::test_all_to_all_v_matches_numpy_and_its_gradient";
  let kernel = "";
  let summary = "Exchanges counted rows of fixed slots among the positions of a mesh axis";
  let description = [{
    all_to_all with data-dependent counts (an MoE dispatch or combine) with
    static shapes. For the `n` positions of mesh axis `axis`, the input is
    `[n, n * S * C, ...]` and the counts `[n, n * S]` (i64), both `Shard(0)`
    on `axis` (dim 0 split by that axis alone; their dim 1 unsplit), so
    position i holds row block `input[i]`: `n * S` segments of `C` rows,
    segment `(j, s)` bound for position j, and how many of its rows are
    real, `counts[i, j * S + s]` (at most C). The result has the input's
    type: its segment `(i, s)` of block j holds the first
    `counts[i, j * S + s]` rows of the input's segment `(j, s)` of block i,
    and zeros after them. Only the counted rows move (a
    `rank.all_to_all_v` with `segment_rows = C`), so the bytes follow the
    real counts while every shape stays static.

    Linear in the input; its gradient is the same exchange of the result's
    gradient with the counts transposed (`counts'[j, i * S + s] =
    counts[i, j * S + s]`), which sends each row back where it came from.

    ```mlir
    %2 = dtensor.all_to_all_v %0, %1 {axis = 0 : i64} : (!dtensor.tensor<2x8x4xf32, #mesh, [S(0)]>, !dtensor.tensor<2x4xi64, #mesh, [S(0)]>) -> !dtensor.tensor<2x8x4xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, AnyDTensor:$counts, I64Attr:$axis);
  let results = (outs AnyDTensor:$result);
  let assemblyFormat = "$input `,` $counts attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def DTensor_SendOp : DTensor_Op<"send",
    [AllTypesMatch<["input", "result"]>,
     DeclareOpInterfaceMethods<ShardingRuleOpInterface>]> {
  let family = "layout";
  let test = "test/python/test_pipelining.py::test_move_between_stage_meshes";
  let kernel = "";
  let summary = "Sends every rank's piece to a rank of another mesh";
  let description = [{
    One side of moving a tensor between two meshes of the same shape (the
    stages of a pipeline, each on its own ranks): the rank at position p of
    this mesh (row-major) sends its piece to global rank `peers[p]`, which
    runs the matching `dtensor.recv` (same type on its own mesh, same tag).
    The client records both sides and pairs them; the result is the input
    (it keeps the sent value alive until the segment ran). Has a side
    effect: never folded or merged. SPMD lowering gives every position its
    own program and emits `rank.send` with the global peer.

    ```mlir
    %1 = dtensor.send %0 {peers = array<i64: 2, 3>, tag = 0 : i64} : !dtensor.tensor<4x8xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input, DenseI64ArrayAttr:$peers,
                       I64Attr:$tag);
  let results = (outs AnyDTensor:$result);
  let assemblyFormat = "$input attr-dict `:` qualified(type($input))";
  let hasVerifier = 1;
}

def DTensor_RecvOp : DTensor_Op<"recv",
    [DeclareOpInterfaceMethods<ShardingRuleOpInterface>]> {
  let family = "layout";
  let test = "test/python/test_pipelining.py::test_move_between_stage_meshes";
  let kernel = "";
  let summary = "Receives every rank's piece from a rank of another mesh";
  let description = [{
    The other side of `dtensor.send`: the rank at position p of this mesh
    receives its piece (of the result's local shape at p) from global rank
    `peers[p]`.

    ```mlir
    %0 = dtensor.recv {peers = array<i64: 0, 1>, tag = 0 : i64} : !dtensor.tensor<4x8xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins DenseI64ArrayAttr:$peers, I64Attr:$tag);
  let results = (outs AnyDTensor:$result);
  let assemblyFormat = "attr-dict `:` qualified(type($result))";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

def DTensor_FusedAdamOp : DTensor_Op<"fused_adam", [Pure]> {
  let family = "optimizer";
  let test = "test/python/test_fused_adam.py";
  let kernel = "fused_adam";
  let dtypes = ["f32", "f64", "f16", "bf16"];
  let summary = "The Adam or AdamW update of many parameters as one op";
  let description = [{
    torch's `_fused_adamw_`/`_fused_adam_` (what `torch.optim.AdamW(...,
    fused=True)` calls): the update of every parameter of an optimizer group
    in one op, and on each rank in one kernel call. `tensors` holds `n`
    parameters, then their `n` gradients, `n` first moments (`exp_avg`), `n`
    second moments (`exp_avg_sq`) and, with `amsgrad = 1`, `n` running
    maxima of the second moments; the results are the updated parameters,
    first moments, second moments (and maxima), in that order. `step` (the
    step count after this step's increment) and `lr` are 0-d f64 tensors,
    so a schedule or the step count never changes the program. Per element,
    computed in the parameter's type (float32 for float16 and bfloat16):

        g = maximize ? -grad : grad
        g = g + weight_decay * p                  (Adam: decoupled = 0)
        p = p * (1 - lr * weight_decay)           (AdamW: decoupled = 1)
        m = m + (g - m) * (1 - beta1)
        v = v * beta2 + g * g * (1 - beta2)
        vmax = max(vmax, v)                       (amsgrad)
        p = p - lr / (1 - beta1^step) * (m / (sqrt(v or vmax) / sqrt(1 - beta2^step) + eps))

    Every group of parameter `i` is elementwise: its gradient and state
    have the parameter's shape, element type and placements, which the
    results keep, and no placement is Partial (a Partial gradient is
    reduced to the parameter's placements before the op). Each rank
    therefore updates its own pieces, and each result may be written over
    the input it replaces (`--rank-mark-donations`).

    ```mlir
    %r:3 = dtensor.fused_adam %step, %lr, %p, %g, %m, %v {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.01 : f64} : (!dtensor.tensor<f64, #mesh, [R]>, !dtensor.tensor<f64, #mesh, [R]>, !dtensor.tensor<8xf32, #mesh, [S(0)]>, !dtensor.tensor<8xf32, #mesh, [S(0)]>, !dtensor.tensor<8xf32, #mesh, [S(0)]>, !dtensor.tensor<8xf32, #mesh, [S(0)]>) -> (!dtensor.tensor<8xf32, #mesh, [S(0)]>, !dtensor.tensor<8xf32, #mesh, [S(0)]>, !dtensor.tensor<8xf32, #mesh, [S(0)]>)
    ```
  }];
  let arguments = (ins AnyDTensor:$step, AnyDTensor:$lr,
                       Variadic<AnyDTensor>:$tensors, F64Attr:$beta1,
                       F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay,
                       I64Attr:$decoupled, I64Attr:$amsgrad,
                       I64Attr:$maximize);
  let results = (outs Variadic<AnyDTensor>:$results);
  let assemblyFormat =
      "$step `,` $lr `,` $tensors attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Tensors per parameter among the operands: 4, or 5 with amsgrad.
    int64_t getTensorsPerParam() { return getAmsgrad() ? 5 : 4; }
    /// How many parameters the op updates.
    int64_t getNumParams() {
      return static_cast<int64_t>(getTensors().size()) / getTensorsPerParam();
    }
  }];
}

def DTensor_FusedSgdOp : DTensor_Op<"fused_sgd", [Pure]> {
  let family = "optimizer";
  let test = "test/python/test_fused_sgd.py";
  let kernel = "fused_sgd";
  let dtypes = ["f32", "f64", "f16", "bf16"];
  let summary = "The SGD update (momentum, Nesterov, weight decay) of many parameters as one op";
  let description = [{
    torch's `_fused_sgd_` (what `torch.optim.SGD(..., fused=True)` calls):
    the update of every parameter of an optimizer group in one op, and on
    each rank in one kernel call. `tensors` holds `n` parameters, then
    their `n` gradients and, with `momentum != 0` after the first step
    (`first_step = 0`), their `n` momentum buffers; the results are the
    updated parameters, then (with momentum) the momentum buffers. `lr` is
    a 0-d f64 tensor, so a schedule never changes the program; momentum,
    dampening and weight_decay are attributes (the generated kernel reads
    them as call scalars). Per element, computed in the parameter's type
    (float32 for float16 and bfloat16):

        g = maximize ? -grad : grad
        g = g + p * weight_decay                  (weight_decay != 0)
        buf = g                                   (momentum, first_step = 1)
        buf = buf * momentum + g * (1 - dampening)  (momentum, later steps)
        g = nesterov ? g + buf * momentum : buf   (momentum)
        p = p - lr * g

    Without momentum there is no state and `first_step` must be 0;
    `nesterov` needs a momentum. Every group of parameter `i` is
    elementwise: its gradient and buffer have the parameter's shape,
    element type and placements, which the results keep, and no placement
    is Partial (a Partial gradient is reduced to the parameter's placements
    before the op). Each rank therefore updates its own pieces, and each
    result may be written over the input it replaces (the parameter, the
    buffer, or on the first step the gradient; `--rank-mark-donations`).
    An optimizer update: the op has no gradient.

    ```mlir
    %r:2 = dtensor.fused_sgd %lr, %p, %g, %buf {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 0 : i64, weight_decay = 1.0e-04 : f64} : (!dtensor.tensor<f64, #mesh, [R]>, !dtensor.tensor<8xf32, #mesh, [S(0)]>, !dtensor.tensor<8xf32, #mesh, [S(0)]>, !dtensor.tensor<8xf32, #mesh, [S(0)]>) -> (!dtensor.tensor<8xf32, #mesh, [S(0)]>, !dtensor.tensor<8xf32, #mesh, [S(0)]>)
    ```
  }];
  let arguments = (ins AnyDTensor:$lr, Variadic<AnyDTensor>:$tensors,
                       F64Attr:$momentum, F64Attr:$dampening,
                       F64Attr:$weight_decay, I64Attr:$nesterov,
                       I64Attr:$maximize, I64Attr:$first_step);
  let results = (outs Variadic<AnyDTensor>:$results);
  let assemblyFormat =
      "$lr `,` $tensors attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether the update keeps momentum buffers.
    bool hasMomentum() { return getMomentum().convertToDouble() != 0; }
    /// Tensors per parameter among the operands: param and grad, and the
    /// momentum buffer after the first step.
    int64_t getTensorsPerParam() {
      return hasMomentum() && !getFirstStep() ? 3 : 2;
    }
    /// Results per parameter: the parameter, and with momentum its buffer.
    int64_t getResultsPerParam() { return hasMomentum() ? 2 : 1; }
    /// How many parameters the op updates.
    int64_t getNumParams() {
      return static_cast<int64_t>(getTensors().size()) / getTensorsPerParam();
    }
  }];
}

// One step of a lowered redistribution: the placement changes on exactly one
// mesh axis, in the way the op's name says.
class DTensor_LayoutStepOp<string mnemonic, string what>
    : DTensor_Op<mnemonic, [Pure]> {
  let summary = what;
  let family = "layout_step";
  let test = "test/cpp/compiler/RedistributeExactnessTest.cpp";
  let kernel = "";
  let arguments = (ins AnyDTensor:$input, I64Attr:$axis);
  let results = (outs AnyDTensor:$result);
  let assemblyFormat =
      "$input `on` `axis` $axis attr-dict `:` qualified(type($input)) `->` qualified(type($result))";
  let hasVerifier = 1;
}

def DTensor_AllReduceOp : DTensor_LayoutStepOp<"all_reduce",
    "P(op) -> R on one mesh axis: reduce over the axis' group"> {
  let description = [{
    ```mlir
    %1 = dtensor.all_reduce %0 on axis 0 : !dtensor.tensor<8xf32, #mesh, [P(sum)]> -> !dtensor.tensor<8xf32, #mesh, [R]>
    ```
  }];
}
def DTensor_ReduceScatterOp : DTensor_LayoutStepOp<"reduce_scatter",
    "P(op) -> S(d) on one mesh axis: reduce and keep one piece"> {
  let description = [{
    ```mlir
    %1 = dtensor.reduce_scatter %0 on axis 0 : !dtensor.tensor<8xf32, #mesh, [P(sum)]> -> !dtensor.tensor<8xf32, #mesh, [S(0)]>
    ```
  }];
}
def DTensor_AllGatherOp : DTensor_LayoutStepOp<"all_gather",
    "S(d) -> R on one mesh axis: concatenate the pieces of the group"> {
  let description = [{
    ```mlir
    %1 = dtensor.all_gather %0 on axis 0 : !dtensor.tensor<8xf32, #mesh, [S(0)]> -> !dtensor.tensor<8xf32, #mesh, [R]>
    ```
  }];
}
def DTensor_AllToAllOp : DTensor_LayoutStepOp<"all_to_all",
    "S(a) -> S(b) on one mesh axis: exchange pieces within the group"> {
  let description = [{
    ```mlir
    %1 = dtensor.all_to_all %0 on axis 0 : !dtensor.tensor<4x4xf32, #mesh, [S(0)]> -> !dtensor.tensor<4x4xf32, #mesh, [S(1)]>
    ```
  }];
}
def DTensor_LocalSliceOp : DTensor_LayoutStepOp<"local_slice",
    "R -> S(d) on one mesh axis: keep this rank's piece, no communication"> {
  let description = [{
    ```mlir
    %1 = dtensor.local_slice %0 on axis 0 : !dtensor.tensor<8xf32, #mesh, [R]> -> !dtensor.tensor<8xf32, #mesh, [S(0)]>
    ```
  }];
}
def DTensor_ToPartialOp : DTensor_LayoutStepOp<"to_partial",
    "R -> P(op) on one mesh axis, no communication"> {
  let description = [{
    For `P(sum)` the rank at coordinate 0 of the axis keeps the value and the
    others hold zeros; for avg, max and min every rank keeps the value.

    ```mlir
    %1 = dtensor.to_partial %0 on axis 0 : !dtensor.tensor<8xf32, #mesh, [R]> -> !dtensor.tensor<8xf32, #mesh, [P(sum)]>
    ```
  }];
}

#endif // DTENSOR_OPS
