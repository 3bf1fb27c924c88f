#m = #dtensor.mesh<[2, 2]>
func.func @keeps_declared_results() -> !dtensor.tensor<4x4xf32, #m, [S(0), P(sum)]> {
  %0 = dtensor.full 2.0 : !dtensor.tensor<4x4xf32, #m, [S(0), P(sum)]>
  return %0 : !dtensor.tensor<4x4xf32, #m, [S(0), P(sum)]>
}
