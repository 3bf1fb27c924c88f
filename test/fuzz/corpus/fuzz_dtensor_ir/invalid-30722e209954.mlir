#m = #dtensor.mesh<[2]>
func.func @transpose_perm(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  %0 = dtensor.transpose %a perm = [0, 0] : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<4x4xf32, #m, [R]>
  return
}
