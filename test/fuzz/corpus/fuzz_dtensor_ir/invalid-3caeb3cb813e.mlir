#m = #dtensor.mesh<[2]>
func.func @cast_shape(%a: !dtensor.tensor<3x4xi64, #m, [R]>) {
  %0 = dtensor.cast %a : (!dtensor.tensor<3x4xi64, #m, [R]>) -> !dtensor.tensor<4x3xf32, #m, [R]>
  return
}
