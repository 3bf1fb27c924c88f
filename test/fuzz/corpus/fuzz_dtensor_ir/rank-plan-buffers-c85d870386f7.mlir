#m = #dtensor.mesh<[2]>
func.func @classes(%x: !dtensor.tensor<5x4xf32, #m, [S(0)]>) -> !dtensor.tensor<5xf32, #m, [R]> {
  %0 = dtensor.all_gather %x on axis 0 : !dtensor.tensor<5x4xf32, #m, [S(0)]> -> !dtensor.tensor<5x4xf32, #m, [R]>
  %1 = dtensor.exp %0 : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5x4xf32, #m, [R]>
  %2 = dtensor.neg %1 : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5x4xf32, #m, [R]>
  %3 = dtensor.sum %2 dims = [1] : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5xf32, #m, [R]>
  return %3 : !dtensor.tensor<5xf32, #m, [R]>
}
