//===- Passes.td - dtensor passes ---------------------------*- tablegen -*-===//
#ifndef DTENSOR_PASSES
#define DTENSOR_PASSES

include "mlir/Pass/PassBase.td"

def PropagateSharding : Pass<"dtensor-propagate-sharding", "::mlir::func::FuncOp"> {
  let summary = "Choose each op's sharding strategy and insert the redistributions it needs";
  let description = [{
    For every op with a sharding rule, picks the cheapest strategy (bytes
    moved) that produces the op's declared result placements, inserts
    `dtensor.redistribute` on operands whose placements differ from the
    strategy's and, when the cheapest way computes a different layout (for
    example a `P(sum)` from a sharded contraction), computes that and
    redistributes the result. Declared result placements never change, so
    what the client already reported stays true. Finally folds redundant
    redistributions (identity, and chains A -> B -> C into A -> C).

    Before:
    ```mlir
    %2 = dtensor.matmul %0, %1 : (!dtensor.tensor<8x4xf32, #mesh, [S(1)]>, !dtensor.tensor<4x6xf32, #mesh, [R]>) -> !dtensor.tensor<8x6xf32, #mesh, [R]>
    ```
    After:
    ```mlir
    %r = dtensor.redistribute %1 : !dtensor.tensor<4x6xf32, #mesh, [R]> -> !dtensor.tensor<4x6xf32, #mesh, [S(0)]>
    %p = dtensor.matmul %0, %r : (...) -> !dtensor.tensor<8x6xf32, #mesh, [P(sum)]>
    %2 = dtensor.redistribute %p : !dtensor.tensor<8x6xf32, #mesh, [P(sum)]> -> !dtensor.tensor<8x6xf32, #mesh, [R]>
    ```
  }];
  let dependentDialects = ["::dtorch::dtensor::DTensorDialect"];
}

def LowerRedistribute : Pass<"dtensor-lower-redistribute", "::mlir::func::FuncOp"> {
  let summary = "Lower every redistribute into per-axis collective steps";
  let description = [{
    Each `dtensor.redistribute` becomes the plan of include/dtorch/Redistribute.h:
    a chain of `dtensor.all_reduce`, `reduce_scatter`, `all_to_all`,
    `all_gather`, `local_slice` and `to_partial`, each changing the placement
    on one mesh axis. Exact for uneven shards and nested splits.

    Before:
    ```mlir
    %1 = dtensor.redistribute %0 : !dtensor.tensor<7x5xf32, #mesh, [P(sum), S(0)]> -> !dtensor.tensor<7x5xf32, #mesh, [S(1), R]>
    ```
    After:
    ```mlir
    %a = dtensor.reduce_scatter %0 on axis 0 : ... [P(sum), S(0)]> -> ... [S(1), S(0)]>
    %1 = dtensor.all_gather %a on axis 1 : ... [S(1), S(0)]> -> ... [S(1), R]>
    ```
  }];
  let dependentDialects = ["::dtorch::dtensor::DTensorDialect"];
}

def LowerToRank : Pass<"dtensor-lower-to-rank", "::mlir::ModuleOp"> {
  let summary = "SPMD lowering: one function of local ops per local-shape class";
  let description = [{
    Replaces every function on dtensors by one function per local-shape
    class of its mesh, `@<name>_class<k>`: the mesh positions whose local
    pieces all have the same shapes share it (an even split: one function
    for the whole mesh; an uneven one adds a class per distinct piece size,
    at most two more per sharded axis). Attribute `rank.mesh` is the mesh
    shape and `rank.positions` the boxes of positions that run it
    (`[lo0, hi0, lo1, hi1, ...]`); its values are builtin tensors of the
    class's local shapes. Compute ops become `rank.kernel` calls (a sharded
    `mean` divides by the global count), layout steps become `rank`
    collectives over a mesh `axis` with exact piece sizes, or local slices.
    What differs between the ranks of a class is a mesh-dependent attribute
    each worker resolves: `#rank.box_offset` (where a rank's piece starts:
    random, iota, constant, tril/triu, index_select), `#rank.chunk_offset`
    (a local slice's start), `#rank.mesh_coord` (`lead_or_zero`, the
    to_partial of a sum). Requires redistributions to be lowered and every
    op's placements to be a local strategy of its rule (run propagation
    first). The cost grows with the number of classes, not of ranks.

    Before (mesh `[2]`):
    ```mlir
    func.func @f(%x: !dtensor.tensor<5xf32, #mesh, [S(0)]>) -> !dtensor.tensor<5xf32, #mesh, [R]> {
      %0 = dtensor.all_gather %x on axis 0 : ... -> !dtensor.tensor<5xf32, #mesh, [R]>
      return %0 : ...
    }
    ```
    After:
    ```mlir
    func.func @f_class0(%x: tensor<3xf32>) -> tensor<5xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
      %0 = rank.all_gather %x {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 3, 2>} : tensor<3xf32> -> tensor<5xf32>
      return %0 : tensor<5xf32>
    }
    func.func @f_class1(%x: tensor<2xf32>) -> tensor<5xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>]} { ... }
    ```
  }];
  let dependentDialects = ["::dtorch::rank::RankDialect",
                           "::mlir::func::FuncDialect"];
}

def PrintShardingRules : Pass<"dtensor-print-sharding-rules", "::mlir::func::FuncOp"> {
  let summary = "Emit every op's sharding rule as a remark";
  let description = [{
    A debugging and testing aid: each op with a sharding rule gets a remark
    such as `sharding rule: ([i, k], [k, j]) -> ([i, j]) reduction={k}:sum
    joint={} linear={0, 1}`. The IR is unchanged.
  }];
}

def ExplainRedistributions : Pass<"dtensor-explain-redistributions", "::mlir::func::FuncOp"> {
  let summary = "Explain every redistribution as a remark: why, how, and the bytes each rank sends";
  let description = [{
    Runs after `--dtensor-propagate-sharding` and emits one remark per
    `dtensor.redistribute`: the op and operand that needed it (at that op),
    or the op whose declared result it produces (at that op), or that the
    program asked for it (at the redistribute); the tensor; the placements
    that change, with the mesh dim names when the mesh has them; the steps
    of its plan (include/dtorch/Redistribute.h); and the bytes each rank
    sends (include/dtorch/RedistributeTraffic.h; a range when pieces are
    uneven). The IR is unchanged. `dtorch.explain()` shows the same
    information for the last segment the client ran.

    Before (after propagation):
    ```mlir
    #mesh = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
    %r = dtensor.redistribute %p : !dtensor.tensor<8x4xf32, #mesh, [S(0), P(sum)]> -> !dtensor.tensor<8x4xf32, #mesh, [S(0), R]>
    %1 = dtensor.add %r, %b : (...) -> !dtensor.tensor<8x4xf32, #mesh, [S(0), R]>
    ```
    After (the IR is the same), at the `dtensor.add`:
    ```
    remark: redistribute for operand 0 of dtensor.add: 8x4xf32 tp: P(sum) -> R by all_reduce(sum) on "tp"; each rank sends 64 bytes
    ```
  }];
}

def StageBoundary : Pass<"dtensor-stage-boundary", "::mlir::ModuleOp"> {
  let summary = "End a stage of the dtensor-to-rank pipeline: verify the module";
  let description = [{
    Marks where a stage of `dtensor-to-rank` ends ("sharded",
    "redistributed", "rank") and verifies the module there, so the IR is
    verified between phases even when the pass manager's verifier after every
    pass is off (as in the compiler). It changes nothing. A `StageObserver`
    instrumentation (Passes.h) prints the module after it when `last_ir`
    asks for the stages.

    Before and after (unchanged):
    ```mlir
    func.func @f(%x: !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [S(0)]>) -> ... {
      %0 = dtensor.relu %x : ...
      return %0 : ...
    }
    ```
  }];
  let options = [
    Option<"stage", "stage", "std::string", /*default=*/"\"\"",
           "the stage this pass ends">
  ];
}

def FuseElementwise : Pass<"rank-fuse-elementwise", "::mlir::func::FuncOp"> {
  let summary = "Group chains of elementwise rank.kernel ops into rank.fused";
  let description = [{
    Runs on a class function (rank dialect). Walks its ops in order and
    grows a group of fusible kernels (rank/IR/FusibleKernels.h: elementwise
    kernels, `full`, and `broadcast_to`, whose input becomes a broadcast
    operand of the group) that share one result shape and element type. An
    op outside the group that reads a value of the group, a collective, or a
    kernel of another shape or element type ends the group; ops the group
    does not feed may sit between its members. A group of at least two ops,
    one of them computing, becomes one `rank.fused` placed at its last
    member: its inputs are the values it reads from outside, its results
    the values of the group used outside it (by later ops or the return).
    Empty pieces and groups whose values nobody reads stay as they are.
    The emitter compiles each `rank.fused` body to native code. A group
    holds at most `max-ops` ops: a longer chain becomes several groups of
    the same structure, which share one generated kernel (constants are
    kernel arguments), so compile time stays bounded.

    Before:
    ```mlir
    %1 = rank.kernel "full"() {value = 2.0 : f64} : () -> tensor<4xf32>
    %2 = rank.kernel "mul"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %3 = rank.kernel "relu"(%2) : (tensor<4xf32>) -> tensor<4xf32>
    ```
    After:
    ```mlir
    %3 = rank.fused(%0) : (tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%a: tensor<4xf32>):
      %1 = rank.kernel "full"() {value = 2.0 : f64} : () -> tensor<4xf32>
      %2 = rank.kernel "mul"(%a, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      %r = rank.kernel "relu"(%2) : (tensor<4xf32>) -> tensor<4xf32>
      rank.yield %r : tensor<4xf32>
    }
    ```
  }];
  let dependentDialects = ["::dtorch::rank::RankDialect"];
  let options = [
    Option<"maxOps", "max-ops", "unsigned", /*default=*/"128",
           "The most ops one group holds">,
  ];
}

#endif // DTENSOR_PASSES
