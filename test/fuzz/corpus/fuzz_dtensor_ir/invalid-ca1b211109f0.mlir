#m = #dtensor.mesh<[2]>
func.func @sum_dim_repeat(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  %0 = dtensor.mean %a dims = [1, 1] : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}
