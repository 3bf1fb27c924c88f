#m = #dtensor.mesh<[4]>
func.func @explicit_uneven(%a: !dtensor.tensor<7x5xf32, #m, [S(0)]>) -> !dtensor.tensor<7x5xf32, #m, [R]> {
  %0 = dtensor.redistribute %a : !dtensor.tensor<7x5xf32, #m, [S(0)]> -> !dtensor.tensor<7x5xf32, #m, [R]>
  return %0 : !dtensor.tensor<7x5xf32, #m, [R]>
}
