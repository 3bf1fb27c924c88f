#m = #dtensor.mesh<[2, 2]>
func.func @keep_outer(%a: !dtensor.tensor<4x6x8xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4x6x8xf32, #m, [S(0), S(2)]> {
  %0 = dtensor.redistribute %a : !dtensor.tensor<4x6x8xf32, #m, [S(0), S(1)]> -> !dtensor.tensor<4x6x8xf32, #m, [S(0), S(2)]>
  return %0 : !dtensor.tensor<4x6x8xf32, #m, [S(0), S(2)]>
}
