// RUN: dtorch-opt %s --split-input-file --dtensor-lower-redistribute | FileCheck %s

#m = #dtensor.mesh<[4]>

// CHECK-LABEL: func @one_axis
// CHECK: dtensor.all_gather %arg0 on axis 0 : !dtensor.tensor<7x5xf32, #{{.*}}, [S(0)]> -> !dtensor.tensor<7x5xf32, #{{.*}}, [R]>
// CHECK: dtensor.local_slice %arg1 on axis 0 : !dtensor.tensor<7x5xf32, #{{.*}}, [R]> -> !dtensor.tensor<7x5xf32, #{{.*}}, [S(1)]>
// CHECK: dtensor.all_reduce %arg2 on axis 0 : !dtensor.tensor<7x5xf32, #{{.*}}, [P(sum)]> -> !dtensor.tensor<7x5xf32, #{{.*}}, [R]>
// CHECK: dtensor.reduce_scatter %arg2 on axis 0 : !dtensor.tensor<7x5xf32, #{{.*}}, [P(sum)]> -> !dtensor.tensor<7x5xf32, #{{.*}}, [S(1)]>
// CHECK: dtensor.all_to_all %arg0 on axis 0 : !dtensor.tensor<7x5xf32, #{{.*}}, [S(0)]> -> !dtensor.tensor<7x5xf32, #{{.*}}, [S(1)]>
// CHECK: dtensor.to_partial %arg1 on axis 0 : !dtensor.tensor<7x5xf32, #{{.*}}, [R]> -> !dtensor.tensor<7x5xf32, #{{.*}}, [P(max)]>
// CHECK-NOT: dtensor.redistribute
func.func @one_axis(%s: !dtensor.tensor<7x5xf32, #m, [S(0)]>, %r: !dtensor.tensor<7x5xf32, #m, [R]>, %p: !dtensor.tensor<7x5xf32, #m, [P(sum)]>) {
  %0 = dtensor.redistribute %s : !dtensor.tensor<7x5xf32, #m, [S(0)]> -> !dtensor.tensor<7x5xf32, #m, [R]>
  %1 = dtensor.redistribute %r : !dtensor.tensor<7x5xf32, #m, [R]> -> !dtensor.tensor<7x5xf32, #m, [S(1)]>
  %2 = dtensor.redistribute %p : !dtensor.tensor<7x5xf32, #m, [P(sum)]> -> !dtensor.tensor<7x5xf32, #m, [R]>
  %3 = dtensor.redistribute %p : !dtensor.tensor<7x5xf32, #m, [P(sum)]> -> !dtensor.tensor<7x5xf32, #m, [S(1)]>
  %4 = dtensor.redistribute %s : !dtensor.tensor<7x5xf32, #m, [S(0)]> -> !dtensor.tensor<7x5xf32, #m, [S(1)]>
  %5 = dtensor.redistribute %r : !dtensor.tensor<7x5xf32, #m, [R]> -> !dtensor.tensor<7x5xf32, #m, [P(max)]>
  return
}

// -----

#m = #dtensor.mesh<[2, 2]>

// Partial values are reduced first, straight into the destination shard when
// no other axis splits that dim; then shards that cannot stay are gathered.
// CHECK-LABEL: func @two_axes
// CHECK: %[[A:.+]] = dtensor.reduce_scatter %arg0 on axis 0 : {{.*}}[P(sum), S(0)]> -> {{.*}}[S(1), S(0)]>
// CHECK: %[[B:.+]] = dtensor.all_gather %[[A]] on axis 1 : {{.*}}[S(1), S(0)]> -> {{.*}}[S(1), R]>
// CHECK: return %[[B]]
func.func @two_axes(%a: !dtensor.tensor<7x5xf32, #m, [P(sum), S(0)]>) -> !dtensor.tensor<7x5xf32, #m, [S(1), R]> {
  %0 = dtensor.redistribute %a : !dtensor.tensor<7x5xf32, #m, [P(sum), S(0)]> -> !dtensor.tensor<7x5xf32, #m, [S(1), R]>
  return %0 : !dtensor.tensor<7x5xf32, #m, [S(1), R]>
}

// -----

#m = #dtensor.mesh<[2, 2]>

// When an outer axis splits the destination dim, the partial is
// reduce-scattered into the nested (inner) shard directly.
// CHECK-LABEL: func @partial_then_slice
// CHECK: %[[A:.+]] = dtensor.reduce_scatter %arg0 on axis 1 : {{.*}}[S(0), P(avg)]> -> {{.*}}[S(0), S(0)]>
// CHECK: return %[[A]]
func.func @partial_then_slice(%a: !dtensor.tensor<7x5xf32, #m, [S(0), P(avg)]>) -> !dtensor.tensor<7x5xf32, #m, [S(0), S(0)]> {
  %0 = dtensor.redistribute %a : !dtensor.tensor<7x5xf32, #m, [S(0), P(avg)]> -> !dtensor.tensor<7x5xf32, #m, [S(0), S(0)]>
  return %0 : !dtensor.tensor<7x5xf32, #m, [S(0), S(0)]>
}

// -----

#m = #dtensor.mesh<[2, 2]>

// Nested splits of one tensor dim: [S(0), S(0)] -> [R, S(0)] cannot gather
// the outer axis under the inner split. Moving the inner split to dim 1
// first (all_to_all) lets the outer axis gather a quarter of the tensor, and
// a second all_to_all moves it back: cheaper than gathering everything.
// CHECK-LABEL: func @nested
// CHECK: %[[A:.+]] = dtensor.all_to_all %arg0 on axis 1 : {{.*}}[S(0), S(0)]> -> {{.*}}[S(0), S(1)]>
// CHECK: %[[B:.+]] = dtensor.all_gather %[[A]] on axis 0 : {{.*}}[S(0), S(1)]> -> {{.*}}[R, S(1)]>
// CHECK: %[[C:.+]] = dtensor.all_to_all %[[B]] on axis 1 : {{.*}}[R, S(1)]> -> {{.*}}[R, S(0)]>
// CHECK: return %[[C]]
func.func @nested(%a: !dtensor.tensor<7x5xf32, #m, [S(0), S(0)]>) -> !dtensor.tensor<7x5xf32, #m, [R, S(0)]> {
  %0 = dtensor.redistribute %a : !dtensor.tensor<7x5xf32, #m, [S(0), S(0)]> -> !dtensor.tensor<7x5xf32, #m, [R, S(0)]>
  return %0 : !dtensor.tensor<7x5xf32, #m, [R, S(0)]>
}

// -----

#m = #dtensor.mesh<[2, 2]>

// A shard that is already in place stays; only the other axis moves.
// CHECK-LABEL: func @keep_outer
// CHECK-NEXT: %[[A:.+]] = dtensor.all_to_all %arg0 on axis 1 : {{.*}}[S(0), S(1)]> -> {{.*}}[S(0), S(2)]>
// CHECK-NEXT: return %[[A]]
func.func @keep_outer(%a: !dtensor.tensor<4x6x8xf32, #m, [S(0), S(1)]>) -> !dtensor.tensor<4x6x8xf32, #m, [S(0), S(2)]> {
  %0 = dtensor.redistribute %a : !dtensor.tensor<4x6x8xf32, #m, [S(0), S(1)]> -> !dtensor.tensor<4x6x8xf32, #m, [S(0), S(2)]>
  return %0 : !dtensor.tensor<4x6x8xf32, #m, [S(0), S(2)]>
}
