#m = #dtensor.mesh<[2]>
func.func @random_int() {
  %0 = dtensor.random seed = 1 distribution = "uniform" : !dtensor.tensor<4xi64, #m, [R]>
  return
}
