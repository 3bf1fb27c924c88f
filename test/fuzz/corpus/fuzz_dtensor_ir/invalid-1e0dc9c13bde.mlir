#m = #dtensor.mesh<[2]>
func.func @transpose_shape(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  %0 = dtensor.transpose %a perm = [1, 0] : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<4x3xf32, #m, [R]>
  return
}
