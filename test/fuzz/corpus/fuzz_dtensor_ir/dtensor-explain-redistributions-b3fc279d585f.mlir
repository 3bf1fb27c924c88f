#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
func.func @local_slice_shared(%s: !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>, %a: !dtensor.tensor<8x4xf32, #m, [R, R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]> {
  %0 = dtensor.mul %s, %a : (!dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<8x4xf32, #m, [R, R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>
  %1 = dtensor.add %0, %a : (!dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<8x4xf32, #m, [R, R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>
  return %1 : !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>
}
