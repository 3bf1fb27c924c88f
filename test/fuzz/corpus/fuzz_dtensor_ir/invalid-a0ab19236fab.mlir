#m = #dtensor.mesh<[2]>
func.func @sum_dim_range(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  %0 = dtensor.sum %a dims = [2] : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}
