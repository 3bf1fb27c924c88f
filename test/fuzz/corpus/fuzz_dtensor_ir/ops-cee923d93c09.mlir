#m1 = #dtensor.mesh<[4]>
#m2 = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>
func.func @elementwise(%a: !dtensor.tensor<7x5xf32, #m2, [S(0), R]>, %b: !dtensor.tensor<7x5xf32, #m2, [R, S(1)]>) {
  %0 = dtensor.add %a, %b : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [R, S(1)]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), S(1)]>
  %1 = dtensor.sub %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %2 = dtensor.mul %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %3 = dtensor.div %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %4 = dtensor.maximum %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %5 = dtensor.minimum %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %6 = dtensor.pow %a, %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>, !dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %7 = dtensor.neg %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %8 = dtensor.abs %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %9 = dtensor.exp %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %10 = dtensor.log %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %11 = dtensor.sqrt %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %12 = dtensor.rsqrt %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %13 = dtensor.relu %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %14 = dtensor.tanh %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %15 = dtensor.sigmoid %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %16 = dtensor.gelu %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %17 = dtensor.silu %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %18 = dtensor.sin %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %19 = dtensor.cos %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xf32, #m2, [S(0), R]>
  %20 = dtensor.cast %a : (!dtensor.tensor<7x5xf32, #m2, [S(0), R]>) -> !dtensor.tensor<7x5xi64, #m2, [S(0), R]>
  return
}
