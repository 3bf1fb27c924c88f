#m = #dtensor.mesh<[2]>
func.func @redistribute_shape(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  %0 = dtensor.redistribute %a : !dtensor.tensor<4xf32, #m, [R]> -> !dtensor.tensor<5xf32, #m, [R]>
  return
}
