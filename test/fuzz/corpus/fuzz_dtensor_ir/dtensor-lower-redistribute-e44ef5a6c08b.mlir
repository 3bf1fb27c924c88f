#m = #dtensor.mesh<[2, 2]>
func.func @two_axes(%a: !dtensor.tensor<7x5xf32, #m, [P(sum), S(0)]>) -> !dtensor.tensor<7x5xf32, #m, [S(1), R]> {
  %0 = dtensor.redistribute %a : !dtensor.tensor<7x5xf32, #m, [P(sum), S(0)]> -> !dtensor.tensor<7x5xf32, #m, [S(1), R]>
  return %0 : !dtensor.tensor<7x5xf32, #m, [S(1), R]>
}
