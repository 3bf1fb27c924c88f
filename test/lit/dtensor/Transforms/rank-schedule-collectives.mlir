// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(rank-schedule-collectives)' | FileCheck %s
// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(rank-schedule-collectives{bucket-cap-bytes=0})' | FileCheck %s --check-prefix=NOBUCKET
// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(rank-schedule-collectives{bucket-cap-bytes=80 min-buckets=1})' | FileCheck %s --check-prefix=CAP
// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(rank-schedule-collectives{prefetch-bytes=128})' | FileCheck %s --check-prefix=PREFETCH

// Early issue: the all_reduces and the kernels making their operands move
// above the unrelated matmuls; bucketed, one all_reduce reduces both, and
// each piece is unpacked right before its first user.

// CHECK-LABEL: func.func @early
// CHECK-SAME: rank.scheduled
// CHECK-NEXT: %[[G1:.*]] = rank.kernel "transpose"(%arg0)
// CHECK-NEXT: %[[G2:.*]] = rank.kernel "neg"(%arg2)
// CHECK-NEXT: %[[P:.*]] = rank.kernel "bucket_pack"(%[[G1]], %[[G2]]) : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<20xf32>
// CHECK-NEXT: %[[R:.*]] = rank.all_reduce %[[P]] {axis = 0 : i64, reduce = "sum"} : tensor<20xf32> -> tensor<20xf32>
// CHECK-NEXT: %[[M:.*]] = rank.kernel "matmul"(%arg1, %arg1)
// CHECK-NEXT: %[[M2:.*]] = rank.kernel "matmul"(%[[M]], %arg1)
// CHECK-NEXT: %[[U2:.*]] = rank.kernel "bucket_unpack"(%[[R]]) {offset = 16 : i64} : (tensor<20xf32>) -> tensor<4xf32>
// CHECK-NEXT: %[[RELU:.*]] = rank.kernel "relu"(%[[U2]])
// CHECK-NEXT: %[[U1:.*]] = rank.kernel "bucket_unpack"(%[[R]]) {offset = 0 : i64} : (tensor<20xf32>) -> tensor<4x4xf32>
// CHECK-NEXT: return %[[M2]], %[[U1]], %[[RELU]]

// NOBUCKET-LABEL: func.func @early
// NOBUCKET-NEXT: %[[G1:.*]] = rank.kernel "transpose"(%arg0)
// NOBUCKET-NEXT: rank.all_reduce %[[G1]]
// NOBUCKET-NEXT: %[[G2:.*]] = rank.kernel "neg"(%arg2)
// NOBUCKET-NEXT: rank.all_reduce %[[G2]]
// NOBUCKET-NEXT: rank.kernel "matmul"
// NOBUCKET-NEXT: rank.kernel "matmul"
// NOBUCKET-NEXT: rank.kernel "relu"
// NOBUCKET-NEXT: return
func.func @early(%a: tensor<4x4xf32>, %x: tensor<8x8xf32>, %b: tensor<4xf32>) -> (tensor<8x8xf32>, tensor<4x4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %m = rank.kernel "matmul"(%x, %x) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %m2 = rank.kernel "matmul"(%m, %x) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %g1 = rank.kernel "transpose"(%a) {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %g2 = rank.kernel "neg"(%b) : (tensor<4xf32>) -> tensor<4xf32>
  %r1 = rank.all_reduce %g1 {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %r2 = rank.all_reduce %g2 {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %u = rank.kernel "relu"(%r2) : (tensor<4xf32>) -> tensor<4xf32>
  return %m2, %r1, %u : tensor<8x8xf32>, tensor<4x4xf32>, tensor<4xf32>
}

// -----

// The cap: three all_reduces of 64, 16 and 16 bytes with an 80-byte cap
// give a bucket of the first two and the third alone.

// CAP-LABEL: func.func @cap
// CAP: %[[P:.*]] = rank.kernel "bucket_pack"(%arg0, %arg1) : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<20xf32>
// CAP-NEXT: rank.all_reduce %[[P]] {{.*}} : tensor<20xf32> -> tensor<20xf32>
// CAP-NEXT: rank.all_reduce %arg2 {{.*}} : tensor<4xf32> -> tensor<4xf32>
// CAP-NEXT: rank.kernel "bucket_unpack"
// CAP-NEXT: rank.kernel "bucket_unpack"
// CAP-NEXT: return

// The default cap holds all three.
// CHECK-LABEL: func.func @cap
// CHECK: rank.kernel "bucket_pack"(%arg0, %arg1, %arg2) : (tensor<4x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<24xf32>
// CHECK-NEXT: rank.all_reduce {{.*}} : tensor<24xf32> -> tensor<24xf32>
// CHECK-NEXT: rank.kernel "bucket_unpack"
// CHECK-NEXT: rank.kernel "bucket_unpack"
// CHECK-NEXT: rank.kernel "bucket_unpack"
// CHECK-NEXT: return
func.func @cap(%a: tensor<4x4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>) -> (tensor<4x4xf32>, tensor<4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %r1 = rank.all_reduce %a {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %r2 = rank.all_reduce %b {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %r3 = rank.all_reduce %c {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return %r1, %r2, %r3 : tensor<4x4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Different axes, reductions and element types are not mixed; a member
// whose result is used before the next all_reduce closes the bucket; the
// collectives keep their order.

// CHECK-LABEL: func.func @not_mixed
// CHECK-NEXT: rank.all_reduce %arg0 {axis = 0 : i64, reduce = "sum"}
// CHECK-NEXT: rank.all_reduce %arg1 {axis = 1 : i64, reduce = "sum"}
// CHECK-NEXT: rank.all_reduce %arg2 {axis = 1 : i64, reduce = "max"}
// CHECK-NEXT: rank.all_reduce %arg3 {axis = 1 : i64, reduce = "max"} : tensor<4xf64>
// CHECK-NEXT: %[[R5:.*]] = rank.all_reduce %arg4 {axis = 0 : i64, reduce = "sum"} : tensor<4xf32>
// CHECK-NEXT: %[[N:.*]] = rank.kernel "neg"(%[[R5]])
// CHECK-NEXT: rank.all_reduce %[[N]] {axis = 0 : i64, reduce = "sum"}
// CHECK-NEXT: return
func.func @not_mixed(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>, %d: tensor<4xf64>, %e: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf64>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 2, 0, 2>]} {
  %r1 = rank.all_reduce %a {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %r2 = rank.all_reduce %b {axis = 1 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %r3 = rank.all_reduce %c {axis = 1 : i64, reduce = "max"} : tensor<4xf32> -> tensor<4xf32>
  %r4 = rank.all_reduce %d {axis = 1 : i64, reduce = "max"} : tensor<4xf64> -> tensor<4xf64>
  %r5 = rank.all_reduce %e {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %n = rank.kernel "neg"(%r5) : (tensor<4xf32>) -> tensor<4xf32>
  %r6 = rank.all_reduce %n {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return %r1, %r2, %r3, %r4, %r6 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf64>, tensor<4xf32>
}

// -----

// FSDP prefetch: all_gathers of parameters move ahead of the compute that
// needs them, but with prefetch-bytes=128 (two gathered 4x4 values) the
// third waits for the first consumer of the first. A kernel reading a
// collective's result is not hoisted.

// CHECK-LABEL: func.func @prefetch
// CHECK-NEXT: %[[G0:.*]] = rank.all_gather %arg0
// CHECK-NEXT: %[[G1:.*]] = rank.all_gather %arg1
// CHECK-NEXT: %[[G2:.*]] = rank.all_gather %arg2
// CHECK-NEXT: %[[A:.*]] = rank.kernel "matmul"(%arg3, %[[G0]])
// PREFETCH-LABEL: func.func @prefetch
// PREFETCH-NEXT: %[[G0:.*]] = rank.all_gather %arg0
// PREFETCH-NEXT: %[[G1:.*]] = rank.all_gather %arg1
// PREFETCH-NEXT: %[[A:.*]] = rank.kernel "matmul"(%arg3, %[[G0]])
// PREFETCH-NEXT: %[[G2:.*]] = rank.all_gather %arg2
// PREFETCH-NEXT: rank.kernel "matmul"(%[[A]], %[[G1]])
// PREFETCH-NEXT: rank.kernel "matmul"
func.func @prefetch(%w0: tensor<2x4xf32>, %w1: tensor<2x4xf32>, %w2: tensor<2x4xf32>, %x: tensor<4x4xf32>) -> tensor<4x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %g0 = rank.all_gather %w0 {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 2, 2>} : tensor<2x4xf32> -> tensor<4x4xf32>
  %a = rank.kernel "matmul"(%x, %g0) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %g1 = rank.all_gather %w1 {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 2, 2>} : tensor<2x4xf32> -> tensor<4x4xf32>
  %b = rank.kernel "matmul"(%a, %g1) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %g2 = rank.all_gather %w2 {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 2, 2>} : tensor<2x4xf32> -> tensor<4x4xf32>
  %c = rank.kernel "matmul"(%b, %g2) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %c : tensor<4x4xf32>
}

// -----

// The classes of one segment are bucketed alike, from the larger piece of
// each member: with an 80-byte cap, class 0's pieces (16 + 16 + 16 bytes)
// alone would fit one bucket, but class 1's (64 + 16 + 16) do not.

// CAP-LABEL: func.func @seg_class0
// CAP: rank.kernel "bucket_pack"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
// CAP-NEXT: rank.all_reduce
// CAP-NEXT: rank.all_reduce %arg2
// CAP-LABEL: func.func @seg_class1
// CAP: rank.kernel "bucket_pack"(%arg0, %arg1) : (tensor<16xf32>, tensor<4xf32>) -> tensor<20xf32>
// CAP-NEXT: rank.all_reduce
// CAP-NEXT: rank.all_reduce %arg2
func.func @seg_class0(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
  %r1 = rank.all_reduce %a {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %r2 = rank.all_reduce %b {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %r3 = rank.all_reduce %c {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return %r1, %r2, %r3 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}
func.func @seg_class1(%a: tensor<16xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>) -> (tensor<16xf32>, tensor<4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>]} {
  %r1 = rank.all_reduce %a {axis = 0 : i64, reduce = "sum"} : tensor<16xf32> -> tensor<16xf32>
  %r2 = rank.all_reduce %b {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  %r3 = rank.all_reduce %c {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return %r1, %r2, %r3 : tensor<16xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Collectives go in the order their operands are ready: the all_reduce of
// a gradient made early (%r) passes an all_gather whose operand is made
// late (%ag). A kernel that reads a collective's result (%n) moves up only
// to the first consumer of that result (%u), where compute waited for it
// already; ops ready at the same point keep their original order (%l and
// the all_gather of it before %n, all ready after %u).

// NOBUCKET-LABEL: func.func @readiness
// NOBUCKET-NEXT: %[[S:.*]] = rank.all_reduce %arg0
// NOBUCKET-NEXT: %[[M:.*]] = rank.kernel "matmul"(%arg2, %arg2)
// NOBUCKET-NEXT: %[[G:.*]] = rank.kernel "neg"(%arg1)
// NOBUCKET-NEXT: %[[R:.*]] = rank.all_reduce %[[G]]
// NOBUCKET-NEXT: %[[U:.*]] = rank.kernel "mul"(%[[M]], %[[S]])
// NOBUCKET-NEXT: %[[L:.*]] = rank.kernel "relu"(%[[U]])
// NOBUCKET-NEXT: %[[AG:.*]] = rank.all_gather %[[L]]
// NOBUCKET-NEXT: %[[N:.*]] = rank.kernel "exp"(%[[S]])
// NOBUCKET-NEXT: %[[A:.*]] = rank.all_reduce %[[N]]
// NOBUCKET-NEXT: return %[[AG]], %[[R]], %[[A]]
func.func @readiness(%s: tensor<4x4xf32>, %b: tensor<4x4xf32>, %x: tensor<4x4xf32>) -> (tensor<8x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %sr = rank.all_reduce %s {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %m = rank.kernel "matmul"(%x, %x) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %u = rank.kernel "mul"(%m, %sr) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %l = rank.kernel "relu"(%u) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %ag = rank.all_gather %l {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 4, 4>} : tensor<4x4xf32> -> tensor<8x4xf32>
  %g = rank.kernel "neg"(%b) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %r = rank.all_reduce %g {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %n = rank.kernel "exp"(%sr) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %a = rank.all_reduce %n {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  return %ag, %r, %a : tensor<8x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// When the classes of a segment would issue their collectives in different
// orders (here class 0's second all_reduce is ready first, class 1's is
// not), every class keeps the original order.

// NOBUCKET-LABEL: func.func @mixed_class0
// NOBUCKET: rank.all_reduce %{{.*}} : tensor<4x4xf32>
// NOBUCKET: rank.all_reduce %arg1 {{.*}} : tensor<4xf32>
// NOBUCKET-LABEL: func.func @mixed_class1
// NOBUCKET: rank.all_reduce %{{.*}} : tensor<4x4xf32>
// NOBUCKET: rank.all_reduce %{{.*}} : tensor<4xf32>
func.func @mixed_class0(%a: tensor<4x4xf32>, %b: tensor<4xf32>) -> (tensor<4x4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
  %m = rank.kernel "matmul"(%a, %a) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %r1 = rank.all_reduce %m {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %r2 = rank.all_reduce %b {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return %r1, %r2 : tensor<4x4xf32>, tensor<4xf32>
}
func.func @mixed_class1(%a: tensor<4x4xf32>, %b: tensor<4xf32>) -> (tensor<4x4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>]} {
  %m = rank.kernel "matmul"(%a, %a) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %r1 = rank.all_reduce %m {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %n = rank.kernel "neg"(%r1) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %s = rank.kernel "sum"(%n) {dims = array<i64: 0>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x4xf32>) -> tensor<4xf32>
  %r2 = rank.all_reduce %s {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return %r1, %r2 : tensor<4x4xf32>, tensor<4xf32>
}
