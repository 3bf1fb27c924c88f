#m = #dtensor.mesh<[2]>
func.func @random_dist() {
  %0 = dtensor.random seed = 1 distribution = "poisson" : !dtensor.tensor<4xf32, #m, [R]>
  return
}
