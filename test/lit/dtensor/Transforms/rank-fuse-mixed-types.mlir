// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(rank-fuse-elementwise))' | FileCheck %s
// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(rank-fuse-elementwise{mixed-types=false}))' | FileCheck %s --check-prefix=OFF

// Causal attention: the mask (two iotas and `ge`, int64 into i1) is one
// group of its own shape, collected while the scaled scores' group stays
// open; `where` on the broadcast mask and the softmax's row reductions join
// the scores' group; the rank-0 -inf spread over the scores becomes a
// constant of that group.

// CHECK-LABEL: func.func @causal_mask
// CHECK-NEXT: %[[M:.*]] = rank.fused() : () -> tensor<8x8xi1> {
// CHECK-NEXT: rank.kernel "iota"() {dim = 0 : i64
// CHECK-NEXT: rank.kernel "iota"() {dim = 1 : i64
// CHECK-NEXT: rank.kernel "ge"
// CHECK-NEXT: rank.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[S:.*]] = rank.fused(%arg0, %[[M]]) : (tensor<2x8x8xf32>, tensor<8x8xi1>) -> tensor<2x8x8xf32> {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: rank.kernel "full"() {value = 2.500000e-01 : f64} : () -> tensor<2x8x8xf32>
// CHECK-NEXT: rank.kernel "mul"
// CHECK-NEXT: rank.kernel "broadcast_to"({{.*}}) : (tensor<8x8xi1>) -> tensor<2x8x8xi1>
// CHECK-NEXT: rank.kernel "full"() {value = 0xFFF0000000000000 : f64} : () -> tensor<2x8x8xf32>
// CHECK-NEXT: rank.kernel "where"
// CHECK-NEXT: rank.kernel "max"
// CHECK: rank.kernel "sum"
// CHECK: rank.kernel "div"
// CHECK-NEXT: rank.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[S]]
func.func @causal_mask(%x: tensor<2x8x8xf32>) -> tensor<2x8x8xf32> attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %c = rank.kernel "full"() {value = 0.25 : f64} : () -> tensor<2x8x8xf32>
  %s = rank.kernel "mul"(%x, %c) : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %r = rank.kernel "iota"() {dim = 0 : i64, offset = #rank.box_offset<global_shape = [8, 8], shard_dims = [-1], dim = -1>, start = 0.0 : f64, step = 1.0 : f64} : () -> tensor<8x8xi64>
  %q = rank.kernel "iota"() {dim = 1 : i64, offset = #rank.box_offset<global_shape = [8, 8], shard_dims = [-1], dim = -1>, start = 0.0 : f64, step = 1.0 : f64} : () -> tensor<8x8xi64>
  %m = rank.kernel "ge"(%r, %q) : (tensor<8x8xi64>, tensor<8x8xi64>) -> tensor<8x8xi1>
  %ninf = rank.kernel "full"() {value = 0xFFF0000000000000 : f64} : () -> tensor<f32>
  %mb = rank.kernel "broadcast_to"(%m) : (tensor<8x8xi1>) -> tensor<2x8x8xi1>
  %nb = rank.kernel "broadcast_to"(%ninf) : (tensor<f32>) -> tensor<2x8x8xf32>
  %w = rank.kernel "where"(%mb, %s, %nb) : (tensor<2x8x8xi1>, tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %mx = rank.kernel "max"(%w) {dims = array<i64: 2>, keepdim = 1 : i64} : (tensor<2x8x8xf32>) -> tensor<2x8x1xf32>
  %mxb = rank.kernel "broadcast_to"(%mx) : (tensor<2x8x1xf32>) -> tensor<2x8x8xf32>
  %sh = rank.kernel "sub"(%w, %mxb) : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %e = rank.kernel "exp"(%sh) : (tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  %sm = rank.kernel "sum"(%e) {dims = array<i64: 2>, keepdim = 1 : i64, scale = 1.0 : f64} : (tensor<2x8x8xf32>) -> tensor<2x8x1xf32>
  %smb = rank.kernel "broadcast_to"(%sm) : (tensor<2x8x1xf32>) -> tensor<2x8x8xf32>
  %p = rank.kernel "div"(%e, %smb) : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32>
  return %p : tensor<2x8x8xf32>
}

// -----

// The gelu backward as autograd records it: `eq` into i1, the division and
// `where` with the broadcast 0.5 join the chain: one group, the rank-0
// constants folded into constants of its shape.

// Without mixed types (the groups of one element type before), the
// comparison, `where` and what they separate stay library kernels.
// OFF-LABEL: func.func @gelu_backward
// OFF-NOT: rank.fused
// OFF: rank.kernel "eq"
// OFF: rank.kernel "where"
// OFF-NOT: rank.fused
// OFF: return

// CHECK-LABEL: func.func @gelu_backward
// CHECK-NEXT: %[[F:.*]] = rank.fused(%arg0, %arg1, %arg2) : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32> {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: rank.kernel "full"() {value = 0.000000e+00 : f64} : () -> tensor<4x16xf32>
// CHECK-NEXT: rank.kernel "eq"({{.*}}) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xi1>
// CHECK-NEXT: rank.kernel "div"
// CHECK-NEXT: rank.kernel "full"() {value = 5.000000e-01 : f64} : () -> tensor<4x16xf32>
// CHECK-NEXT: rank.kernel "where"
// CHECK-NEXT: rank.kernel "mul"
// CHECK-NEXT: rank.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @gelu_backward(%x: tensor<4x16xf32>, %y: tensor<4x16xf32>, %g: tensor<4x16xf32>) -> tensor<4x16xf32> attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %z = rank.kernel "full"() {value = 0.0 : f64} : () -> tensor<f32>
  %zb = rank.kernel "broadcast_to"(%z) : (tensor<f32>) -> tensor<4x16xf32>
  %isz = rank.kernel "eq"(%x, %zb) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xi1>
  %q = rank.kernel "div"(%y, %x) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %h = rank.kernel "full"() {value = 0.5 : f64} : () -> tensor<f32>
  %hb = rank.kernel "broadcast_to"(%h) : (tensor<f32>) -> tensor<4x16xf32>
  %w = rank.kernel "where"(%isz, %hb, %q) : (tensor<4x16xi1>, tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %r = rank.kernel "mul"(%g, %w) : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %r : tensor<4x16xf32>
}

// -----

// Casts join a group: AdamW's float64 scalar terms cast to the parameter's
// float32 in the kernel that computes them; an int64 count cast to float
// too.

// CHECK-LABEL: func.func @casts
// CHECK-NEXT: %[[F:.*]]:2 = rank.fused(%arg0, %arg1) : (tensor<f64>, tensor<i64>) -> (tensor<f32>, tensor<f32>) {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: rank.kernel "full"() {value = 1.000000e+00 : f64} : () -> tensor<f64>
// CHECK-NEXT: rank.kernel "sub"
// CHECK-NEXT: rank.kernel "cast"({{.*}}) : (tensor<f64>) -> tensor<f32>
// CHECK-NEXT: rank.kernel "cast"({{.*}}) : (tensor<i64>) -> tensor<f32>
// CHECK-NEXT: rank.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]#0, %[[F]]#1
func.func @casts(%b: tensor<f64>, %n: tensor<i64>) -> (tensor<f32>, tensor<f32>) attributes {rank.mesh = array<i64: 1>, rank.positions = [array<i64: 0, 1>]} {
  %one = rank.kernel "full"() {value = 1.0 : f64} : () -> tensor<f64>
  %d = rank.kernel "sub"(%one, %b) : (tensor<f64>, tensor<f64>) -> tensor<f64>
  %c = rank.kernel "cast"(%d) : (tensor<f64>) -> tensor<f32>
  %nf = rank.kernel "cast"(%n) : (tensor<i64>) -> tensor<f32>
  return %c, %nf : tensor<f32>, tensor<f32>
}

// -----

// An iota whose positions differ between ranks (its offset shards a dim),
// or whose float values are not integers, stays a library kernel; the
// comparisons that read them form a group (int64 and float32 operands).

// CHECK-LABEL: func.func @iotas_kept
// CHECK-NEXT: %[[A:.*]] = rank.kernel "iota"() {dim = 0 : i64, offset = #rank.box_offset
// CHECK-NEXT: %[[B:.*]] = rank.kernel "iota"() {dim = 0 : i64, start = 5.000000e-01
// CHECK-NEXT: %[[F:.*]]:2 = rank.fused(%[[A]], %arg0, %[[B]], %arg1)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: rank.kernel "lt"
// CHECK-NEXT: rank.kernel "gt"
// CHECK-NEXT: rank.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]#0, %[[F]]#1
func.func @iotas_kept(%i: tensor<4xi64>, %f: tensor<4xf32>) -> (tensor<4xi1>, tensor<4xi1>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %a = rank.kernel "iota"() {dim = 0 : i64, offset = #rank.box_offset<global_shape = [8], shard_dims = [0], dim = -1>, start = 0.0 : f64, step = 1.0 : f64} : () -> tensor<4xi64>
  %b = rank.kernel "iota"() {dim = 0 : i64, start = 0.5 : f64, step = 1.0 : f64} : () -> tensor<4xf32>
  %c = rank.kernel "lt"(%a, %i) : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi1>
  %d = rank.kernel "gt"(%b, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %c, %d : tensor<4xi1>, tensor<4xi1>
}

// -----

// An iota counting along a dim no mesh axis shards has the same values on
// every rank (cross-entropy's class positions, rows sharded on "dp"): it
// joins the group.

// CHECK-LABEL: func.func @iota_along_an_unsharded_dim
// CHECK-NEXT: %[[F:.*]] = rank.fused(%arg0)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: rank.kernel "iota"() {dim = 1 : i64
// CHECK-NEXT: rank.kernel "eq"
// CHECK-NEXT: rank.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @iota_along_an_unsharded_dim(%t: tensor<4x3xi64>) -> tensor<4x3xi1> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %a = rank.kernel "iota"() {dim = 1 : i64, offset = #rank.box_offset<global_shape = [8, 3], shard_dims = [0], dim = -1>, start = 0.0 : f64, step = 1.0 : f64} : () -> tensor<4x3xi64>
  %c = rank.kernel "eq"(%t, %a) : (tensor<4x3xi64>, tensor<4x3xi64>) -> tensor<4x3xi1>
  return %c : tensor<4x3xi1>
}
