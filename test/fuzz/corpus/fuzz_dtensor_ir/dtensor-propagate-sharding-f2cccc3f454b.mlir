#m = #dtensor.mesh<[2]>
func.func @reshape_merge(%a: !dtensor.tensor<4x6xf32, #m, [S(1)]>) -> !dtensor.tensor<24xf32, #m, [R]> {
  %0 = dtensor.reshape %a : (!dtensor.tensor<4x6xf32, #m, [S(1)]>) -> !dtensor.tensor<24xf32, #m, [R]>
  return %0 : !dtensor.tensor<24xf32, #m, [R]>
}
