#m = #dtensor.mesh<[2]>
func.func @scatter_add_index_too_big(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %i: !dtensor.tensor<4x7xi64, #m, [R]>, %s: !dtensor.tensor<4x6xf32, #m, [R]>) {
  %0 = dtensor.scatter_add %a, %i, %s {dim = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x7xi64, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  return
}
