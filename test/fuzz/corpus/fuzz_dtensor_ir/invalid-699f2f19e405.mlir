#m = #dtensor.mesh<[2]>
func.func @constant_shape() {
  %0 = dtensor.constant dense<[1.0, 2.0]> : tensor<2xf32> : !dtensor.tensor<3xf32, #m, [R]>
  return
}
