#m = #dtensor.mesh<[1024]>
func.func @even_1024(%x: !dtensor.tensor<4096x64xf32, #m, [S(0)]>, %w: !dtensor.tensor<64x32xf32, #m, [R]>) -> !dtensor.tensor<f32, #m, [R]> {
  %0 = dtensor.matmul %x, %w : (!dtensor.tensor<4096x64xf32, #m, [S(0)]>, !dtensor.tensor<64x32xf32, #m, [R]>) -> !dtensor.tensor<4096x32xf32, #m, [S(0)]>
  %1 = dtensor.relu %0 : (!dtensor.tensor<4096x32xf32, #m, [S(0)]>) -> !dtensor.tensor<4096x32xf32, #m, [S(0)]>
  %2 = dtensor.sum %1 dims = [0, 1] : (!dtensor.tensor<4096x32xf32, #m, [S(0)]>) -> !dtensor.tensor<f32, #m, [P(sum)]>
  %3 = dtensor.all_reduce %2 on axis 0 : !dtensor.tensor<f32, #m, [P(sum)]> -> !dtensor.tensor<f32, #m, [R]>
  return %3 : !dtensor.tensor<f32, #m, [R]>
}
