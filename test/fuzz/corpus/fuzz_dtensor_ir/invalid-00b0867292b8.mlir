#m = #dtensor.mesh<[2]>
func.func @reduce_scatter_from_replicate(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  %0 = dtensor.reduce_scatter %a on axis 0 : !dtensor.tensor<4xf32, #m, [R]> -> !dtensor.tensor<4xf32, #m, [S(0)]>
  return
}
