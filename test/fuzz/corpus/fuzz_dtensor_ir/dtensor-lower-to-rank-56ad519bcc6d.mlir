#m = #dtensor.mesh<[4]>
func.func @reshape_keeps_shard(%x: !dtensor.tensor<8x6xf32, #m, [S(0)]>) -> !dtensor.tensor<48xf32, #m, [S(0)]> {
  %0 = dtensor.reshape %x : (!dtensor.tensor<8x6xf32, #m, [S(0)]>) -> !dtensor.tensor<48xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<48xf32, #m, [S(0)]>
}
