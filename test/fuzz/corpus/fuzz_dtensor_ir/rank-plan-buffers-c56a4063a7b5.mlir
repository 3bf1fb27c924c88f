#m = #dtensor.mesh<[2]>
func.func @not_lowered(%x: !dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]> {
  %0 = dtensor.exp %x : (!dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  %1 = dtensor.neg %0 : (!dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return %1 : !dtensor.tensor<4xf32, #m, [R]>
}
