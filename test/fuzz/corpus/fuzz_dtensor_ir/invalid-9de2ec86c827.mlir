#m = #dtensor.mesh<[2]>
func.func @all_to_all_same_dim(%a: !dtensor.tensor<4x4xf32, #m, [S(0)]>) {
  %0 = dtensor.all_to_all %a on axis 0 : !dtensor.tensor<4x4xf32, #m, [S(0)]> -> !dtensor.tensor<4x4xf32, #m, [S(0)]>
  return
}
