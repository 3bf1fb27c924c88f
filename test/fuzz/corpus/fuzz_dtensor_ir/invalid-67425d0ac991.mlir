#m = #dtensor.mesh<[2]>
func.func @tril_of_vector(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  %0 = dtensor.tril %a {diagonal = 0 : i64} : (!dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}
