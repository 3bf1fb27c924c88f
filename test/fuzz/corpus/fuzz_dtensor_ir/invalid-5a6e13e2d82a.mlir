#m = #dtensor.mesh<[2]>
func.func @where_condition_not_bool(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  %0 = dtensor.where %a, %a, %a : (!dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}
