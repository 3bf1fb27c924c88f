#mesh = #dtensor.mesh<[2]>
func.func @unchanged(%x: !dtensor.tensor<4xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4xf32, #mesh, [S(0)]> {
  %0 = dtensor.relu %x : (!dtensor.tensor<4xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4xf32, #mesh, [S(0)]>
  return %0 : !dtensor.tensor<4xf32, #mesh, [S(0)]>
}
