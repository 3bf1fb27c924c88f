#m = #dtensor.mesh<[2, 2]>
func.func @reshape_split_nested(%a: !dtensor.tensor<48xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), S(0)]> {
  %0 = dtensor.reshape %a : (!dtensor.tensor<48xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), S(0)]>
  return %0 : !dtensor.tensor<8x6xf32, #m, [S(0), S(0)]>
}
