// Data-parallel mean over a 2x2 mesh with an uneven batch: rows sharded on
// "dp", columns on "tp"; the row mean is a partial sum, then replicated.
//   dtorch-run docs/examples/reduce2d.mlir --world-size 4 --procs 2
#m = #dtensor.mesh<[2, 2]>
func.func @reduce(%x: !dtensor.tensor<7x5xf64, #m, [S(0), S(1)]>, %b: !dtensor.tensor<5xf64, #m, [R, R]>) -> (!dtensor.tensor<5xf64, #m, [R, R]>, !dtensor.tensor<7x5xf64, #m, [S(0), S(1)]>) {
  %bb = dtensor.broadcast_to %b : (!dtensor.tensor<5xf64, #m, [R, R]>) -> !dtensor.tensor<7x5xf64, #m, [S(0), S(1)]>
  %s = dtensor.add %x, %bb : (!dtensor.tensor<7x5xf64, #m, [S(0), S(1)]>, !dtensor.tensor<7x5xf64, #m, [S(0), S(1)]>) -> !dtensor.tensor<7x5xf64, #m, [S(0), S(1)]>
  %e = dtensor.exp %s : (!dtensor.tensor<7x5xf64, #m, [S(0), S(1)]>) -> !dtensor.tensor<7x5xf64, #m, [S(0), S(1)]>
  %m0 = dtensor.mean %e dims = [0] : (!dtensor.tensor<7x5xf64, #m, [S(0), S(1)]>) -> !dtensor.tensor<5xf64, #m, [R, R]>
  return %m0, %e : !dtensor.tensor<5xf64, #m, [R, R]>, !dtensor.tensor<7x5xf64, #m, [S(0), S(1)]>
}
