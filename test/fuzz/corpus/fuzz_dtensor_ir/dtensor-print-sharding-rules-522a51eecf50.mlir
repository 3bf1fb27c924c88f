#m = #dtensor.mesh<[2]>
func.func @reshape_rules(%a: !dtensor.tensor<8x6xf32, #m, [R]>, %b: !dtensor.tensor<48xf32, #m, [R]>,
                         %c: !dtensor.tensor<6x4xf32, #m, [R]>, %d: !dtensor.tensor<3x4xf32, #m, [R]>) {
  %0 = dtensor.reshape %a : (!dtensor.tensor<8x6xf32, #m, [R]>) -> !dtensor.tensor<48xf32, #m, [R]>
  %1 = dtensor.reshape %b : (!dtensor.tensor<48xf32, #m, [R]>) -> !dtensor.tensor<8x6xf32, #m, [R]>
  %2 = dtensor.reshape %a : (!dtensor.tensor<8x6xf32, #m, [R]>) -> !dtensor.tensor<2x4x6xf32, #m, [R]>
  %3 = dtensor.reshape %c : (!dtensor.tensor<6x4xf32, #m, [R]>) -> !dtensor.tensor<2x12xf32, #m, [R]>
  %4 = dtensor.reshape %d : (!dtensor.tensor<3x4xf32, #m, [R]>) -> !dtensor.tensor<4x3xf32, #m, [R]>
  return
}
