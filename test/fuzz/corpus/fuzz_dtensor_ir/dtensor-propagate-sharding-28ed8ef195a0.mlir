#m = #dtensor.mesh<[4]>
func.func @fold_chains(%a: !dtensor.tensor<8x8xf32, #m, [S(0)]>) -> (!dtensor.tensor<8x8xf32, #m, [S(0)]>, !dtensor.tensor<8x8xf32, #m, [S(1)]>) {
  %0 = dtensor.redistribute %a : !dtensor.tensor<8x8xf32, #m, [S(0)]> -> !dtensor.tensor<8x8xf32, #m, [R]>
  %1 = dtensor.redistribute %0 : !dtensor.tensor<8x8xf32, #m, [R]> -> !dtensor.tensor<8x8xf32, #m, [S(0)]>
  %2 = dtensor.redistribute %0 : !dtensor.tensor<8x8xf32, #m, [R]> -> !dtensor.tensor<8x8xf32, #m, [S(1)]>
  return %1, %2 : !dtensor.tensor<8x8xf32, #m, [S(0)]>, !dtensor.tensor<8x8xf32, #m, [S(1)]>
}
