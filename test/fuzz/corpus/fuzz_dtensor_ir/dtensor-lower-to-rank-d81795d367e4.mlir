#m = #dtensor.mesh<[2]>
func.func @gather_uneven(%x: !dtensor.tensor<5x4xf32, #m, [S(0)]>) -> !dtensor.tensor<5x4xf32, #m, [R]> {
  %0 = dtensor.all_gather %x on axis 0 : !dtensor.tensor<5x4xf32, #m, [S(0)]> -> !dtensor.tensor<5x4xf32, #m, [R]>
  %1 = dtensor.exp %0 : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5x4xf32, #m, [R]>
  return %1 : !dtensor.tensor<5x4xf32, #m, [R]>
}
