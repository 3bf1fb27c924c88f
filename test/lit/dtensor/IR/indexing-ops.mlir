// RUN: dtorch-opt %s | dtorch-opt | FileCheck %s
// RUN: dtorch-opt %s --mlir-print-op-generic | dtorch-opt | FileCheck %s

// Round trip of the comparison, selection, arg-reduction and indexing ops.

#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>

// CHECK-LABEL: func @compare_and_where
func.func @compare_and_where(%a: !dtensor.tensor<4x6xf32, #m, [S(0), R]>, %b: !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xf32, #m, [S(0), R]> {
  // CHECK: dtensor.eq %{{.*}}, %{{.*}} : {{.*}} -> !dtensor.tensor<4x6xi1
  %0 = dtensor.eq %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  // CHECK: dtensor.ne
  %1 = dtensor.ne %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  // CHECK: dtensor.lt
  %2 = dtensor.lt %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  // CHECK: dtensor.le
  %3 = dtensor.le %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  // CHECK: dtensor.gt
  %4 = dtensor.gt %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  // CHECK: dtensor.ge
  %5 = dtensor.ge %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  // CHECK: dtensor.where %{{.*}}, %{{.*}}, %{{.*}} :
  %6 = dtensor.where %0, %a, %b : (!dtensor.tensor<4x6xi1, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xf32, #m, [S(0), R]>
  return %6 : !dtensor.tensor<4x6xf32, #m, [S(0), R]>
}

// CHECK-LABEL: func @reductions
func.func @reductions(%a: !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> (!dtensor.tensor<4xf32, #m, [S(0), R]>, !dtensor.tensor<4xi64, #m, [S(0), R]>, !dtensor.tensor<4x1xi64, #m, [S(0), R]>) {
  // CHECK: dtensor.min %{{.*}} dims = [1] :
  %0 = dtensor.min %a dims = [1] : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4xf32, #m, [S(0), R]>
  // CHECK: dtensor.argmax %{{.*}} {dim = 1 : i64} :
  %1 = dtensor.argmax %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4xi64, #m, [S(0), R]>
  // CHECK: dtensor.argmin %{{.*}} {dim = 1 : i64, keepdim} :
  %2 = dtensor.argmin %a {dim = 1 : i64, keepdim} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x1xi64, #m, [S(0), R]>
  return %0, %1, %2 : !dtensor.tensor<4xf32, #m, [S(0), R]>, !dtensor.tensor<4xi64, #m, [S(0), R]>, !dtensor.tensor<4x1xi64, #m, [S(0), R]>
}

// CHECK-LABEL: func @indexing
func.func @indexing(%a: !dtensor.tensor<4x6xf32, #m, [S(0), R]>, %i: !dtensor.tensor<4x2xi64, #m, [S(0), R]>, %v: !dtensor.tensor<3xi64, #m, [R, R]>) -> (!dtensor.tensor<4x2xf32, #m, [S(0), R]>, !dtensor.tensor<4x12xf32, #m, [S(0), R]>, !dtensor.tensor<4x2xf32, #m, [S(0), R]>, !dtensor.tensor<3x6xf32, #m, [P(sum), R]>, !dtensor.tensor<4x6xf32, #m, [R, R]>) {
  // CHECK: dtensor.slice %{{.*}} {offsets = array<i64: 0, 1>, sizes = array<i64: 4, 2>, strides = array<i64: 1, 3>} :
  %0 = dtensor.slice %a {offsets = array<i64: 0, 1>, sizes = array<i64: 4, 2>, strides = array<i64: 1, 3>} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x2xf32, #m, [S(0), R]>
  // CHECK: dtensor.concat %{{.*}}, %{{.*}} {dim = 1 : i64} :
  %1 = dtensor.concat %a, %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x12xf32, #m, [S(0), R]>
  // CHECK: dtensor.gather %{{.*}}, %{{.*}} {dim = 1 : i64} :
  %2 = dtensor.gather %a, %i {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x2xi64, #m, [S(0), R]>) -> !dtensor.tensor<4x2xf32, #m, [S(0), R]>
  // CHECK: dtensor.index_select %{{.*}}, %{{.*}} {dim = 0 : i64} :
  %3 = dtensor.index_select %a, %v {dim = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<3xi64, #m, [R, R]>) -> !dtensor.tensor<3x6xf32, #m, [P(sum), R]>
  // CHECK: dtensor.scatter_add %{{.*}}, %{{.*}}, %{{.*}} {dim = 1 : i64} :
  %r = dtensor.redistribute %a : !dtensor.tensor<4x6xf32, #m, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m, [R, R]>
  %ri = dtensor.redistribute %i : !dtensor.tensor<4x2xi64, #m, [S(0), R]> -> !dtensor.tensor<4x2xi64, #m, [R, R]>
  %4 = dtensor.scatter_add %r, %ri, %r {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R, R]>, !dtensor.tensor<4x2xi64, #m, [R, R]>, !dtensor.tensor<4x6xf32, #m, [R, R]>) -> !dtensor.tensor<4x6xf32, #m, [R, R]>
  return %0, %1, %2, %3, %4 : !dtensor.tensor<4x2xf32, #m, [S(0), R]>, !dtensor.tensor<4x12xf32, #m, [S(0), R]>, !dtensor.tensor<4x2xf32, #m, [S(0), R]>, !dtensor.tensor<3x6xf32, #m, [P(sum), R]>, !dtensor.tensor<4x6xf32, #m, [R, R]>
}

// CHECK-LABEL: func @triangles_and_iota
func.func @triangles_and_iota(%a: !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>) -> (!dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<8xi64, #m, [S(0), R]>) {
  // CHECK: dtensor.tril %{{.*}} {diagonal = -1 : i64} :
  %0 = dtensor.tril %a {diagonal = -1 : i64} : (!dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>
  // CHECK: dtensor.triu %{{.*}} {diagonal = 1 : i64} :
  %1 = dtensor.triu %a {diagonal = 1 : i64} : (!dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>
  // CHECK: dtensor.iota {dim = 0 : i64, start = 2.000000e+00 : f64, step = 3.000000e+00 : f64} : () -> !dtensor.tensor<8xi64
  %2 = dtensor.iota {dim = 0 : i64, start = 2.0 : f64, step = 3.0 : f64} : () -> !dtensor.tensor<8xi64, #m, [S(0), R]>
  return %0, %1, %2 : !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<8xi64, #m, [S(0), R]>
}

// CHECK-LABEL: func @topk
func.func @topk(%a: !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x2xi64, #m, [S(0), R]> {
  // CHECK: dtensor.topk_indices %{{.*}} {dim = 1 : i64, k = 2 : i64, largest = 1 : i64} :
  %0 = dtensor.topk_indices %a {dim = 1 : i64, k = 2 : i64, largest = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x2xi64, #m, [S(0), R]>
  return %0 : !dtensor.tensor<4x2xi64, #m, [S(0), R]>
}
