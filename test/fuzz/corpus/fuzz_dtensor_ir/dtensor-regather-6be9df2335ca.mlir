#m = #dtensor.mesh<[4]>
func.func @forward_and_backward_gather(%w: !dtensor.tensor<8x4xf32, #m, [S(0)]>, %x: !dtensor.tensor<8x8xf32, #m, [S(0)]>) -> (!dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>) {
  %g = dtensor.redistribute %w : !dtensor.tensor<8x4xf32, #m, [S(0)]> -> !dtensor.tensor<8x4xf32, #m, [R]>
  %g2 = dtensor.redistribute %w : !dtensor.tensor<8x4xf32, #m, [S(0)]> -> !dtensor.tensor<8x4xf32, #m, [R]>
  %again = dtensor.redistribute %w {dtorch.regather = 1 : i64} : !dtensor.tensor<8x4xf32, #m, [S(0)]> -> !dtensor.tensor<8x4xf32, #m, [R]>
  %0 = dtensor.matmul %x, %g : (!dtensor.tensor<8x8xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  %1 = dtensor.matmul %x, %g2 : (!dtensor.tensor<8x8xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  %2 = dtensor.matmul %x, %again : (!dtensor.tensor<8x8xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %0, %1, %2 : !dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>
}
func.func @chain(%w: !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(1)]> {
  %g = dtensor.redistribute %w {dtorch.regather = 1 : i64} : !dtensor.tensor<8x4xf32, #m, [S(0)]> -> !dtensor.tensor<8x4xf32, #m, [R]>
  %s = dtensor.redistribute %g : !dtensor.tensor<8x4xf32, #m, [R]> -> !dtensor.tensor<8x4xf32, #m, [S(1)]>
  return %s : !dtensor.tensor<8x4xf32, #m, [S(1)]>
}
