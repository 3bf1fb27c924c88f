#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
func.func @reductions(%a: !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> (!dtensor.tensor<4xf32, #m, [S(0), R]>, !dtensor.tensor<4xi64, #m, [S(0), R]>, !dtensor.tensor<4x1xi64, #m, [S(0), R]>) {
  %0 = dtensor.min %a dims = [1] : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4xf32, #m, [S(0), R]>
  %1 = dtensor.argmax %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4xi64, #m, [S(0), R]>
  %2 = dtensor.argmin %a {dim = 1 : i64, keepdim} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x1xi64, #m, [S(0), R]>
  return %0, %1, %2 : !dtensor.tensor<4xf32, #m, [S(0), R]>, !dtensor.tensor<4xi64, #m, [S(0), R]>, !dtensor.tensor<4x1xi64, #m, [S(0), R]>
}
