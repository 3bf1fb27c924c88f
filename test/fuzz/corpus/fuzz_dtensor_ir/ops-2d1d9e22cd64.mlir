#m1 = #dtensor.mesh<[4]>
#m2 = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
func.func @shape_and_layout(%a: !dtensor.tensor<4x6xf32, #m2, [S(0), R]>, %p: !dtensor.tensor<4x6xf32, #m2, [P(sum), R]>) {
  %0 = dtensor.reshape %a : (!dtensor.tensor<4x6xf32, #m2, [S(0), R]>) -> !dtensor.tensor<4x2x3xf32, #m2, [S(0), R]>
  %9 = dtensor.broadcast_to %a : (!dtensor.tensor<4x6xf32, #m2, [S(0), R]>) -> !dtensor.tensor<3x4x6xf32, #m2, [S(1), R]>
  %1 = dtensor.transpose %a perm = [1, 0] : (!dtensor.tensor<4x6xf32, #m2, [S(0), R]>) -> !dtensor.tensor<6x4xf32, #m2, [S(1), R]>
  %2 = dtensor.redistribute %a : !dtensor.tensor<4x6xf32, #m2, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m2, [R, S(1)]>
  %3 = dtensor.all_reduce %p on axis 0 : !dtensor.tensor<4x6xf32, #m2, [P(sum), R]> -> !dtensor.tensor<4x6xf32, #m2, [R, R]>
  %4 = dtensor.reduce_scatter %p on axis 0 : !dtensor.tensor<4x6xf32, #m2, [P(sum), R]> -> !dtensor.tensor<4x6xf32, #m2, [S(1), R]>
  %5 = dtensor.all_gather %a on axis 0 : !dtensor.tensor<4x6xf32, #m2, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m2, [R, R]>
  %6 = dtensor.all_to_all %a on axis 0 : !dtensor.tensor<4x6xf32, #m2, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m2, [S(1), R]>
  %7 = dtensor.local_slice %a on axis 1 : !dtensor.tensor<4x6xf32, #m2, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m2, [S(0), S(1)]>
  %8 = dtensor.to_partial %a on axis 1 : !dtensor.tensor<4x6xf32, #m2, [S(0), R]> -> !dtensor.tensor<4x6xf32, #m2, [S(0), P(max)]>
  return
}
