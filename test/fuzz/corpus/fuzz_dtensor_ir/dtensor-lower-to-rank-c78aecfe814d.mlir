#m = #dtensor.mesh<[4, 8]>
func.func @remainders_2d(%x: !dtensor.tensor<10x20xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<10x20xf32, #m, [S(0), R]> {
  %0 = dtensor.all_gather %x on axis 1 : !dtensor.tensor<10x20xf32, #m, [S(0), S(1)]> -> !dtensor.tensor<10x20xf32, #m, [S(0), R]>
  return %0 : !dtensor.tensor<10x20xf32, #m, [S(0), R]>
}
