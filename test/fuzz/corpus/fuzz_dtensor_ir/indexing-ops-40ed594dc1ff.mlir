#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
func.func @compare_and_where(%a: !dtensor.tensor<4x6xf32, #m, [S(0), R]>, %b: !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xf32, #m, [S(0), R]> {
  %0 = dtensor.eq %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  %1 = dtensor.ne %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  %2 = dtensor.lt %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  %3 = dtensor.le %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  %4 = dtensor.gt %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  %5 = dtensor.ge %a, %b : (!dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xi1, #m, [S(0), R]>
  %6 = dtensor.where %0, %a, %b : (!dtensor.tensor<4x6xi1, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>, !dtensor.tensor<4x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<4x6xf32, #m, [S(0), R]>
  return %6 : !dtensor.tensor<4x6xf32, #m, [S(0), R]>
}
