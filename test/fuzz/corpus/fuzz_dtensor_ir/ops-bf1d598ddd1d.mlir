#m1 = #dtensor.mesh<[4]>
#m2 = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
func.func @creation() -> (!dtensor.tensor<4x4xf32, #m2, [S(0), R]>, !dtensor.tensor<8xf64, #m1, [S(0)]>, !dtensor.tensor<2xf32, #m1, [R]>) {
  %0 = dtensor.full 1.5 : !dtensor.tensor<4x4xf32, #m2, [S(0), R]>
  %1 = dtensor.random seed = 7 distribution = "normal" : !dtensor.tensor<8xf64, #m1, [S(0)]>
  %2 = dtensor.constant dense<[1.0, 2.0]> : tensor<2xf32> : !dtensor.tensor<2xf32, #m1, [R]>
  return %0, %1, %2 : !dtensor.tensor<4x4xf32, #m2, [S(0), R]>, !dtensor.tensor<8xf64, #m1, [S(0)]>, !dtensor.tensor<2xf32, #m1, [R]>
}
