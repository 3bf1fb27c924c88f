#m = #dtensor.mesh<[2, 2]>
func.func @groups(%x: !dtensor.tensor<4x8xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4xf32, #m, [S(0), S(0)]> {
  %0 = dtensor.mean %x dims = [1] : (!dtensor.tensor<4x8xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4xf32, #m, [S(0), P(sum)]>
  %1 = dtensor.all_reduce %0 on axis 1 : !dtensor.tensor<4xf32, #m, [S(0), P(sum)]> -> !dtensor.tensor<4xf32, #m, [S(0), R]>
  %2 = dtensor.local_slice %1 on axis 1 : !dtensor.tensor<4xf32, #m, [S(0), R]> -> !dtensor.tensor<4xf32, #m, [S(0), S(0)]>
  return %2 : !dtensor.tensor<4xf32, #m, [S(0), S(0)]>
}
