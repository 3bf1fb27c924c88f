#m = #dtensor.mesh<[2]>
func.func @not_local(%x: !dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [R]> {
  %0 = dtensor.relu %x : (!dtensor.tensor<4xf32, #m, [S(0)]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return %0 : !dtensor.tensor<4xf32, #m, [R]>
}
