#m = #dtensor.mesh<[4]>
func.func @reshape_merge_uneven(%a: !dtensor.tensor<6x4xf32, #m, [S(0)]>) -> !dtensor.tensor<24xf32, #m, [S(0)]> {
  %0 = dtensor.reshape %a : (!dtensor.tensor<6x4xf32, #m, [S(0)]>) -> !dtensor.tensor<24xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<24xf32, #m, [S(0)]>
}
