#m = #dtensor.mesh<[2]>
func.func @bmm_batch4(%a: !dtensor.tensor<2x3x4x3xf32, #m, [R]>, %b: !dtensor.tensor<2x2x3x5xf32, #m, [R]>) {
  %0 = dtensor.bmm %a, %b : (!dtensor.tensor<2x3x4x3xf32, #m, [R]>, !dtensor.tensor<2x2x3x5xf32, #m, [R]>) -> !dtensor.tensor<2x3x4x5xf32, #m, [R]>
  return
}
