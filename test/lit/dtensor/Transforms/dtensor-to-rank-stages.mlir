// RUN: dtorch-opt %s --pass-pipeline='builtin.module(dtensor-to-rank)' --dump-pass-pipeline 2>&1 >/dev/null | FileCheck %s --check-prefix=PIPELINE
// RUN: dtorch-opt %s --pass-pipeline='builtin.module(dtensor-to-rank)' --mlir-print-ir-after=dtensor-stage-boundary 2>&1 >/dev/null | FileCheck %s --check-prefix=STAGES
// RUN: dtorch-opt %s --pass-pipeline='builtin.module(dtensor-stage-boundary{stage=input})' | FileCheck %s --check-prefix=UNCHANGED

// The one pipeline definition (buildDTensorToRankPipeline): a stage boundary
// pass ends "sharded", "redistributed" and "rank", verifying the module;
// the compiler prints dtorch.last_ir's stages there.

// PIPELINE: dtensor-propagate-sharding
// PIPELINE: dtensor-cse
// PIPELINE: dtensor-stage-boundary{stage=sharded}
// PIPELINE: dtensor-lower-redistribute
// PIPELINE: dtensor-stage-boundary{stage=redistributed}
// PIPELINE: dtensor-lower-to-rank
// PIPELINE: rank-schedule-collectives
// PIPELINE: dtensor-stage-boundary{stage=rank}

// STAGES: IR Dump After StageBoundary (dtensor-stage-boundary)
// STAGES: dtensor.redistribute %{{.*}} [P(sum)]> -> {{.*}} [R]>
// STAGES: IR Dump After StageBoundary (dtensor-stage-boundary)
// STAGES: dtensor.all_reduce %{{.*}} on axis 0
// STAGES: IR Dump After StageBoundary (dtensor-stage-boundary)
// STAGES: func.func @f_class0({{.*}}) -> tensor<4x2xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>], rank.scheduled}
// STAGES: rank.all_reduce %{{.*}} {axis = 0 : i64, reduce = "sum"}
// STAGES-NOT: func.func @f_class1

// UNCHANGED: func.func @f
// UNCHANGED-NEXT: dtensor.matmul

#mesh = #dtensor.mesh<[2]>
func.func @f(%x: !dtensor.tensor<4x8xf32, #mesh, [S(1)]>, %w: !dtensor.tensor<8x2xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x2xf32, #mesh, [R]> {
  %0 = dtensor.matmul %x, %w : (!dtensor.tensor<4x8xf32, #mesh, [S(1)]>, !dtensor.tensor<8x2xf32, #mesh, [S(0)]>) -> !dtensor.tensor<4x2xf32, #mesh, [R]>
  return %0 : !dtensor.tensor<4x2xf32, #mesh, [R]>
}
