// Batched attention scores with heads sharded: softmax-free q @ k^T scaled,
// then the max over keys; uses bmm, transpose, mul and a max reduction.
//   dtorch-run docs/examples/attention_scores.mlir --world-size 2 --procs 2
#m = #dtensor.mesh<[2]>
func.func @scores(%q: !dtensor.tensor<4x6x8xf32, #m, [S(0)]>, %k: !dtensor.tensor<4x6x8xf32, #m, [S(0)]>) -> !dtensor.tensor<4x6xf32, #m, [R]> {
  %kt = dtensor.transpose %k perm = [0, 2, 1] : (!dtensor.tensor<4x6x8xf32, #m, [S(0)]>) -> !dtensor.tensor<4x8x6xf32, #m, [S(0)]>
  %s = dtensor.bmm %q, %kt : (!dtensor.tensor<4x6x8xf32, #m, [S(0)]>, !dtensor.tensor<4x8x6xf32, #m, [S(0)]>) -> !dtensor.tensor<4x6x6xf32, #m, [S(0)]>
  %c = dtensor.full 0.35355339059327373 : !dtensor.tensor<4x6x6xf32, #m, [S(0)]>
  %z = dtensor.mul %s, %c : (!dtensor.tensor<4x6x6xf32, #m, [S(0)]>, !dtensor.tensor<4x6x6xf32, #m, [S(0)]>) -> !dtensor.tensor<4x6x6xf32, #m, [S(0)]>
  %mx = dtensor.max %z dims = [2] : (!dtensor.tensor<4x6x6xf32, #m, [S(0)]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  return %mx : !dtensor.tensor<4x6xf32, #m, [R]>
}
