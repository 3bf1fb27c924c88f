#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
func.func @topk(%a: !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x2xi64, #m, [S(0), R]> {
  %0 = dtensor.topk_indices %a {dim = 1 : i64, k = 2 : i64, largest = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x2xi64, #m, [S(0), R]>
  return %0 : !dtensor.tensor<4x2xi64, #m, [S(0), R]>
}
