#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
func.func @indexing(%a: !dtensor.tensor<4x6xf32, #m, [S(0), R]>, %i: !dtensor.tensor<4x2xi64, #m, [S(0), R]>, %v: !dtensor.tensor<3xi64, #m, [R, R]>) -> (!dtensor.tensor<4x2xf32, #m, [S(0), R]>, !dtensor.tensor<4x12xf32, #m, [S(0), R]>, !dtensor.tensor<4x2xf32, #m, [S(0), R]>, !dtensor.tensor<3x6xf32, #m, [P(sum), R]>, !dtensor.tensor<4x6xf32, #m, [R, R]>) {
  %0 = dtensor.slice %a {offsets = array<i64: 0, 1>, sizes = array<i64: 4, 2>, strides = array<i64: 1, 3>} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x2xf32, #m, [S(0), R]>
  %1 = dtensor.concat %a, %a {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x12xf32, #m, [S(0), R]>
  %2 = dtensor.gather %a, %i {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x2xi64, #m, [S(0), R]>) -> !dtensor.tensor<4x2xf32, #m, [S(0), R]>
  %3 = dtensor.index_select %a, %v {dim = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<3xi64, #m, [R, R]>) -> !dtensor.tensor<3x6xf32, #m, [P(sum), R]>
  %r = dtensor.redistribute %a : !dtensor.tensor<4x6xf32, #m, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m, [R, R]>
  %ri = dtensor.redistribute %i : !dtensor.tensor<4x2xi64, #m, [S(0), R]> -> !dtensor.tensor<4x2xi64, #m, [R, R]>
  %4 = dtensor.scatter_add %r, %ri, %r {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R, R]>, !dtensor.tensor<4x2xi64, #m, [R, R]>, !dtensor.tensor<4x6xf32, #m, [R, R]>) -> !dtensor.tensor<4x6xf32, #m, [R, R]>
  return %0, %1, %2, %3, %4 : !dtensor.tensor<4x2xf32, #m, [S(0), R]>, !dtensor.tensor<4x12xf32, #m, [S(0), R]>, !dtensor.tensor<4x2xf32, #m, [S(0), R]>, !dtensor.tensor<3x6xf32, #m, [P(sum), R]>, !dtensor.tensor<4x6xf32, #m, [R, R]>
}
