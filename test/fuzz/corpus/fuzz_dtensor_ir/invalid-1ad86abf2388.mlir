#m = #dtensor.mesh<[2]>
func.func @topk_k_too_large(%a: !dtensor.tensor<4x6xf32, #m, [R]>) {
  %0 = dtensor.topk_indices %a {dim = 1 : i64, k = 7 : i64, largest = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x7xi64, #m, [R]>
  return
}
