#m = #dtensor.mesh<[2]>
func.func @add_dtype_mismatch(%a: !dtensor.tensor<4xf32, #m, [R]>, %b: !dtensor.tensor<4xf64, #m, [R]>) {
  %0 = dtensor.add %a, %b : (!dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf64, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}
