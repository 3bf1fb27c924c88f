#m = #dtensor.mesh<[2]>
func.func @broadcast_rank(%a: !dtensor.tensor<3x4xf32, #m, [R]>) {
  %0 = dtensor.broadcast_to %a : (!dtensor.tensor<3x4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}
