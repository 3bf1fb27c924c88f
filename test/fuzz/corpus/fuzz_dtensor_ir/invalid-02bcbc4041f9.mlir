#m = #dtensor.mesh<[2]>
func.func @index_select_2d_index(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %i: !dtensor.tensor<2x2xi64, #m, [R]>) {
  %0 = dtensor.index_select %a, %i {dim = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<2x2xi64, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  return
}
