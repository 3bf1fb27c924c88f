#m = #dtensor.mesh<[4]>
func.func @one_axis(%s: !dtensor.tensor<7x5xf32, #m, [S(0)]>, %r: !dtensor.tensor<7x5xf32, #m, [R]>, %p: !dtensor.tensor<7x5xf32, #m, [P(sum)]>) {
  %0 = dtensor.redistribute %s : !dtensor.tensor<7x5xf32, #m, [S(0)]> -> !dtensor.tensor<7x5xf32, #m, [R]>
  %1 = dtensor.redistribute %r : !dtensor.tensor<7x5xf32, #m, [R]> -> !dtensor.tensor<7x5xf32, #m, [S(1)]>
  %2 = dtensor.redistribute %p : !dtensor.tensor<7x5xf32, #m, [P(sum)]> -> !dtensor.tensor<7x5xf32, #m, [R]>
  %3 = dtensor.redistribute %p : !dtensor.tensor<7x5xf32, #m, [P(sum)]> -> !dtensor.tensor<7x5xf32, #m, [S(1)]>
  %4 = dtensor.redistribute %s : !dtensor.tensor<7x5xf32, #m, [S(0)]> -> !dtensor.tensor<7x5xf32, #m, [S(1)]>
  %5 = dtensor.redistribute %r : !dtensor.tensor<7x5xf32, #m, [R]> -> !dtensor.tensor<7x5xf32, #m, [P(max)]>
  return
}
