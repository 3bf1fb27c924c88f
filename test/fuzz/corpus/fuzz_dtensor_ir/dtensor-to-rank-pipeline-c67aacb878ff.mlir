#m = #dtensor.mesh<[2]>
func.func @mlp(%x: !dtensor.tensor<8x4xf32, #m, [R]>, %w1: !dtensor.tensor<4x16xf32, #m, [S(1)]>, %w2: !dtensor.tensor<16x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]> {
  %h = dtensor.matmul %x, %w1 : (!dtensor.tensor<8x4xf32, #m, [R]>, !dtensor.tensor<4x16xf32, #m, [S(1)]>) -> !dtensor.tensor<8x16xf32, #m, [S(1)]>
  %a = dtensor.relu %h : (!dtensor.tensor<8x16xf32, #m, [S(1)]>) -> !dtensor.tensor<8x16xf32, #m, [S(1)]>
  %y = dtensor.matmul %a, %w2 : (!dtensor.tensor<8x16xf32, #m, [S(1)]>, !dtensor.tensor<16x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %y : !dtensor.tensor<8x4xf32, #m, [S(0)]>
}
