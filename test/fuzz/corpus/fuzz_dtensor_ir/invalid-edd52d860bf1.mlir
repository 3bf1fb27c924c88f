#m = #dtensor.mesh<[2]>
func.func @argmax_dim_out_of_range(%a: !dtensor.tensor<4x6xf32, #m, [R]>) {
  %0 = dtensor.argmax %a {dim = 2 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4xi64, #m, [R]>
  return
}
