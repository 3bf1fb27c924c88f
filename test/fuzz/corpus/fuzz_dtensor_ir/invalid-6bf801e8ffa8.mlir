#m = #dtensor.mesh<[2]>
func.func @iota_bool() {
  %0 = dtensor.iota {dim = 0 : i64, start = 0.0 : f64, step = 1.0 : f64} : () -> !dtensor.tensor<4xi1, #m, [R]>
  return
}
