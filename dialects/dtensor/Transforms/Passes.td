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

def CheckedCSE : Pass<"dtensor-cse", "::mlir::func::FuncOp"> {
  let summary = "Common subexpression elimination, run only where it can change something";
  let description = [{
    The pipeline's CSE (after sharding propagation: it merges the identical
    redistributions inserted for several readers of one value). One sweep
    first hashes every op the way MLIR's `cse` compares them (name,
    operands, attributes and properties, result types; locations ignored)
    and checks for trivially dead ops. When no two ops share a hash and
    none is dead, nothing could merge or be erased and the function is left
    as it is; otherwise (or when the body has more than one block or ops
    with regions) MLIR's `cse` runs on it. The result is the same IR as
    `cse` in every case; a chain of distinct ops (a cold segment) costs one
    hash per op instead of CSE's scoped tables and dominance queries.

    Before and after (the second `relu` merged into the first):
    ```mlir
    %0 = dtensor.relu %x : ...
    %1 = dtensor.relu %x : ...
    %2 = dtensor.add %0, %1 : ...
    // after:
    %0 = dtensor.relu %x : ...
    %2 = dtensor.add %0, %0 : ...
    ```
  }];
  let statistics = [
    Statistic<"numSkipped", "skipped",
              "functions left as they were: nothing could merge or be erased">,
    Statistic<"numRun", "run", "functions on which MLIR's cse ran">
  ];
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

def PlanBuffers : Pass<"rank-plan-buffers", "::mlir::func::FuncOp"> {
  let summary = "Buffer planning: place every temporary of a class program in one per-rank arena";
  let description = [{
    Runs on the class functions that `--dtensor-lower-to-rank` made (any
    mesh, any class) and assigns every temporary, a value that is neither a
    function argument nor returned, an offset in one per-rank arena. The
    live range of a value runs, in program order, from the op that makes it
    to the last op that may still run before all its uses are done: a
    collective runs on the communication stream, concurrently with the
    kernels after it until a kernel waits for one of its results, so a value
    read by a collective stays live until such a wait (the rule of
    include/dtorch/BufferPlan.h, which the runtime's validator applies
    again). Values whose ranges are disjoint share memory; an elementwise
    kernel whose input dies there writes its result over that input
    (in place); then a greedy best fit places the slots by decreasing size,
    then first use, at 64-byte alignment. Arguments and results keep their
    own storage (the rank's tensor table owns them).

    Each planned op gets `rank.arena_offset` (bytes); the function gets
    `rank.arena_bytes`, the arena's size: the peak bytes of its
    temporaries. The emitter writes them into the program
    (`Program.buffer_offsets`, `Program.arena_bytes`).

    Before:
    ```mlir
    func.func @f_class0(%x: tensor<4xf32>) -> tensor<4xf32> attributes {rank.mesh = array<i64: 2>, ...} {
      %0 = rank.kernel "exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      %1 = rank.kernel "neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
      %2 = rank.kernel "add"(%1, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      return %2 : tensor<4xf32>
    }
    ```
    After (`%1` is written over `%0`, `%2` is returned):
    ```mlir
    func.func @f_class0(...) attributes {rank.arena_bytes = 64 : i64, ...} {
      %0 = rank.kernel "exp"(%x) {rank.arena_offset = 0 : i64} : ...
      %1 = rank.kernel "neg"(%0) {rank.arena_offset = 0 : i64} : ...
      %2 = rank.kernel "add"(%1, %x) : ...
    ```
    With `report=true` each planned function also gets a remark with the
    arena's size, the bytes its temporaries take without planning and the
    number of in-place results (what `dtorch-opt` reports as a function's
    peak temporary bytes).

    With `views=true` (the default) a `reshape` of a temporary into a
    temporary of the same bytes is a view: it gets its source's offset even
    when the source is read after it, and the source's memory stays theirs
    until the last use of either (their live ranges merged, the rule of
    `bufplan::viewAliases`), so no other value takes it and no elementwise
    kernel writes over it in place while one of them may still be read.
    The reshape then finds its output at its input's address and copies
    nothing. The compiler passes `views=false` when `DTORCH_PLAN_VIEWS=0`.

    Before (`%0` is read after the reshape):
    ```mlir
    %0 = rank.kernel "exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = rank.kernel "reshape"(%0) : (tensor<4xf32>) -> tensor<2x2xf32>
    %2 = rank.kernel "sum"(%1) ...
    %3 = rank.kernel "add"(%0, %x) ...
    ```
    After: `%1` is `%0`'s memory (`rank.arena_offset = 0` on both), and
    `%2` cannot take that memory while `%0` is still read.

    With `result-views=true` (the default; the compiler passes false for
    CUDA programs and when `DTORCH_PLAN_VIEWS=0`) a temporary that a
    returned `reshape` reads keeps storage of its own instead of an arena
    offset: the host executor binds the returned value as a view of it, so
    its storage becomes the result's and the reshape copies nothing.
  }];
  let options = [
    Option<"report", "report", "bool", /*default=*/"false",
           "emit a remark per function with its arena size and savings">,
    Option<"views", "views", "bool", /*default=*/"true",
           "place a reshape of a temporary at its source's offset (a view)">,
    Option<"resultViews", "result-views", "bool", /*default=*/"true",
           "give the source of a returned reshape storage of its own (the "
           "host executor makes the result a view of it)">
  ];
}

def MarkDonations : Pass<"rank-mark-donations", "::mlir::func::FuncOp"> {
  let summary = "Pair results with the arguments whose storage they may take (donation)";
  let description = [{
    Runs on the class functions of rank ops (after `--dtensor-lower-to-rank`)
    and says, per result, which argument's storage the result may take over
    when the caller donates that argument (gives up every other name for
    it): the `rank.output_donors` function attribute, one entry per result,
    the argument number or -1. An optimizer step writes every parameter and
    its state anew: with donation the new values live where the old ones
    were, so a step does not hold both.

    A result may take argument `a` when both have the same bytes, neither is
    returned twice or passed through, and every access of `a` happens before
    the op writing the result (the happens-before of
    include/dtorch/BufferPlan.h, streams and events included), or that op
    reads `a` elementwise at the index it writes (an in-place kernel, or a
    `rank.fused` group of elementwise kernels without row reductions reading
    `a` at its shape) and every other access happens before it. Each
    argument is given to at most one result; a result prefers the arguments
    it is computed from (nearest first, within a few ops), then, with
    `any-argument`, any other.

    The emitter writes the attribute into the program
    (`Program.output_donors`); a run that donates an input (`RunProgram.donated`)
    lets the output take its storage when no other handle shares it.

    Before:
    ```mlir
    func.func @step(%p: tensor<4xf32>, %g: tensor<4xf32>) -> tensor<4xf32> attributes {...} {
      %0 = rank.kernel "mul"(%g, %g) : ...
      %1 = rank.kernel "sub"(%p, %0) : ...
      return %1 : tensor<4xf32>
    }
    ```
    After: `%1` may be written over `%p` (sub is elementwise and `%p` has no
    other use), so the function gets `rank.output_donors = array<i64: 0>`.
  }];
  let options = [
    Option<"anyArgument", "any-argument", "bool", /*default=*/"true",
           "pair a result with any dead argument of its size when none it "
           "is computed from qualifies">
  ];
}

def ScheduleCollectives : Pass<"rank-schedule-collectives", "::mlir::ModuleOp"> {
  let summary = "Issue collectives as soon as their inputs exist and bucket small all_reduces";
  let description = [{
    Runs on the class programs of the rank dialect (after
    `--dtensor-lower-to-rank`) so that communication overlaps compute:

    1. Early issue. Every collective moves up to right after the last
       producer of its operands, taking with it the pure kernels that
       compute its operands (each to right after its own operands, but
       never above the first consumer of a collective whose result it
       needs: the compute stream must not wait earlier than it did).
       Collectives keep their
       relative order, so every rank issues them in the same order. An
       `all_gather` (the prefetch of an FSDP parameter) is held back while
       the gathers issued before it and not yet consumed hold more than
       `prefetch-bytes` (it then goes after the first consumer of the
       oldest of them), which bounds the memory of prefetched parameters.
       The function gets the unit attribute `rank.scheduled`: the emitter
       then makes each collective wait also for the compute instruction
       right before it, so its position bounds how early it runs.
    2. Bucketing. Consecutive `all_reduce`s (in issue order) on the same
       axis, reduction and element type are packed into one flat buffer
       (`rank.kernel "bucket_pack"`), reduced by one `all_reduce` placed
       where the last member was, and split back (`rank.kernel
       "bucket_unpack"` with the member's element `offset`), each piece
       right before the first user of the member it replaces. A bucket
       closes at `bucket-cap-bytes`, lowered to a quarter (`min-buckets`)
       of all the all_reduce bytes of the function (but not below
       `bucket-floor-bytes`) so that a small model still gets several
       buckets to overlap; a member whose result is used before the last
       member's position closes it too. `bucket-cap-bytes=0` disables
       bucketing. The class functions of one segment (`@f_class<k>`) are
       bucketed identically (decisions from the largest piece of each
       member); when their all_reduces differ, none is bucketed.

    Before:
    ```mlir
    %g1 = rank.kernel "transpose"(%a) {perm = array<i64: 1, 0>} : ...
    %w = rank.kernel "matmul"(%x, %y) : ...
    %g2 = rank.kernel "neg"(%b) : ...
    %r1 = rank.all_reduce %g1 {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
    %r2 = rank.all_reduce %g2 {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
    ```
    After:
    ```mlir
    %g1 = rank.kernel "transpose"(%a) ...
    %g2 = rank.kernel "neg"(%b) ...
    %p = rank.kernel "bucket_pack"(%g1, %g2) : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<20xf32>
    %r = rank.all_reduce %p {axis = 0 : i64, reduce = "sum"} : tensor<20xf32> -> tensor<20xf32>
    %w = rank.kernel "matmul"(%x, %y) : ...
    %r1 = rank.kernel "bucket_unpack"(%r) {offset = 0 : i64} : (tensor<20xf32>) -> tensor<4x4xf32>
    ```
  }];
  let options = [
    Option<"bucketCapBytes", "bucket-cap-bytes", "int64_t",
           /*default=*/"25 << 20",
           "most bytes per all_reduce bucket (0: no bucketing)">,
    Option<"bucketFloorBytes", "bucket-floor-bytes", "int64_t",
           /*default=*/"4 << 10",
           "the bucket cap is never lowered below this">,
    Option<"minBuckets", "min-buckets", "int64_t", /*default=*/"4",
           "the cap is lowered to the function's all_reduce bytes over this">,
    Option<"prefetchBytes", "prefetch-bytes", "int64_t",
           /*default=*/"64 << 20",
           "most bytes of gathered values issued ahead of their consumers">
  ];
  let dependentDialects = ["::dtorch::rank::RankDialect"];
}

def FoldTransposeIntoMatmul : Pass<"rank-fold-transpose-into-matmul", "::mlir::func::FuncOp"> {
  let summary = "Read transposed GEMM operands through the BLAS instead of materialising the transpose";
  let description = [{
    Runs on a class function (rank dialect), right after SPMD lowering, so
    the placements are settled and every rewrite is an identity on each
    rank's local pieces (a sharded operand's local piece is transposed
    exactly as the global value is). A `transpose` kernel that swaps the
    last two dims (and keeps the others) is folded into the GEMMs around
    it, `matmul` (2-D) and `bmm` (batched: each product's operand is still
    dense, so the batch strides do not change):

    1. An operand of a GEMM made by such a transpose is replaced by the
       transpose's input, and the GEMM's `trans_a` (operand 0) or
       `trans_b` (operand 1) flag is toggled: the runtime's kernel passes
       it to the BLAS as op(A) = A^T. A chain of two transposes folds
       twice and leaves the flag as it was.
    2. Such a transpose of a GEMM's result, when it is the result's only
       reader, becomes one GEMM: `(op(a) op(b))^T = op(b)^T op(a)^T`, the
       operands swapped and both flags flipped.
    3. A transpose of a transpose reads the first one's input with the
       composed permutation (the input itself when that is the identity),
       unless it swaps the last two dims for a GEMM that reads it (1.
       folds it there).

    A transpose left without readers is erased; one that something else
    reads stays. A cleared flag is left out (the kernel's default is 0).
    Functions that `--rank-plan-buffers` already planned are left alone.
    The flags are the kernel attributes `trans_a` / `trans_b` (i64, 1),
    carried to the runtime like any other (docs/program-format.md).

    Before (linear's `x @ w^T` and its weight gradient `(x^T g)^T`):
    ```mlir
    %0 = rank.kernel "transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<16x8xf32>) -> tensor<8x16xf32>
    %1 = rank.kernel "matmul"(%x, %0) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
    %2 = rank.kernel "transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32>
    %3 = rank.kernel "matmul"(%2, %g) : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
    %4 = rank.kernel "transpose"(%3) {perm = array<i64: 1, 0>} : (tensor<8x16xf32>) -> tensor<16x8xf32>
    ```
    After:
    ```mlir
    %1 = rank.kernel "matmul"(%x, %w) {trans_b = 1 : i64} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
    %4 = rank.kernel "matmul"(%g, %x) {trans_a = 1 : i64} : (tensor<4x16xf32>, tensor<4x8xf32>) -> tensor<16x8xf32>
    ```
  }];
  let dependentDialects = ["::dtorch::rank::RankDialect"];
}

def FoldTransposeIntoBmm : Pass<"rank-fold-transpose-into-bmm", "::mlir::func::FuncOp"> {
  let summary = "Read and write a bmm's operands and result through permuted leading dims instead of materialising their transposes";
  let description = [{
    Runs on a class function (rank dialect) after
    `--rank-fold-transpose-into-matmul`. Attention splits [B, T, D] into
    heads with a reshape to [B, T, H, D/H] and a transpose of dims 1 and 2
    before each `bmm`, and joins them back with the inverse transpose
    after it; each transpose is a copy of the whole tensor. Here a
    `transpose` whose perm keeps the last dim last (it moves leading dims
    only) is folded into the `bmm` around it:

    1. An operand of a `bmm` made by such a transpose is replaced by the
       transpose's input, and the bmm gets `a_perm` (operand 0) or
       `b_perm` (operand 1) = the transpose's perm: the product reads
       transpose(input, perm). A transpose left without readers is erased.
    2. Such a transpose of a bmm's result, when it is the result's only
       reader, becomes the bmm's `out_perm`: the bmm writes
       transpose(product, perm) itself.

    The runtime's kernel walks the batch dims with the permuted strides and
    hands each product to the BLAS with the row stride of its dims (the
    last dim stays contiguous), so the products and their summation order
    are those of the dense bmm: results are bitwise the same. An operand or
    result that already has a perm is left as it is. Functions that
    `--rank-plan-buffers` already planned are left alone. The compiler runs
    it for CPU meshes unless `DTORCH_FOLD_BMM_LAYOUT=0` (the CUDA bmm,
    one strided-batched cuBLAS call, takes no perms).

    Before (the scores of attention):
    ```mlir
    %qh = rank.kernel "transpose"(%q) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
    %kh = rank.kernel "transpose"(%k) {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
    %s = rank.kernel "bmm"(%qh, %kh) {trans_b = 1 : i64} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x8xf32>
    ```
    After:
    ```mlir
    %s = rank.kernel "bmm"(%q, %k) {a_perm = array<i64: 0, 2, 1, 3>, b_perm = array<i64: 0, 2, 1, 3>, trans_b = 1 : i64} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x4x8x8xf32>
    ```
  }];
  let dependentDialects = ["::dtorch::rank::RankDialect"];
}

def MatchPointToPoint : Pass<"rank-match-p2p", "::mlir::ModuleOp"> {
  let summary = "Pair every rank.send with its rank.recv; fail on a mismatch";
  let description = [{
    Runs on the class programs of the rank dialect. A message is matched by
    (sender, receiver, tag) in issue order, so for every position P of a
    class function and every point-to-point op of it (`rank.send`,
    `rank.recv`, `rank.batch_send_recv`), the pass finds the program running
    at the peer position (P with its coordinate on the op's `axis` replaced
    by `peer`) and checks that it issues, on the same (axis, tag) channel
    and in the same order, the opposite operations with the same tensor
    types. A send without its receive (or a receive without its send, a
    message of another shape or element type, or a peer position that no
    program runs at) is a compile error at the op, with the peer program
    and the counts, never a hang at run time. Functions without
    point-to-point ops are not looked at.

    Sends and receives without an `axis` name a global rank: the two sides
    of a move between meshes (pipeline stages), compiled in two segments.
    Where the class functions carry `rank.global_ranks` (the global rank of
    every position of their mesh), the pass pairs them across every function
    of the module that does, in module order (the order the ranks run
    them): the k-th message from global rank A to global rank B with tag T
    must be a send in A's programs and a receive of the same type in B's;
    the diagnostic names both functions. SPMD lowering sets
    `rank.global_ranks` from the dtensor function's `dtensor.global_ranks`,
    which the controller gives every segment that sends or receives across
    meshes. A message to or from a rank that no function of the module runs
    is not checked here (its program is compiled elsewhere: the controller
    pairs the moves of segments compiled apart in run order).

    ```mlir
    // error: 'rank.send' op sends tensor<4xf32> (message 0 on axis 0, tag 0)
    // but @f_class1 at coordinate 1 receives tensor<8xf32>
    ```
  }];
  let dependentDialects = ["::dtorch::rank::RankDialect"];
}

def RematerializeBroadcasts : Pass<"rank-rematerialize-broadcasts", "::mlir::func::FuncOp"> {
  let summary = "Give each later fused reader of a constant or a broadcast its own copy";
  let description = [{
    Runs on a class function (rank dialect) right before
    `--rank-fuse-elementwise`. CSE leaves one `full` per value and shape,
    and autograd saves the operands of the forward (a softmax's scale, its
    mask spread over the heads, a broadcast row maximum or a layer norm's
    weight spread over the rows) for the backward. Fusion then stores such
    a value as a whole tensor, a result of the first group that reads it,
    and every later group loads it again: for the GPT step's softmax, five
    of the eight tensors its forward group writes were constants or
    broadcasts.

    For each `full`, `iota` and `broadcast_to` kernel that fusion takes in,
    every reader after the first one in program order that is a fusible
    computing kernel (elementwise, comparison, `where`, `cast`) or a `sum`,
    `max` or `min` gets a copy of it placed right before it; the first
    reader and any other reader (a GEMM, a collective, the return) keep the
    original. A broadcast's copy reads the broadcast's input, so a group
    stores the small per-row value (or nothing: a parameter) instead of its
    spread. The copies compute the same values, so results are bitwise the
    same. Functions that `--rank-plan-buffers` already planned are left
    alone. The compiler runs it unless `DTORCH_REMATERIALIZE=0`.

    Before (the backward reads the forward's broadcast):
    ```mlir
    %b = rank.kernel "broadcast_to"(%m) : (tensor<4x1xf32>) -> tensor<4x8xf32>
    %y = rank.kernel "sub"(%x, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %z = rank.kernel "mul"(%g, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    ```
    After:
    ```mlir
    %b = rank.kernel "broadcast_to"(%m) : (tensor<4x1xf32>) -> tensor<4x8xf32>
    %y = rank.kernel "sub"(%x, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %b2 = rank.kernel "broadcast_to"(%m) : (tensor<4x1xf32>) -> tensor<4x8xf32>
    %z = rank.kernel "mul"(%g, %b2) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let dependentDialects = ["::dtorch::rank::RankDialect"];
}

def FuseElementwise : Pass<"rank-fuse-elementwise", "::mlir::func::FuncOp"> {
  let summary = "Group chains of elementwise rank.kernel ops into rank.fused";
  let description = [{
    Runs on a class function (rank dialect). Walks its ops in order and
    grows groups of fusible kernels (rank/IR/FusibleKernels.h: elementwise
    kernels, comparisons into `i1`, `where`, `cast`, `full`, `iota`, and
    `broadcast_to`, whose input becomes a broadcast operand of the group)
    that share one result shape; their element types may differ. A kernel
    of another shape that reads no open group starts a group of its own
    while the others stay open (at most four at once); an op outside a
    group that reads a value of it ends that group, and a collective ends
    all; ops a group does not feed may sit between its members. A
    `broadcast_to` of a `full` becomes a `full` of its shape first. A group
    of at least two ops,
    one of them computing, becomes one `rank.fused` placed at its last
    member: its inputs are the values it reads from outside, its results
    the values of the group used outside it (by later ops or the return).
    Empty pieces and groups whose values nobody reads stay as they are.

    A group may also take in float reductions (`sum`, `max`, `min`) over
    the innermost dims of its type (the group's rows: softmax, layer_norm,
    log_softmax), elementwise ops and `full` on the reductions' result type
    (per-row values: eps, rsqrt), and `broadcast_to` of a per-row value with
    kept dims back over the rows. All reductions of a group reduce the same
    number of trailing dims. Its kernel computes the group one row at a
    time, bitwise as the runtime's kernels (KernelCodegen.h).
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
    Option<"rowReductions", "row-reductions", "bool", /*default=*/"true",
           "Take in row reductions (off where the kernels are generated "
           "for the GPU, which has no row kernels yet)">,
    Option<"mixedTypes", "mixed-types", "bool", /*default=*/"true",
           "Let a group mix element types (comparisons, where, casts, iota), "
           "collect groups of several shapes at once and fold broadcasts of "
           "constants; off: one element type and one open group (for "
           "comparison)">,
  ];
}

#endif // DTENSOR_PASSES
