// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(dtensor-propagate-sharding,cse,dtensor-explain-redistributions))' --verify-diagnostics | FileCheck %s
// RUN: dtorch-opt %s --split-input-file --pass-pipeline='builtin.module(func.func(dtensor-propagate-sharding,cse,dtensor-explain-redistributions,dtensor-lower-redistribute))' --verify-diagnostics | FileCheck %s --check-prefix=LOWERED

#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"], device = "cuda">

// A contraction over "tp" leaves a partial sum; the add needs it whole. The
// remark sits on the add and names the mesh dims.
// The mesh keeps its names and device through propagation and lowering.
// CHECK: #[[M:.+]] = #dtensor.mesh<[2, 2], names = ["dp", "tp"], device = "cuda">
// CHECK-LABEL: func @operand_needs_all_reduce
// CHECK: dtensor.redistribute %{{.*}} : !dtensor.tensor<8x6xf32, #[[M]], [S(0), P(sum)]> -> !dtensor.tensor<8x6xf32, #[[M]], [S(0), R]>
// LOWERED: #[[M:.+]] = #dtensor.mesh<[2, 2], names = ["dp", "tp"], device = "cuda">
// LOWERED-LABEL: func @operand_needs_all_reduce
// LOWERED: dtensor.all_reduce %{{.*}} on axis 1 : !dtensor.tensor<8x6xf32, #[[M]], [S(0), P(sum)]> -> !dtensor.tensor<8x6xf32, #[[M]], [S(0), R]>
func.func @operand_needs_all_reduce(%a: !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>, %b: !dtensor.tensor<4x6xf32, #m, [R, S(0)]>, %c: !dtensor.tensor<8x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), R]> {
  %0 = dtensor.matmul %a, %b : (!dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<4x6xf32, #m, [R, S(0)]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), P(sum)]>
  // expected-remark @+1 {{redistribute for operand 0 of dtensor.add: 8x6xf32 tp: P(sum) -> R by all_reduce(sum) on "tp"; each rank sends 96 bytes}}
  %1 = dtensor.add %0, %c : (!dtensor.tensor<8x6xf32, #m, [S(0), P(sum)]>, !dtensor.tensor<8x6xf32, #m, [S(0), R]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), R]>
  return %1 : !dtensor.tensor<8x6xf32, #m, [S(0), R]>
}

// -----

#m = #dtensor.mesh<[4]>

// The cheapest way computes a partial sum; the result was declared S(0), so
// a reduce_scatter produces it. The remark sits on the matmul. Each rank
// holds 64x64 partial values and keeps 16 rows: 48x64 f32 leave it.
// CHECK-LABEL: func @declared_result
func.func @declared_result(%a: !dtensor.tensor<64x64xf32, #m, [S(1)]>, %b: !dtensor.tensor<64x64xf32, #m, [S(0)]>) -> !dtensor.tensor<64x64xf32, #m, [S(0)]> {
  // expected-remark @+1 {{redistribute for the result of dtensor.matmul (computed as [P(sum)], declared [S(0)]): 64x64xf32 P(sum) -> S(0) by reduce_scatter(sum) on mesh dim 0; each rank sends 12288 bytes}}
  %0 = dtensor.matmul %a, %b : (!dtensor.tensor<64x64xf32, #m, [S(1)]>, !dtensor.tensor<64x64xf32, #m, [S(0)]>) -> !dtensor.tensor<64x64xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<64x64xf32, #m, [S(0)]>
}

// -----

#m = #dtensor.mesh<[4]>

// A redistribute the program asked for; uneven pieces (2, 2, 2, 1 rows of 5
// f32) make ranks send different amounts.
// CHECK-LABEL: func @explicit_uneven
func.func @explicit_uneven(%a: !dtensor.tensor<7x5xf32, #m, [S(0)]>) -> !dtensor.tensor<7x5xf32, #m, [R]> {
  // expected-remark @+1 {{redistribute for an explicit redistribute: 7x5xf32 S(0) -> R by all_gather on mesh dim 0; each rank sends 60 to 120 bytes}}
  %0 = dtensor.redistribute %a : !dtensor.tensor<7x5xf32, #m, [S(0)]> -> !dtensor.tensor<7x5xf32, #m, [R]>
  return %0 : !dtensor.tensor<7x5xf32, #m, [R]>
}

// -----

#m = #dtensor.mesh<[2, 2], names = ["dp", "tp"]>

// Slicing a replicated operand moves no data. The mul and the add read the
// same slice (merged by CSE): one remark, on the first reader, names both.
// CHECK-LABEL: func @local_slice_shared
func.func @local_slice_shared(%s: !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>, %a: !dtensor.tensor<8x4xf32, #m, [R, R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]> {
  // expected-remark @+1 {{redistribute for operand 1 of dtensor.mul and operand 1 of dtensor.add: 8x4xf32 dp: R -> S(0), tp: R -> S(1) by local_slice on "dp", local_slice on "tp"; no communication}}
  %0 = dtensor.mul %s, %a : (!dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<8x4xf32, #m, [R, R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>
  %1 = dtensor.add %0, %a : (!dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<8x4xf32, #m, [R, R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>
  return %1 : !dtensor.tensor<8x4xf32, #m, [S(0), S(1)]>
}

// -----

#m = #dtensor.mesh<[4]>

// Nothing to redistribute: no remark (verify-diagnostics rejects any).
// CHECK-LABEL: func @no_communication
// CHECK-NOT: dtensor.redistribute
func.func @no_communication(%a: !dtensor.tensor<8x4xf32, #m, [S(0)]>, %b: !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]> {
  %0 = dtensor.add %a, %b : (!dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<8x4xf32, #m, [S(0)]>
}
