#mesh = #dtensor.mesh<[2]>
func.func @f(%x: !dtensor.tensor<4x8xf32, #mesh, [S(1)]>, %w: !dtensor.tensor<8x2xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x2xf32, #mesh, [R]> {
  %0 = dtensor.matmul %x, %w : (!dtensor.tensor<4x8xf32, #mesh, [S(1)]>, !dtensor.tensor<8x2xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x2xf32, #mesh, [R]>
  return %0 : !dtensor.tensor<4x2xf32, #mesh, [R]>
}
