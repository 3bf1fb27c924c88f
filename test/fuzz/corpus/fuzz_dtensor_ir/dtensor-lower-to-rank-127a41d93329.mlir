#m = #dtensor.mesh<[2]>
func.func @creation() -> (!dtensor.tensor<3x2xf32, #m, [S(0)]>, !dtensor.tensor<3xi64, #m, [S(0)]>, !dtensor.tensor<3xi64, #m, [P(sum)]>) {
  %0 = dtensor.random seed = 5 distribution = "uniform" : !dtensor.tensor<3x2xf32, #m, [S(0)]>
  %1 = dtensor.constant dense<[1, 2, 3]> : tensor<3xi64> : !dtensor.tensor<3xi64, #m, [S(0)]>
  %2 = dtensor.constant dense<[1, 2, 3]> : tensor<3xi64> : !dtensor.tensor<3xi64, #m, [R]>
  %3 = dtensor.to_partial %2 on axis 0 : !dtensor.tensor<3xi64, #m, [R]> -> !dtensor.tensor<3xi64, #m, [P(sum)]>
  return %0, %1, %3 : !dtensor.tensor<3x2xf32, #m, [S(0)]>, !dtensor.tensor<3xi64, #m, [S(0)]>, !dtensor.tensor<3xi64, #m, [P(sum)]>
}
