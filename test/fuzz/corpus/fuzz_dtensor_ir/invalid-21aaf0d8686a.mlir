#m = #dtensor.mesh<[2]>
func.func @slice_out_of_bounds(%a: !dtensor.tensor<4x6xf32, #m, [R]>) {
  %0 = dtensor.slice %a {offsets = array<i64: 0, 1>, sizes = array<i64: 4, 3>, strides = array<i64: 1, 3>} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x3xf32, #m, [R]>
  return
}
