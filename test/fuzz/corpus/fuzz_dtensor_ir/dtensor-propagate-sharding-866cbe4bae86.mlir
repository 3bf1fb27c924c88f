#m = #dtensor.mesh<[4]>
func.func @matmul_contract_sharded(%a: !dtensor.tensor<64x64xf32, #m, [S(1)]>, %b: !dtensor.tensor<64x64xf32, #m, [S(0)]>) -> !dtensor.tensor<64x64xf32, #m, [S(0)]> {
  %0 = dtensor.matmul %a, %b : (!dtensor.tensor<64x64xf32, #m, [S(1)]>, !dtensor.tensor<64x64xf32, #m, [S(0)]>) -> !dtensor.tensor<64x64xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<64x64xf32, #m, [S(0)]>
}
