#m = #dtensor.mesh<[2]>
func.func @matmul_rank(%a: !dtensor.tensor<4xf32, #m, [R]>, %b: !dtensor.tensor<4x5xf32, #m, [R]>) {
  %0 = dtensor.matmul %a, %b : (!dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4x5xf32, #m, [R]>) -> !dtensor.tensor<4x5xf32, #m, [R]>
  return
}
