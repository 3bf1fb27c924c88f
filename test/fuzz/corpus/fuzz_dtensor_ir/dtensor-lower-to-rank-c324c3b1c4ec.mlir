#m = #dtensor.mesh<[4]>
func.func @reshape_uneven_not_local(%x: !dtensor.tensor<6x4xf32, #m, [S(0)]>) -> !dtensor.tensor<24xf32, #m, [S(0)]> {
  %0 = dtensor.reshape %x : (!dtensor.tensor<6x4xf32, #m, [S(0)]>) -> !dtensor.tensor<24xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<24xf32, #m, [S(0)]>
}
