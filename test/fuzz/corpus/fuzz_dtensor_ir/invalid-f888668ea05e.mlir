#m = #dtensor.mesh<[2, 2]>
func.func @step_wrong_kind(%a: !dtensor.tensor<4xf32, #m, [S(0), R]>) {
  %0 = dtensor.all_reduce %a on axis 0 : !dtensor.tensor<4xf32, #m, [S(0), R]> -> !dtensor.tensor<4xf32, #m, [R, R]>
  return
}
