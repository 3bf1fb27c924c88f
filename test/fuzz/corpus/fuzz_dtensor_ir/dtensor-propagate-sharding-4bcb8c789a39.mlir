#m = #dtensor.mesh<[4]>
func.func @already_local(%a: !dtensor.tensor<8x4xf32, #m, [S(0)]>, %b: !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]> {
  %0 = dtensor.add %a, %b : (!dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<8x4xf32, #m, [S(0)]>
}
