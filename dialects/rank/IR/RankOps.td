//===- RankOps.td - the per-rank dialect ---------------------*- tablegen -*-===//
#ifndef RANK_OPS
#define RANK_OPS

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/BuiltinTypes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Rank_Dialect : Dialect {
  let name = "rank";
  let cppNamespace = "::dtorch::rank";
  let summary = "Per-rank programs: local kernels and collectives";
  let description = [{
    The output of SPMD lowering. A function carrying `rank.mesh` (the mesh
    shape) and `rank.positions` (the boxes of mesh positions that run it) is
    the program of one local-shape class: every rank at one of those
    positions runs it. Its values are builtin tensors with the class's local
    shapes, its compute is `rank.kernel` (a kernel of the runtime's registry,
    named by string, configured by its attributes) and its communication is
    collectives over a mesh axis (the ranks that share every other
    coordinate). Values that differ between the ranks of a class (the offset
    of a rank's piece, its coordinate) are mesh-dependent attributes
    (`#rank.box_offset`, `#rank.chunk_offset`, `#rank.mesh_coord`) that each
    worker resolves from its mesh coordinates. The runtime's protobuf
    program is emitted one-to-one from it. After `--rank-plan-buffers`, an
    op whose result is a temporary carries `rank.arena_offset` (its byte
    offset, a multiple of 64, in the rank's arena) and the function
    `rank.arena_bytes` (the arena's size).
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
}

class Rank_Attr<string name, string attrMnemonic>
    : AttrDef<Rank_Dialect, name> {
  let mnemonic = attrMnemonic;
  let assemblyFormat = "`<` struct(params) `>`";
}

def Rank_BoxOffsetAttr : Rank_Attr<"BoxOffset", "box_offset"> {
  let summary = "Where this rank's piece of a global tensor starts";
  let description = [{
    The offset of the box that the rank at the worker's mesh coordinates
    holds of a tensor of `global_shape` whose mesh axis `a` shards tensor
    dim `shard_dims[a]` (-1: the axis does not shard it), with torch.chunk
    pieces applied in mesh-axis order. `dim = -1` gives the whole offset
    (ints); `dim = d` gives its entry d (an integer).

    ```mlir
    offset = #rank.box_offset<global_shape = array<i64: 10, 4>, shard_dims = array<i64: 0>, dim = -1>
    ```
  }];
  let parameters = (ins "::mlir::DenseI64ArrayAttr":$global_shape,
                        "::mlir::DenseI64ArrayAttr":$shard_dims,
                        "int64_t":$dim);
}

def Rank_ChunkOffsetAttr : Rank_Attr<"ChunkOffset", "chunk_offset"> {
  let summary = "Start of this rank's torch.chunk piece along a mesh axis";
  let description = [{
    `chunkOffset(extent, mesh[axis], coordinate[axis])`: where this rank's
    piece starts when `extent` elements are split over mesh axis `axis`.

    ```mlir
    start = #rank.chunk_offset<axis = 1, extent = 4>
    ```
  }];
  let parameters = (ins "int64_t":$axis, "int64_t":$extent);
}

def Rank_MeshCoordAttr : Rank_Attr<"MeshCoord", "mesh_coord"> {
  let summary = "This rank's coordinate along a mesh axis";
  let description = [{
    ```mlir
    coord = #rank.mesh_coord<axis = 0>
    ```
  }];
  let parameters = (ins "int64_t":$axis);
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
  let summary = "Reduces a tensor over the ranks of a mesh axis";
  let description = [{
    ```mlir
    %1 = rank.all_reduce %0 {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$axis,
                       StrAttr:$reduce);
}

def Rank_AllGatherOp : Rank_CollectiveOp<"all_gather"> {
  let summary = "Concatenates the pieces of a mesh axis' ranks along a dim";
  let description = [{
    `sizes[j]` is the extent along `dim` of the piece of the rank at
    coordinate j of mesh axis `axis`.

    ```mlir
    %1 = rank.all_gather %0 {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x5xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$axis,
                       I64Attr:$dim, DenseI64ArrayAttr:$sizes);
}

def Rank_ReduceScatterOp : Rank_CollectiveOp<"reduce_scatter"> {
  let summary = "Reduces over a mesh axis and keeps this rank's piece";
  let description = [{
    ```mlir
    %1 = rank.reduce_scatter %0 {axis = 0 : i64, reduce = "sum", dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<7x5xf32> -> tensor<4x5xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$axis,
                       StrAttr:$reduce, I64Attr:$dim, DenseI64ArrayAttr:$sizes);
}

def Rank_AllToAllOp : Rank_CollectiveOp<"all_to_all"> {
  let summary = "Exchanges pieces among the ranks of a mesh axis";
  let description = [{
    The input is split along `split_dim` into pieces of `split_sizes`; piece
    j goes to the rank at coordinate j of `axis`. The pieces received are
    concatenated along `concat_dim`, that rank's having extent
    `concat_sizes[j]`.

    ```mlir
    %1 = rank.all_to_all %0 {axis = 0 : i64, split_dim = 1 : i64, split_sizes = array<i64: 3, 2>, concat_dim = 0 : i64, concat_sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x3xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, I64Attr:$axis,
                       I64Attr:$split_dim, DenseI64ArrayAttr:$split_sizes,
                       I64Attr:$concat_dim, DenseI64ArrayAttr:$concat_sizes);
}

def Rank_AllToAllVOp : Rank_Op<"all_to_all_v"> {
  let summary = "Exchanges rows of data-dependent counts among the ranks of a mesh axis";
  let description = [{
    all_to_all with uneven counts (torch's `all_to_all_single` with split
    sizes), for an MoE dispatch whose counts depend on the routing. Rows
    `[offset_j, offset_j + send_counts[j])` of the input (dim 0; `offset_j`
    the sum of the counts before j) go to the rank at coordinate j of
    `axis`. The counts travel first, then the rows
    (runtime/include/dtorch/runtime/AllToAllV.h). Shapes stay static: the
    result has a fixed upper bound of rows (e.g. every token of every rank),
    holds the rows received at its front, coordinate by coordinate, and is
    zero after them; `recv_counts[j]` is the number of rows coordinate j
    sent. Both count tensors are 1-D i64 with one entry per coordinate of
    the axis; input and result share the element type and every dim but 0.

    With `segment_rows` (what `dtensor.all_to_all_v` lowers to) the rows
    are fixed slots instead: input and result have the same shape, `n * S`
    segments of `segment_rows` rows for the `n` coordinates of the axis, and
    both count tensors have `n * S` entries. The first
    `send_counts[j * S + s]` rows of segment `(j, s)` go to coordinate j,
    which puts them at the front of its segment `(i, s)` (i the sender's
    coordinate) and zero after them; `recv_counts[i * S + s]` is that count.
    Only the counted rows travel.

    ```mlir
    %1, %2 = rank.all_to_all_v %0, %c {axis = 0 : i64} : (tensor<6x4xf32>, tensor<2xi64>) -> (tensor<12x4xf32>, tensor<2xi64>)
    %3, %4 = rank.all_to_all_v %0, %c4 {axis = 0 : i64, segment_rows = 3 : i64} : (tensor<12x4xf32>, tensor<4xi64>) -> (tensor<12x4xf32>, tensor<4xi64>)
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, AnyRankedTensor:$send_counts,
                       I64Attr:$axis, OptionalAttr<I64Attr>:$segment_rows);
  let results = (outs AnyRankedTensor:$result, AnyRankedTensor:$recv_counts);
  let assemblyFormat = "$input `,` $send_counts attr-dict `:` `(` type($input) `,` type($send_counts) `)` `->` `(` type($result) `,` type($recv_counts) `)`";
  let hasVerifier = 1;
}

def Rank_FusedOp : Rank_Op<"fused", [IsolatedFromAbove, Pure]> {
  let summary = "A group of elementwise kernels run as one generated kernel";
  let description = [{
    Made by `--rank-fuse-elementwise`. The body holds the original
    `rank.kernel` ops (elementwise, all of the same shape, or a chain that
    reduces the innermost dims of that shape and reads the per-row results
    back) on the block's
    arguments (one per input) and ends with `rank.yield` of the values the
    group makes that are used outside it (one per result). The emitter
    compiles the body through MLIR to native code (KernelCodegen.h) and the
    program calls it as one instruction (docs/program-format.md, "Fused
    kernels").

    ```mlir
    %2 = rank.fused(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
    ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
      %s = rank.kernel "add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      %r = rank.kernel "relu"(%s) : (tensor<4xf32>) -> tensor<4xf32>
      rank.yield %r : tensor<4xf32>
    }
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat =
      "`(` $inputs `)` attr-dict `:` functional-type($inputs, results) $body";
  let hasVerifier = 1;
}

def Rank_YieldOp : Rank_Op<"yield", [Pure, Terminator, HasParent<"FusedOp">]> {
  let summary = "The values a fused group returns";
  let arguments = (ins Variadic<AnyRankedTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

def Rank_FusedAdamOp : Rank_Op<"fused_adam", [Pure]> {
  let summary = "The Adam or AdamW update of many local tensors in one kernel call";
  let description = [{
    The per-rank form of `dtensor.fused_adam` (same operands, attributes
    and results, on each rank's pieces): `inputs` are `step` and `lr` (0-d
    f64), then `n` parameters, `n` gradients, `n` first moments, `n` second
    moments (and `n` maxima with `amsgrad = 1`). The emitter writes one
    `fused_adam` instruction on the COMPUTE stream; the runtime's kernel
    updates every tensor in one call, reading each element of a parameter's
    group before writing the same element of its results, so a result may
    live in the storage of any input of its group (donation).

    ```mlir
    %r:3 = rank.fused_adam(%s, %lr, %p, %g, %m, %v) {amsgrad = 0 : i64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled = 1 : i64, eps = 1.0e-08 : f64, maximize = 0 : i64, weight_decay = 0.01 : f64} : (tensor<f64>, tensor<f64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs, F64Attr:$beta1,
                       F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay,
                       I64Attr:$decoupled, I64Attr:$amsgrad,
                       I64Attr:$maximize);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat =
      "`(` $inputs `)` attr-dict `:` functional-type($inputs, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Tensors per parameter among the inputs after step and lr: 4, or 5
    /// with amsgrad.
    int64_t getTensorsPerParam() { return getAmsgrad() ? 5 : 4; }
    int64_t getNumParams() {
      return (static_cast<int64_t>(getInputs().size()) - 2) /
             getTensorsPerParam();
    }
    /// The input that result `index` replaces (same group, same role).
    unsigned getReplacedInput(unsigned index) {
      int64_t n = getNumParams(), k = index / n, i = index % n;
      // params -> params, exp_avgs -> exp_avgs (after the grads), ...
      return static_cast<unsigned>(2 + (k == 0 ? 0 : k + 1) * n + i);
    }
  }];
}

def Rank_FusedSgdOp : Rank_Op<"fused_sgd", [Pure]> {
  let summary = "The SGD update of many local tensors in one kernel call";
  let description = [{
    The per-rank form of `dtensor.fused_sgd` (same operands, attributes
    and results, on each rank's pieces): `inputs` are `lr` (0-d f64), then
    `n` parameters, `n` gradients (and `n` momentum buffers with a momentum
    after the first step). The emitter writes one `fused_sgd` instruction
    on the COMPUTE stream; the runtime's kernel updates every tensor in one
    call, reading each element of a parameter's group before writing the
    same element of its results, so a result may live in the storage of any
    input of its group (donation).

    ```mlir
    %r:2 = rank.fused_sgd(%lr, %p, %g, %buf) {dampening = 0.0 : f64, first_step = 0 : i64, maximize = 0 : i64, momentum = 0.9 : f64, nesterov = 0 : i64, weight_decay = 0.0 : f64} : (tensor<f64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs, F64Attr:$momentum,
                       F64Attr:$dampening, F64Attr:$weight_decay,
                       I64Attr:$nesterov, I64Attr:$maximize,
                       I64Attr:$first_step);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat =
      "`(` $inputs `)` attr-dict `:` functional-type($inputs, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool hasMomentum() { return getMomentum().convertToDouble() != 0; }
    /// Tensors per parameter among the inputs after lr: param and grad,
    /// and the momentum buffer after the first step.
    int64_t getTensorsPerParam() {
      return hasMomentum() && !getFirstStep() ? 3 : 2;
    }
    /// Results per parameter: the parameter, and with momentum its buffer.
    int64_t getResultsPerParam() { return hasMomentum() ? 2 : 1; }
    int64_t getNumParams() {
      return (static_cast<int64_t>(getInputs().size()) - 1) /
             getTensorsPerParam();
    }
    /// The input that result `index` replaces: the parameter, or the
    /// momentum buffer (on the first step the gradient it starts from).
    unsigned getReplacedInput(unsigned index) {
      int64_t n = getNumParams(), k = index / n, i = index % n;
      int64_t role = k == 0 ? 0 : (getFirstStep() ? 1 : 2);
      return static_cast<unsigned>(1 + role * n + i);
    }
  }];
}

//===----------------------------------------------------------------------===//
// Point to point
//===----------------------------------------------------------------------===//

def Rank_SendOp : Rank_Op<"send"> {
  let summary = "Sends a tensor to one rank along a mesh axis, or to a global rank";
  let description = [{
    With `axis`, the receiver is the rank whose coordinate along mesh axis
    `axis` is `peer` and whose other coordinates are the sender's; every
    position of the function sits at one coordinate of `axis` (the
    sender's), which is not `peer`. Without `axis`, `peer` is the global
    rank of the receiver (a move between two meshes, whose two sides the
    client pairs; `dtensor.send`). Messages are matched by (sender, receiver, `tag`) in issue
    order; `--rank-match-p2p` checks that the receiver's program issues the
    matching `rank.recv` (same tensor type, tag and order). On the COMM
    stream; returns once the data is handed over (it does not wait for the
    receiver).

    ```mlir
    rank.send %0 {axis = 0 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$input, OptionalAttr<I64Attr>:$axis,
                       I64Attr:$peer, I64Attr:$tag);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Rank_RecvOp : Rank_Op<"recv"> {
  let summary = "Receives a tensor from one rank along a mesh axis, or from a global rank";
  let description = [{
    With `axis`, the sender is the rank whose coordinate along mesh axis
    `axis` is `peer` and whose other coordinates are the receiver's; without
    it, `peer` is the sender's global rank. Blocks (on the COMM stream) until
    the matching `rank.send` arrives.

    ```mlir
    %1 = rank.recv {axis = 0 : i64, peer = 0 : i64, tag = 0 : i64} : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$axis, I64Attr:$peer,
                       I64Attr:$tag);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Rank_BatchSendRecvOp : Rank_Op<"batch_send_recv"> {
  let summary = "Sends and receives several tensors along a mesh axis at once";
  let description = [{
    torch's `batch_isend_irecv`: input k goes to the rank at coordinate
    `send_peers[k]` of `axis`, result k comes from the rank at coordinate
    `recv_peers[k]`, all with `tag`. Every send is issued before the first
    receive, so two ranks that exchange tensors (a ring step) never wait on
    each other. The emitter writes one `send` instruction per input, then one
    `recv` per result.

    ```mlir
    %1 = rank.batch_send_recv(%0) {axis = 0 : i64, recv_peers = array<i64: 0>, send_peers = array<i64: 0>, tag = 2 : i64} : (tensor<4xf32>) -> tensor<4xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs, I64Attr:$axis,
                       DenseI64ArrayAttr:$send_peers,
                       DenseI64ArrayAttr:$recv_peers, I64Attr:$tag);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let assemblyFormat =
      "`(` $inputs `)` attr-dict `:` functional-type($inputs, results)";
  let hasVerifier = 1;
}

#endif // RANK_OPS
