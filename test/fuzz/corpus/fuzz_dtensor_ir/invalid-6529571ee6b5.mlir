#m = #dtensor.mesh<[2]>
func.func @exp_of_int(%a: !dtensor.tensor<4xi64, #m, [R]>) {
  %0 = dtensor.exp %a : (!dtensor.tensor<4xi64, #m, [R]>) -> !dtensor.tensor<4xi64, #m, [R]>
  return
}
