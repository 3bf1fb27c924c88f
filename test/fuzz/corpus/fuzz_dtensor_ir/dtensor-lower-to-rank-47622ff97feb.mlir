#m = #dtensor.mesh<[2]>
func.func @a2a(%x: !dtensor.tensor<5x3xf32, #m, [S(0)]>) -> !dtensor.tensor<5x3xf32, #m, [S(1)]> {
  %0 = dtensor.all_to_all %x on axis 0 : !dtensor.tensor<5x3xf32, #m, [S(0)]> -> !dtensor.tensor<5x3xf32, #m, [S(1)]>
  return %0 : !dtensor.tensor<5x3xf32, #m, [S(1)]>
}
