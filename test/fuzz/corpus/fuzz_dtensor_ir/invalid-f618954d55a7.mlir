#m = #dtensor.mesh<[2]>
func.func @concat_extent_mismatch(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %b: !dtensor.tensor<3x6xf32, #m, [R]>) {
  %0 = dtensor.concat %a, %b {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<3x6xf32, #m, [R]>) -> !dtensor.tensor<4x12xf32, #m, [R]>
  return
}
