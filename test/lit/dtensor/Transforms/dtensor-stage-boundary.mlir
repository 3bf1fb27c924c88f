// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(dtensor-stage-boundary{stage=sharded})' | FileCheck %s
// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(dtensor-stage-boundary{stage=sharded})' --mlir-print-ir-after=dtensor-stage-boundary 2>&1 >/dev/null | FileCheck %s --check-prefix=DUMP

// The boundary verifies the module and leaves it unchanged.

// CHECK-LABEL: func.func @unchanged
// CHECK-NEXT: %[[R:.*]] = dtensor.relu %arg0
// CHECK-NEXT: return %[[R]]
// DUMP: IR Dump After StageBoundary (dtensor-stage-boundary)
// DUMP: func.func @unchanged
#mesh = #dtensor.mesh<[2]>
func.func @unchanged(%x: !dtensor.tensor<4xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4xf32, #mesh, [S(0)]> {
  %0 = dtensor.relu %x : (!dtensor.tensor<4xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4xf32, #mesh, [S(0)]>
  return %0 : !dtensor.tensor<4xf32, #mesh, [S(0)]>
}

// -----

// CHECK-LABEL: func.func @rank_ops
// CHECK-NEXT: rank.kernel "relu"
func.func @rank_ops(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = rank.kernel "relu"(%x) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
