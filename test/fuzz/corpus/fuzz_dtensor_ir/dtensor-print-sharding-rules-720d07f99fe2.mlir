#m = #dtensor.mesh<[2]>
func.func @rules(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %b: !dtensor.tensor<6x8xf32, #m, [R]>,
                 %c: !dtensor.tensor<2x4x6xf32, #m, [R]>, %d: !dtensor.tensor<2x6x8xf32, #m, [R]>) {
  %0 = dtensor.full 1.0 : !dtensor.tensor<4x6xf32, #m, [R]>
  %1 = dtensor.random seed = 1 distribution = "normal" : !dtensor.tensor<4x6xf32, #m, [R]>
  %2 = dtensor.constant dense<[1.0, 2.0]> : tensor<2xf32> : !dtensor.tensor<2xf32, #m, [R]>
  %3 = dtensor.add %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %4 = dtensor.sub %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %5 = dtensor.mul %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %6 = dtensor.div %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %7 = dtensor.maximum %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %8 = dtensor.minimum %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %9 = dtensor.pow %a, %a : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %10 = dtensor.neg %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %11 = dtensor.gelu %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  %12 = dtensor.matmul %a, %b : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<6x8xf32, #m, [R]>) -> !dtensor.tensor<4x8xf32, #m, [R]>
  %13 = dtensor.bmm %c, %d : (!dtensor.tensor<2x4x6xf32, #m, [R]>, !dtensor.tensor<2x6x8xf32, #m, [R]>) -> !dtensor.tensor<2x4x8xf32, #m, [R]>
  %14 = dtensor.sum %a dims = [1] : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  %15 = dtensor.mean %a dims = [0] keepdim : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<1x6xf32, #m, [R]>
  %16 = dtensor.max %a dims = [0, 1] : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<f32, #m, [R]>
  %17 = dtensor.reshape %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x2x3xf32, #m, [R]>
  %18 = dtensor.transpose %a perm = [1, 0] : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<6x4xf32, #m, [R]>
  %19 = dtensor.broadcast_to %b : (!dtensor.tensor<6x8xf32, #m, [R]>) -> !dtensor.tensor<5x6x8xf32, #m, [R]>
  %20 = dtensor.cast %a : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xi64, #m, [R]>
  return
}
