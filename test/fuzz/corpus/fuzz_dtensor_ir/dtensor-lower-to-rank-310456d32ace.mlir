#m = #dtensor.mesh<[2, 3]>
func.func @nested_uneven(%x: !dtensor.tensor<11xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<11xf32, #m, [S(0), S(0)]> {
  %0 = dtensor.exp %x : (!dtensor.tensor<11xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<11xf32, #m, [S(0), S(0)]>
  return %0 : !dtensor.tensor<11xf32, #m, [S(0), S(0)]>
}
