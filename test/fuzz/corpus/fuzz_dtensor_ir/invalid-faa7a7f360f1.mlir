#m = #dtensor.mesh<[2, 2]>
func.func @step_axis_range(%a: !dtensor.tensor<4xf32, #m, [S(0), R]>) {
  %0 = dtensor.local_slice %a on axis 2 : !dtensor.tensor<4xf32, #m, [S(0), R]> -> !dtensor.tensor<4xf32, #m, [S(0), R]>
  return
}
