#m = #dtensor.mesh<[2]>
func.func @gather_index_not_i64(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %i: !dtensor.tensor<4x2xi32, #m, [R]>) {
  %0 = dtensor.gather %a, %i {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x2xi32, #m, [R]>) -> !dtensor.tensor<4x2xf32, #m, [R]>
  return
}
