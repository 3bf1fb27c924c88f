#m = #dtensor.mesh<[4]>
func.func @uneven_10_on_4(%x: !dtensor.tensor<10x2xf32, #m, [S(0)]>) -> !dtensor.tensor<10x2xf32, #m, [R]> {
  %0 = dtensor.all_gather %x on axis 0 : !dtensor.tensor<10x2xf32, #m, [S(0)]> -> !dtensor.tensor<10x2xf32, #m, [R]>
  return %0 : !dtensor.tensor<10x2xf32, #m, [R]>
}
