#m = #dtensor.mesh<[2]>
func.func @to_partial_from_shard(%a: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  %0 = dtensor.to_partial %a on axis 0 : !dtensor.tensor<4xf32, #m, [S(0)]> -> !dtensor.tensor<4xf32, #m, [P(sum)]>
  return
}
