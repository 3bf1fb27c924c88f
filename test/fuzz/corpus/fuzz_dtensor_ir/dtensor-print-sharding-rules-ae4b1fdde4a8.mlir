#m = #dtensor.mesh<[2]>
func.func @new_rules(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %i: !dtensor.tensor<4x2xi64, #m, [R]>, %v: !dtensor.tensor<3xi64, #m, [R]>, %b: !dtensor.tensor<4x6xi1, #m, [R]>) {
  %0 = dtensor.lt %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi1, #m, [R]>
  %1 = dtensor.where %b, %a, %a : (!dtensor.tensor<4x6xi1, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %2 = dtensor.min %a dims = [1] : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  %3 = dtensor.argmax %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4xi64, #m, [R]>
  %4 = dtensor.slice %a {offsets = array<i64: 0, 1>, sizes = array<i64: 4, 2>, strides = array<i64: 1, 3>} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x2xf32, #m, [R]>
  %5 = dtensor.concat %a, %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x12xf32, #m, [R]>
  %6 = dtensor.gather %a, %i {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x2xi64, #m, [R]>) -> !dtensor.tensor<4x2xf32, #m, [R]>
  %7 = dtensor.index_select %a, %v {dim = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<3xi64, #m, [R]>) -> !dtensor.tensor<3x6xf32, #m, [R]>
  %8 = dtensor.scatter_add %a, %i, %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x2xi64, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %9 = dtensor.tril %a {diagonal = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %10 = dtensor.iota {dim = 0 : i64, start = 0.0 : f64, step = 1.0 : f64} : () -> !dtensor.tensor<8xi64, #m, [R]>
  %11 = dtensor.topk_indices %a {dim = 1 : i64, k = 2 : i64, largest = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x2xi64, #m, [R]>
  return
}
