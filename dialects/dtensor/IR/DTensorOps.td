//===- DTensorOps.td - dtensor ops ---------------------------*- tablegen -*-===//
#ifndef DTENSOR_OPS
#define DTENSOR_OPS

include "DTensorTypes.td"
include "ShardingRuleInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class DTensor_Op<string mnemonic, list<Trait> traits = []>
    : Op<DTensor_Dialect, mnemonic, traits>;

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

class DTensor_BinaryOp<string mnemonic, string what>
    : DTensor_ComputeOp<mnemonic> {
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

def DTensor_AddOp : DTensor_BinaryOp<"add", "addition">;
def DTensor_SubOp : DTensor_BinaryOp<"sub", "subtraction">;
def DTensor_MulOp : DTensor_BinaryOp<"mul", "multiplication">;
def DTensor_DivOp : DTensor_BinaryOp<"div", "division">;
def DTensor_MaximumOp : DTensor_BinaryOp<"maximum", "maximum">;
def DTensor_MinimumOp : DTensor_BinaryOp<"minimum", "minimum">;
def DTensor_PowOp : DTensor_BinaryOp<"pow", "power">;

class DTensor_UnaryOp<string mnemonic, string what>
    : DTensor_ComputeOp<mnemonic> {
  let summary = "Elementwise " # what;
  let description = [{
    ```mlir
    %1 = dtensor.}] # mnemonic # [{ %0 : (!dtensor.tensor<4x4xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x4xf32, #mesh, [S(0)]>
    ```
  }];
  let arguments = (ins AnyDTensor:$input);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
}

def DTensor_NegOp : DTensor_UnaryOp<"neg", "negation">;
def DTensor_AbsOp : DTensor_UnaryOp<"abs", "absolute value">;
def DTensor_ExpOp : DTensor_UnaryOp<"exp", "exponential">;
def DTensor_LogOp : DTensor_UnaryOp<"log", "natural logarithm">;
def DTensor_SqrtOp : DTensor_UnaryOp<"sqrt", "square root">;
def DTensor_RsqrtOp : DTensor_UnaryOp<"rsqrt", "reciprocal square root">;
def DTensor_ReluOp : DTensor_UnaryOp<"relu", "rectified linear unit">;
def DTensor_TanhOp : DTensor_UnaryOp<"tanh", "hyperbolic tangent">;
def DTensor_SigmoidOp : DTensor_UnaryOp<"sigmoid", "logistic sigmoid">;
def DTensor_GeluOp : DTensor_UnaryOp<"gelu", "GELU (erf form)">;
def DTensor_SiluOp : DTensor_UnaryOp<"silu", "SiLU (x * sigmoid(x))">;
def DTensor_SinOp : DTensor_UnaryOp<"sin", "sine">;
def DTensor_CosOp : DTensor_UnaryOp<"cos", "cosine">;

def DTensor_CastOp : DTensor_ComputeOp<"cast"> {
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
  let summary = "Batched matrix product of two 3-D tensors";
  let description = [{
    `[B, M, K] x [B, K, N] -> [B, M, N]`.

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

class DTensor_ReductionOp<string mnemonic, string what>
    : DTensor_ComputeOp<mnemonic> {
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

def DTensor_SumOp : DTensor_ReductionOp<"sum", "Sum">;
def DTensor_MeanOp : DTensor_ReductionOp<"mean", "Arithmetic mean">;
def DTensor_MaxOp : DTensor_ReductionOp<"max", "Maximum">;

//===----------------------------------------------------------------------===//
// Shape
//===----------------------------------------------------------------------===//

def DTensor_ReshapeOp : DTensor_ComputeOp<"reshape"> {
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

//===----------------------------------------------------------------------===//
// Layout changes
//===----------------------------------------------------------------------===//

def DTensor_RedistributeOp : DTensor_Op<"redistribute", [Pure]> {
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

// One step of a lowered redistribution: the placement changes on exactly one
// mesh axis, in the way the op's name says.
class DTensor_LayoutStepOp<string mnemonic, string what>
    : DTensor_Op<mnemonic, [Pure]> {
  let summary = what;
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
