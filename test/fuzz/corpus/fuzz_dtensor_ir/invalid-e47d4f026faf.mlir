#m = #dtensor.mesh<[2]>
func.func @unary_shape(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  %0 = dtensor.relu %a : (!dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<5xf32, #m, [R]>
  return
}
