#m = #dtensor.mesh<[2]>
func.func @reshape_count(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  %0 = dtensor.reshape %a : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<5x2xf32, #m, [R]>
  return
}
