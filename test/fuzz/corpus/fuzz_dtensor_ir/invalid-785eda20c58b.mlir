#m = #dtensor.mesh<[2]>
func.func @add_shape_mismatch(%a: !dtensor.tensor<4xf32, #m, [R]>, %b: !dtensor.tensor<5xf32, #m, [R]>) {
  %0 = dtensor.add %a, %b : (!dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}
