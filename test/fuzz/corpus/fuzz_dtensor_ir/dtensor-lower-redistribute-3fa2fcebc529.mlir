#m = #dtensor.mesh<[2, 2]>
func.func @nested(%a: !dtensor.tensor<7x5xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<7x5xf32, #m, [R, S(0)]> {
  %0 = dtensor.redistribute %a : !dtensor.tensor<7x5xf32, #m, [S(0), S(0)]> -> !dtensor.tensor<7x5xf32, #m, [R, S(0)]>
  return %0 : !dtensor.tensor<7x5xf32, #m, [R, S(0)]>
}
