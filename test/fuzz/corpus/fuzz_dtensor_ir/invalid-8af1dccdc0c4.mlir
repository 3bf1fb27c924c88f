#m = #dtensor.mesh<[2]>
func.func @compare_result_not_bool(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  %0 = dtensor.lt %a, %a : (!dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}
