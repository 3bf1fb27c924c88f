// RUN: dtorch-opt %s --split-input-file --dtensor-propagate-sharding | FileCheck %s

#m = #dtensor.mesh<[4]>

// Operands already in a local strategy: nothing to do.
// CHECK-LABEL: func @already_local
// CHECK-NOT: dtensor.redistribute
// CHECK: dtensor.add
func.func @already_local(%a: !dtensor.tensor<8x4xf32, #m, [S(0)]>, %b: !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]> {
  %0 = dtensor.add %a, %b : (!dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [S(0)]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<8x4xf32, #m, [S(0)]>
}

// -----

#m = #dtensor.mesh<[4]>

// A replicated operand of a sharded elementwise op is sliced (free).
// CHECK-LABEL: func @slice_replicated_operand
// CHECK: %[[R:.+]] = dtensor.redistribute %arg1 : !dtensor.tensor<8x4xf32, #{{.*}}, [R]> -> !dtensor.tensor<8x4xf32, #{{.*}}, [S(0)]>
// CHECK: dtensor.mul %arg0, %[[R]]
func.func @slice_replicated_operand(%a: !dtensor.tensor<8x4xf32, #m, [S(0)]>, %b: !dtensor.tensor<8x4xf32, #m, [R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]> {
  %0 = dtensor.mul %a, %b : (!dtensor.tensor<8x4xf32, #m, [S(0)]>, !dtensor.tensor<8x4xf32, #m, [R]>) -> !dtensor.tensor<8x4xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<8x4xf32, #m, [S(0)]>
}

// -----

#m = #dtensor.mesh<[4]>

// Contracting a sharded dim computes a partial sum, then reduces it into the
// declared placement (here with a reduce_scatter-able S(0)).
// CHECK-LABEL: func @matmul_contract_sharded
// CHECK: %[[P:.+]] = dtensor.matmul %arg0, %arg1 : {{.*}} -> !dtensor.tensor<64x64xf32, #{{.*}}, [P(sum)]>
// CHECK: %[[Y:.+]] = dtensor.redistribute %[[P]] : !dtensor.tensor<64x64xf32, #{{.*}}, [P(sum)]> -> !dtensor.tensor<64x64xf32, #{{.*}}, [S(0)]>
// CHECK: return %[[Y]]
func.func @matmul_contract_sharded(%a: !dtensor.tensor<64x64xf32, #m, [S(1)]>, %b: !dtensor.tensor<64x64xf32, #m, [S(0)]>) -> !dtensor.tensor<64x64xf32, #m, [S(0)]> {
  %0 = dtensor.matmul %a, %b : (!dtensor.tensor<64x64xf32, #m, [S(1)]>, !dtensor.tensor<64x64xf32, #m, [S(0)]>) -> !dtensor.tensor<64x64xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<64x64xf32, #m, [S(0)]>
}

// -----

#m = #dtensor.mesh<[4]>

// A partial sum passes through addition, but a nonlinear op needs the value.
// CHECK-LABEL: func @partial_through_add_not_relu
// CHECK: %[[S:.+]] = dtensor.add %arg0, %arg1 : {{.*}} -> !dtensor.tensor<8xf32, #{{.*}}, [P(sum)]>
// CHECK: %[[R:.+]] = dtensor.redistribute %[[S]] : !dtensor.tensor<8xf32, #{{.*}}, [P(sum)]> -> !dtensor.tensor<8xf32, #{{.*}}, [{{R|S\(0\)}}]>
// CHECK: dtensor.relu %[[R]]
func.func @partial_through_add_not_relu(%a: !dtensor.tensor<8xf32, #m, [P(sum)]>, %b: !dtensor.tensor<8xf32, #m, [P(sum)]>) -> !dtensor.tensor<8xf32, #m, [R]> {
  %0 = dtensor.add %a, %b : (!dtensor.tensor<8xf32, #m, [P(sum)]>, !dtensor.tensor<8xf32, #m, [P(sum)]>) -> !dtensor.tensor<8xf32, #m, [P(sum)]>
  %1 = dtensor.relu %0 : (!dtensor.tensor<8xf32, #m, [P(sum)]>) -> !dtensor.tensor<8xf32, #m, [R]>
  return %1 : !dtensor.tensor<8xf32, #m, [R]>
}

// -----

#m = #dtensor.mesh<[2, 2]>

// Declared result placements never change; creation of a partial value goes
// through a redistribute.
// CHECK-LABEL: func @keeps_declared_results
// CHECK: %[[F:.+]] = dtensor.full 2.000000e+00 : !dtensor.tensor<4x4xf32, #{{.*}}, [S(0), R]>
// CHECK: %[[P:.+]] = dtensor.redistribute %[[F]] : {{.*}} -> !dtensor.tensor<4x4xf32, #{{.*}}, [S(0), P(sum)]>
// CHECK: return %[[P]] : !dtensor.tensor<4x4xf32, #{{.*}}, [S(0), P(sum)]>
func.func @keeps_declared_results() -> !dtensor.tensor<4x4xf32, #m, [S(0), P(sum)]> {
  %0 = dtensor.full 2.0 : !dtensor.tensor<4x4xf32, #m, [S(0), P(sum)]>
  return %0 : !dtensor.tensor<4x4xf32, #m, [S(0), P(sum)]>
}

// -----

#m = #dtensor.mesh<[4]>

// Redundant redistributions fold: A -> B -> A disappears, A -> B -> C is A -> C.
// CHECK-LABEL: func @fold_chains
// CHECK-NEXT: %[[C:.+]] = dtensor.redistribute %arg0 : !dtensor.tensor<8x8xf32, #{{.*}}, [S(0)]> -> !dtensor.tensor<8x8xf32, #{{.*}}, [S(1)]>
// CHECK-NEXT: return %arg0, %[[C]]
func.func @fold_chains(%a: !dtensor.tensor<8x8xf32, #m, [S(0)]>) -> (!dtensor.tensor<8x8xf32, #m, [S(0)]>, !dtensor.tensor<8x8xf32, #m, [S(1)]>) {
  %0 = dtensor.redistribute %a : !dtensor.tensor<8x8xf32, #m, [S(0)]> -> !dtensor.tensor<8x8xf32, #m, [R]>
  %1 = dtensor.redistribute %0 : !dtensor.tensor<8x8xf32, #m, [R]> -> !dtensor.tensor<8x8xf32, #m, [S(0)]>
  %2 = dtensor.redistribute %0 : !dtensor.tensor<8x8xf32, #m, [R]> -> !dtensor.tensor<8x8xf32, #m, [S(1)]>
  return %1, %2 : !dtensor.tensor<8x8xf32, #m, [S(0)]>, !dtensor.tensor<8x8xf32, #m, [S(1)]>
}

// -----

#m = #dtensor.mesh<[2]>

// A reshape that merges a sharded dim cannot stay sharded.
// CHECK-LABEL: func @reshape_merge
// CHECK: %[[G:.+]] = dtensor.redistribute %arg0 : !dtensor.tensor<4x6xf32, #{{.*}}, [S(1)]> -> !dtensor.tensor<4x6xf32, #{{.*}}, [R]>
// CHECK: dtensor.reshape %[[G]]
func.func @reshape_merge(%a: !dtensor.tensor<4x6xf32, #m, [S(1)]>) -> !dtensor.tensor<24xf32, #m, [R]> {
  %0 = dtensor.reshape %a : (!dtensor.tensor<4x6xf32, #m, [S(1)]>) -> !dtensor.tensor<24xf32, #m, [R]>
  return %0 : !dtensor.tensor<24xf32, #m, [R]>
}

// -----

#m = #dtensor.mesh<[4]>

// A merge [B, H] -> [B*H] keeps S(0) when B splits evenly over the axis.
// CHECK-LABEL: func @reshape_merge_even
// CHECK-NOT: dtensor.redistribute
// CHECK: dtensor.reshape %arg0 : (!dtensor.tensor<8x6xf32, #{{.*}}, [S(0)]>) -> !dtensor.tensor<48xf32, #{{.*}}, [S(0)]>
func.func @reshape_merge_even(%a: !dtensor.tensor<8x6xf32, #m, [S(0)]>) -> !dtensor.tensor<48xf32, #m, [S(0)]> {
  %0 = dtensor.reshape %a : (!dtensor.tensor<8x6xf32, #m, [S(0)]>) -> !dtensor.tensor<48xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<48xf32, #m, [S(0)]>
}

// -----

#m = #dtensor.mesh<[4]>

// 6 rows over 4 ranks are uneven: the merged rows are gathered first, then
// sliced into the declared result.
// CHECK-LABEL: func @reshape_merge_uneven
// CHECK: %[[G:.+]] = dtensor.redistribute %arg0 : !dtensor.tensor<6x4xf32, #{{.*}}, [S(0)]> -> !dtensor.tensor<6x4xf32, #{{.*}}, [R]>
// CHECK: %[[M:.+]] = dtensor.reshape %[[G]] : (!dtensor.tensor<6x4xf32, #{{.*}}, [R]>) -> !dtensor.tensor<24xf32, #{{.*}}, [R]>
// CHECK: dtensor.redistribute %[[M]] : !dtensor.tensor<24xf32, #{{.*}}, [R]> -> !dtensor.tensor<24xf32, #{{.*}}, [S(0)]>
func.func @reshape_merge_uneven(%a: !dtensor.tensor<6x4xf32, #m, [S(0)]>) -> !dtensor.tensor<24xf32, #m, [S(0)]> {
  %0 = dtensor.reshape %a : (!dtensor.tensor<6x4xf32, #m, [S(0)]>) -> !dtensor.tensor<24xf32, #m, [S(0)]>
  return %0 : !dtensor.tensor<24xf32, #m, [S(0)]>
}

// -----

#m = #dtensor.mesh<[2, 2]>

// A split [B*H] -> [B, H] keeps the nested S(0) when B splits over 2 x 2.
// CHECK-LABEL: func @reshape_split_nested
// CHECK-NOT: dtensor.redistribute
// CHECK: dtensor.reshape %arg0 : (!dtensor.tensor<48xf32, #{{.*}}, [S(0), S(0)]>) -> !dtensor.tensor<8x6xf32, #{{.*}}, [S(0), S(0)]>
func.func @reshape_split_nested(%a: !dtensor.tensor<48xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), S(0)]> {
  %0 = dtensor.reshape %a : (!dtensor.tensor<48xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<8x6xf32, #m, [S(0), S(0)]>
  return %0 : !dtensor.tensor<8x6xf32, #m, [S(0), S(0)]>
}

// -----

#m = #dtensor.mesh<[2, 2], names = ["pp", "tp"]>

// Point-to-point moves by their rules: a transfer, a send and a receive of a
// tensor that is partial on "tp" keep it partial, with no redistribution
// (every summand moves whole).
// CHECK-LABEL: func @moves_keep_partials
// CHECK-NOT: dtensor.redistribute
// CHECK: dtensor.transfer
// CHECK: dtensor.send
// CHECK: dtensor.recv
// CHECK-NOT: dtensor.redistribute
func.func @moves_keep_partials(%a: !dtensor.tensor<4x6xf32, #m, [S(0), P(sum)]>) -> !dtensor.tensor<4x6xf32, #m, [S(0), P(max)]> {
  %0 = dtensor.transfer %a {axis = 0 : i64, sources = array<i64: 0>, destinations = array<i64: 1>} : !dtensor.tensor<4x6xf32, #m, [S(0), P(sum)]>
  %1 = dtensor.send %0 {peers = array<i64: 4, 5, 6, 7>, tag = 1048576 : i64} : !dtensor.tensor<4x6xf32, #m, [S(0), P(sum)]>
  %2 = dtensor.recv {peers = array<i64: 4, 5, 6, 7>, tag = 1048577 : i64} : !dtensor.tensor<4x6xf32, #m, [S(0), P(max)]>
  return %2 : !dtensor.tensor<4x6xf32, #m, [S(0), P(max)]>
}
