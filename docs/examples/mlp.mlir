// A tensor-parallel MLP layer on 4 ranks: x replicated, w1 column-sharded,
// w2 row-sharded; the row-wise projection's partial sums are reduced into a
// row-sharded output.
//   dtorch-run docs/examples/mlp.mlir --world-size 4 --procs 2
#m = #dtensor.mesh<[4]>
func.func @mlp(%x: !dtensor.tensor<8x16xf32, #m, [R]>,
               %w1: !dtensor.tensor<16x32xf32, #m, [S(1)]>,
               %w2: !dtensor.tensor<32x16xf32, #m, [S(0)]>) -> !dtensor.tensor<8x16xf32, #m, [S(0)]> {
  %h = dtensor.matmul %x, %w1 : (!dtensor.tensor<8x16xf32, #m, [R]>, !dtensor.tensor<16x32xf32, #m, [S(1)]>) -> !dtensor.tensor<8x32xf32, #m, [S(1)]>
  %a = dtensor.gelu %h : (!dtensor.tensor<8x32xf32, #m, [S(1)]>) -> !dtensor.tensor<8x32xf32, #m, [S(1)]>
  %y = dtensor.matmul %a, %w2 : (!dtensor.tensor<8x32xf32, #m, [S(1)]>, !dtensor.tensor<32x16xf32, #m, [S(0)]>) -> !dtensor.tensor<8x16xf32, #m, [S(0)]>
  return %y : !dtensor.tensor<8x16xf32, #m, [S(0)]>
}
