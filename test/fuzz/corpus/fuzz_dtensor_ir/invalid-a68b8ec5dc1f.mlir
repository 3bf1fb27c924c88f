#m = #dtensor.mesh<[2]>
func.func @sum_result(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  %0 = dtensor.max %a dims = [1] keepdim : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}
