#m = #dtensor.mesh<[2]>
func.func @lower_indexing(%t: !dtensor.tensor<6x4xf32, #m, [S(0)]>, %v: !dtensor.tensor<3xi64, #m, [R]>, %a: !dtensor.tensor<4x6xf32, #m, [S(1)]>) -> (!dtensor.tensor<3x4xf32, #m, [P(sum)]>, !dtensor.tensor<4x6xf32, #m, [S(1)]>, !dtensor.tensor<2x6xf32, #m, [S(1)]>) {
  %0 = dtensor.index_select %t, %v {dim = 0 : i64} : (!dtensor.tensor<6x4xf32, #m, [S(0)]>, !dtensor.tensor<3xi64, #m, [R]>) -> !dtensor.tensor<3x4xf32, #m, [P(sum)]>
  %1 = dtensor.tril %a {diagonal = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [S(1)]>) -> !dtensor.tensor<4x6xf32, #m, [S(1)]>
  %2 = dtensor.slice %a {offsets = array<i64: 1, 0>, sizes = array<i64: 2, 6>, strides = array<i64: 2, 1>} : (!dtensor.tensor<4x6xf32, #m, [S(1)]>) -> !dtensor.tensor<2x6xf32, #m, [S(1)]>
  return %0, %1, %2 : !dtensor.tensor<3x4xf32, #m, [P(sum)]>, !dtensor.tensor<4x6xf32, #m, [S(1)]>, !dtensor.tensor<2x6xf32, #m, [S(1)]>
}
