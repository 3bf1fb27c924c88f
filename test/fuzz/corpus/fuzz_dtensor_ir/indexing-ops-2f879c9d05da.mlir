#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
func.func @triangles_and_iota(%a: !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>) -> (!dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<8xi64, #m, [S(0), R]>) {
  %0 = dtensor.tril %a {diagonal = -1 : i64} : (!dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>
  %1 = dtensor.triu %a {diagonal = 1 : i64} : (!dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>
  %2 = dtensor.iota {dim = 0 : i64, start = 2.0 : f64, step = 3.0 : f64} : () -> !dtensor.tensor<8xi64, #m, [S(0), R]>
  return %0, %1, %2 : !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<4x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<8xi64, #m, [S(0), R]>
}
