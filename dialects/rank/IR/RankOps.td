//===- RankOps.td - the per-rank dialect ---------------------*- tablegen -*-===//
#ifndef RANK_OPS
#define RANK_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinTypes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Rank_Dialect : Dialect {
  let name = "rank";
  let cppNamespace = "::dtorch::rank";
  let summary = "Per-rank programs: local kernels and collectives";
  let description = [{
    The output of SPMD lowering. A function carrying `rank.rank = r` is the
    program of global rank `r`: its values are builtin tensors with this
    rank's local shapes, its compute is `rank.kernel` (a kernel of the
    runtime's registry, named by string, configured by its attributes) and
    its communication is explicit collectives over groups of global ranks.
    The runtime's protobuf program is emitted one-to-one from it.
  }];
}

class Rank_Op<string mnemonic, list<Trait> traits = []>
    : Op<Rank_Dialect, mnemonic, traits>;

def Rank_KernelOp : Rank_Op<"kernel", [Pure]> {
  let summary = "Runs one kernel of the runtime's registry on local tensors";
  let description = [{
    Every attribute other than `kernel` is passed to the kernel (integers,
    floats, strings, i64 arrays and dense elements).

    ```mlir
    %2 = rank.kernel "add"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %3 = rank.kernel "sum"(%2) {dims = array<i64: 0>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4xf32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins StrAttr:$kernel, Variadic<AnyRankedTensor>:$inputs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat =
      "$kernel `(` $inputs `)` attr-dict `:` functional-type($inputs, results)";
  let hasVerifier = 1;
}

class Rank_CollectiveOp<string mnemonic> : Rank_Op<mnemonic> {
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Rank_AllReduceOp : Rank_CollectiveOp<"all_reduce"> {
  let summary = "Reduces a tensor over a group of ranks";
  let description = [{
    ```mlir
    %1 = rank.all_reduce %0 {group = array<i64: 0, 1>, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, DenseI64ArrayAttr:$group,
                       StrAttr:$reduce);
}

def Rank_AllGatherOp : Rank_CollectiveOp<"all_gather"> {
  let summary = "Concatenates the group's pieces along a dim";
  let description = [{
    `sizes[j]` is the extent along `dim` of member j's piece.

    ```mlir
    %1 = rank.all_gather %0 {group = array<i64: 0, 1>, dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x5xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, DenseI64ArrayAttr:$group,
                       I64Attr:$dim, DenseI64ArrayAttr:$sizes);
}

def Rank_ReduceScatterOp : Rank_CollectiveOp<"reduce_scatter"> {
  let summary = "Reduces over the group and keeps this member's piece";
  let description = [{
    ```mlir
    %1 = rank.reduce_scatter %0 {group = array<i64: 0, 1>, reduce = "sum", dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<7x5xf32> -> tensor<4x5xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, DenseI64ArrayAttr:$group,
                       StrAttr:$reduce, I64Attr:$dim, DenseI64ArrayAttr:$sizes);
}

def Rank_AllToAllOp : Rank_CollectiveOp<"all_to_all"> {
  let summary = "Exchanges pieces within a group";
  let description = [{
    The input is split along `split_dim` into pieces of `split_sizes`; piece
    j goes to member j. The pieces received are concatenated along
    `concat_dim`, member j's having extent `concat_sizes[j]`.

    ```mlir
    %1 = rank.all_to_all %0 {group = array<i64: 0, 1>, split_dim = 1 : i64, split_sizes = array<i64: 3, 2>, concat_dim = 0 : i64, concat_sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x3xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, DenseI64ArrayAttr:$group,
                       I64Attr:$split_dim, DenseI64ArrayAttr:$split_sizes,
                       I64Attr:$concat_dim, DenseI64ArrayAttr:$concat_sizes);
}

#endif // RANK_OPS
