// RUN: dtorch-opt %s | dtorch-opt | FileCheck %s
// RUN: dtorch-opt %s --mlir-print-op-generic | dtorch-opt | FileCheck %s

#m1 = #dtensor.mesh<[4]>
#m2 = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>

// CHECK-DAG: #[[M1:.+]] = #dtensor.mesh<[4]>
// CHECK-DAG: #[[M2:.+]] = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>

// CHECK-LABEL: func @creation
func.func @creation() -> (!dtensor.tensor<4x4xf32, #m2, [S(0), R]>, !dtensor.tensor<8xf64, #m1, [S(0)]>, !dtensor.tensor<2xf32, #m1, [R]>) {
  // CHECK: dtensor.full 1.500000e+00 : !dtensor.tensor<4x4xf32, #[[M2]], [S(0), R]>
  %0 = dtensor.full 1.5 : !dtensor.tensor<4x4xf32, #m2, [S(0), R]>
  // CHECK: dtensor.random seed = 7 distribution = "normal" : !dtensor.tensor<8xf64, #[[M1]], [S(0)]>
  %1 = dtensor.random seed = 7 distribution = "normal" : !dtensor.tensor<8xf64, #m1, [S(0)]>
  // CHECK: dtensor.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32> : !dtensor.tensor<2xf32, #[[M1]], [R]>
  %2 = dtensor.constant dense<[1.0, 2.0]> : tensor<2xf32> : !dtensor.tensor<2xf32, #m1, [R]>
  return %0, %1, %2 : !dtensor.tensor<4x4xf32, #m2, [S(0), R]>, !dtensor.tensor<8xf64, #m1, [S(0)]>, !dtensor.tensor<2xf32, #m1, [R]>
}

// CHECK-LABEL: func @elementwise
func.func @elementwise(%a: !dtensor.tensor<7x5xf32, #m2, [S(0), R]>, %b: !dtensor.tensor<7x5xf32, #m2, [R, S(1)]>) {
  // CHECK: dtensor.add %{{.*}}, %{{.*}} : (!dtensor.tensor<7x5xf32, #[[M2]], [S(0), R]>, !dtensor.tensor<7x5xf32, #[[M2]], [R, S(1)]>) -> !dtensor.tensor<7x5xf32, #[[M2]], [S(0), S(1)]>
  %0 = dtensor.add %a, %b : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [R, S(1)]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), S(1)]>
  // CHECK: dtensor.sub
  %1 = dtensor.sub %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.mul
  %2 = dtensor.mul %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.div
  %3 = dtensor.div %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.maximum
  %4 = dtensor.maximum %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.minimum
  %5 = dtensor.minimum %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.pow
  %6 = dtensor.pow %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.neg
  %7 = dtensor.neg %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.abs
  %8 = dtensor.abs %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.exp
  %9 = dtensor.exp %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.log
  %10 = dtensor.log %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.sqrt
  %11 = dtensor.sqrt %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.rsqrt
  %12 = dtensor.rsqrt %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.relu
  %13 = dtensor.relu %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.tanh
  %14 = dtensor.tanh %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.sigmoid
  %15 = dtensor.sigmoid %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.gelu
  %16 = dtensor.gelu %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.silu
  %17 = dtensor.silu %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.sin
  %18 = dtensor.sin %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.cos
  %19 = dtensor.cos %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  // CHECK: dtensor.cast %{{.*}} : (!dtensor.tensor<7x5xf32, #[[M2]], [S(0), R]>) -> !dtensor.tensor<7x5xi64, #[[M2]], [S(0), R]>
  %20 = dtensor.cast %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xi64, #m2, [S(0), R]>
  return
}

// CHECK-LABEL: func @linalg_and_reductions
func.func @linalg_and_reductions(%a: !dtensor.tensor<8x4xf32, #m1, [S(1)]>, %b: !dtensor.tensor<4x6xf32, #m1, [S(0)]>, %c: !dtensor.tensor<2x8x4xf32, #m1, [S(0)]>, %d: !dtensor.tensor<2x4x6xf32, #m1, [S(0)]>) {
  // CHECK: dtensor.matmul %{{.*}}, %{{.*}} : {{.*}} -> !dtensor.tensor<8x6xf32, #[[M1]], [P(sum)]>
  %0 = dtensor.matmul %a, %b : (!dtensor.tensor<8x4xf32, #m1, [S(1)]>, !dtensor.tensor<4x6xf32, #m1, [S(0)]>) -> !dtensor.tensor<8x6xf32, #m1, [P(sum)]>
  // CHECK: dtensor.bmm
  %1 = dtensor.bmm %c, %d : (!dtensor.tensor<2x8x4xf32, #m1, [S(0)]>, !dtensor.tensor<2x4x6xf32, #m1, [S(0)]>) -> !dtensor.tensor<2x8x6xf32, #m1, [S(0)]>
  // CHECK: dtensor.sum %{{.*}} dims = [1] : {{.*}} -> !dtensor.tensor<8xf32, #[[M1]], [P(sum)]>
  %2 = dtensor.sum %a dims = [1] : (!dtensor.tensor<8x4xf32, #m1, [S(1)]>) -> !dtensor.tensor<8xf32, #m1, [P(sum)]>
  // CHECK: dtensor.mean %{{.*}} dims = [0, 1] keepdim
  %3 = dtensor.mean %a dims = [0, 1] keepdim : (!dtensor.tensor<8x4xf32, #m1, [S(1)]>) -> !dtensor.tensor<1x1xf32, #m1, [P(sum)]>
  // CHECK: dtensor.max %{{.*}} dims = [1] : {{.*}} -> !dtensor.tensor<8xf32, #[[M1]], [P(max)]>
  %4 = dtensor.max %a dims = [1] : (!dtensor.tensor<8x4xf32, #m1, [S(1)]>) -> !dtensor.tensor<8xf32, #m1, [P(max)]>
  return
}

// CHECK-LABEL: func @shape_and_layout
func.func @shape_and_layout(%a: !dtensor.tensor<4x6xf32, #m2, [S(0), R]>, %p: !dtensor.tensor<4x6xf32, #m2, [P(sum), R]>) {
  // CHECK: dtensor.reshape %{{.*}} : {{.*}} -> !dtensor.tensor<4x2x3xf32, #[[M2]], [S(0), R]>
  %0 = dtensor.reshape %a : (!dtensor.tensor<4x6xf32, #m2, [S(0), R]>) -> !dtensor.tensor<4x2x3xf32, #m2, [S(0), R]>
  // CHECK: dtensor.broadcast_to %{{.*}} : {{.*}} -> !dtensor.tensor<3x4x6xf32, #[[M2]], [S(1), R]>
  %9 = dtensor.broadcast_to %a : (!dtensor.tensor<4x6xf32, #m2, [S(0), R]>) -> !dtensor.tensor<3x4x6xf32, #m2, [S(1), R]>
  // CHECK: dtensor.transpose %{{.*}} perm = [1, 0] : {{.*}} -> !dtensor.tensor<6x4xf32, #[[M2]], [S(1), R]>
  %1 = dtensor.transpose %a perm = [1, 0] : (!dtensor.tensor<4x6xf32, #m2, [S(0), R]>) -> !dtensor.tensor<6x4xf32, #m2, [S(1), R]>
  // CHECK: dtensor.redistribute %{{.*}} : !dtensor.tensor<4x6xf32, #[[M2]], [S(0), R]> -> !dtensor.tensor<4x6xf32, #[[M2]], [R, S(1)]>
  %2 = dtensor.redistribute %a : !dtensor.tensor<4x6xf32, #m2, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m2, [R, S(1)]>
  // CHECK: dtensor.all_reduce %{{.*}} on axis 0 : !dtensor.tensor<4x6xf32, #[[M2]], [P(sum), R]> -> !dtensor.tensor<4x6xf32, #[[M2]], [R, R]>
  %3 = dtensor.all_reduce %p on axis 0 : !dtensor.tensor<4x6xf32, #m2, [P(sum), R]> -> !dtensor.tensor<4x6xf32, #m2, [R, R]>
  // CHECK: dtensor.reduce_scatter %{{.*}} on axis 0
  %4 = dtensor.reduce_scatter %p on axis 0 : !dtensor.tensor<4x6xf32, #m2, [P(sum), R]> -> !dtensor.tensor<4x6xf32, #m2, [S(1), R]>
  // CHECK: dtensor.all_gather %{{.*}} on axis 0
  %5 = dtensor.all_gather %a on axis 0 : !dtensor.tensor<4x6xf32, #m2, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m2, [R, R]>
  // CHECK: dtensor.all_to_all %{{.*}} on axis 0
  %6 = dtensor.all_to_all %a on axis 0 : !dtensor.tensor<4x6xf32, #m2, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m2, [S(1), R]>
  // CHECK: dtensor.local_slice %{{.*}} on axis 1
  %7 = dtensor.local_slice %a on axis 1 : !dtensor.tensor<4x6xf32, #m2, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m2, [S(0), S(1)]>
  // CHECK: dtensor.to_partial %{{.*}} on axis 1 : {{.*}} -> !dtensor.tensor<4x6xf32, #[[M2]], [S(0), P(max)]>
  %8 = dtensor.to_partial %a on axis 1 : !dtensor.tensor<4x6xf32, #m2, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m2, [S(0), P(max)]>
  return
}

#pp = #dtensor.mesh<[2, 2], names = ["pp", "dp"]>
// CHECK-LABEL: func @stage_transfer
// CHECK: dtensor.transfer %{{.*}} {axis = 0 : i64, destinations = array<i64: 1>, sources = array<i64: 0>} : !dtensor.tensor<4x6xf32, #{{.*}}, [S(0), S(1)]>
func.func @stage_transfer(%a: !dtensor.tensor<4x6xf32, #pp, [S(0), S(1)]>) -> !dtensor.tensor<4x6xf32, #pp, [S(0), S(1)]> {
  %0 = dtensor.transfer %a {axis = 0 : i64, sources = array<i64: 0>, destinations = array<i64: 1>} : !dtensor.tensor<4x6xf32, #pp, [S(0), S(1)]>
  return %0 : !dtensor.tensor<4x6xf32, #pp, [S(0), S(1)]>
}

// The exchange of counted rows (MoE dispatch) on the second mesh axis; the
// row dim past the slots may be split by the other axis.
#ep = #dtensor.mesh<[2, 2], names = ["dp", "ep"]>
// CHECK-LABEL: func @dispatch
// CHECK: dtensor.all_to_all_v %{{.*}}, %{{.*}} {axis = 1 : i64} : (!dtensor.tensor<2x8x4xf32, #{{.*}}, [S(2), S(0)]>, !dtensor.tensor<2x4xi64, #{{.*}}, [R, S(0)]>) -> !dtensor.tensor<2x8x4xf32, #{{.*}}, [S(2), S(0)]>
func.func @dispatch(%x: !dtensor.tensor<2x8x4xf32, #ep, [S(2), S(0)]>, %c: !dtensor.tensor<2x4xi64, #ep, [R, S(0)]>) -> !dtensor.tensor<2x8x4xf32, #ep, [S(2), S(0)]> {
  %0 = dtensor.all_to_all_v %x, %c {axis = 1 : i64} : (!dtensor.tensor<2x8x4xf32, #ep, [S(2), S(0)]>, !dtensor.tensor<2x4xi64, #ep, [R, S(0)]>) -> !dtensor.tensor<2x8x4xf32, #ep, [S(2), S(0)]>
  return %0 : !dtensor.tensor<2x8x4xf32, #ep, [S(2), S(0)]>
}
