#m = #dtensor.mesh<[2]>
func.func @bmm_rules(%q: !dtensor.tensor<4x2x6x8xf32, #m, [R]>, %k: !dtensor.tensor<4x2x8x6xf32, #m, [R]>) {
  %0 = dtensor.bmm %q, %k : (!dtensor.tensor<4x2x6x8xf32, #m, [R]>, !dtensor.tensor<4x2x8x6xf32, #m, [R]>) -> !dtensor.tensor<4x2x6x6xf32, #m, [R]>
  return
}
