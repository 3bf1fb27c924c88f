// RUN: dtorch-opt %s --split-input-file --rank-plan-buffers | FileCheck %s
// RUN: dtorch-opt %s --split-input-file --rank-plan-buffers=report=true 2>&1 >/dev/null | FileCheck %s --check-prefix=REPORT
// RUN: dtorch-opt %s --split-input-file --dtensor-lower-to-rank --rank-plan-buffers | FileCheck %s --check-prefix=CLASSES

// Dead buffers are reused: %0 dies at %1 (which cannot write over it: a
// transpose is not elementwise), so %2 takes %0's memory.
// CHECK-LABEL: func @reuse
// CHECK-SAME: rank.arena_bytes = 128 : i64
// CHECK: rank.kernel "matmul"{{.*}}rank.arena_offset = 0 : i64
// CHECK: rank.kernel "transpose"{{.*}}rank.arena_offset = 64 : i64
// CHECK: rank.kernel "transpose"{{.*}}rank.arena_offset = 0 : i64
// CHECK: rank.kernel "sum"
// CHECK-NOT: rank.arena_offset
// CHECK: return
// REPORT: remark: arena 128 bytes for 3 temporaries (192 bytes without planning, 0 in place, 0 views); results 16 bytes
func.func @reuse(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "matmul"(%x, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = rank.kernel "transpose"(%0) {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = rank.kernel "transpose"(%1) {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = rank.kernel "sum"(%2) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x4xf32>) -> tensor<4xf32>
  return %3 : tensor<4xf32>
}

// -----

// In place: an elementwise kernel writes over an input that dies there
// (exp -> neg -> reshape share one slot); the add reads %x, an argument,
// which keeps its own storage, as does the returned value.
// CHECK-LABEL: func @in_place
// CHECK-SAME: rank.arena_bytes = 64 : i64
// CHECK: rank.kernel "exp"{{.*}}rank.arena_offset = 0 : i64
// CHECK: rank.kernel "neg"{{.*}}rank.arena_offset = 0 : i64
// CHECK: rank.kernel "reshape"{{.*}}rank.arena_offset = 0 : i64
// CHECK: rank.kernel "reshape"{{.*}}rank.arena_offset = 0 : i64
// CHECK: %[[R:.+]] = rank.kernel "add"
// CHECK-NOT: rank.arena_offset
// CHECK: return %[[R]]
// REPORT: remark: arena 64 bytes for 4 temporaries (256 bytes without planning, 1 in place, 2 views); results 16 bytes
func.func @in_place(%x: tensor<4xf32>) -> tensor<4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = rank.kernel "neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = rank.kernel "reshape"(%1) : (tensor<4xf32>) -> tensor<2x2xf32>
  %3 = rank.kernel "reshape"(%2) : (tensor<2x2xf32>) -> tensor<4xf32>
  %4 = rank.kernel "add"(%3, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %4 : tensor<4xf32>
}

// -----

// A value that escapes keeps its own storage even when a later op reads
// it; an input still read later is not written over (%1 reads %0, which
// %2 reads again).
// CHECK-LABEL: func @escaping
// CHECK-SAME: rank.arena_bytes = 128 : i64
// CHECK: %[[E:.+]] = rank.kernel "exp"(%arg0) : (tensor<4x4xf32>)
// CHECK: rank.kernel "neg"(%[[E]]) {rank.arena_offset = 0 : i64}
// CHECK: rank.kernel "sin"(%[[E]]) {rank.arena_offset = 64 : i64}
// CHECK: rank.kernel "mul"{{.*}}rank.arena_offset = 0 : i64
// CHECK: return %[[E]], %{{.+}} :
func.func @escaping(%x: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = rank.kernel "neg"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = rank.kernel "sin"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = rank.kernel "mul"(%1, %2) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %4 = rank.kernel "sum"(%3) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x4xf32>) -> tensor<4xf32>
  return %0, %4 : tensor<4x4xf32>, tensor<4xf32>
}

// -----

// The all_reduce reads %0 on the communication stream while the kernels
// after it run: %0 stays live until a kernel waits for the all_reduce's
// result (the add), so %2 and %3 cannot take its memory, although no
// kernel reads %0 after the all_reduce; after the add, %5 may.
// CHECK-LABEL: func @comm_lifetime
// CHECK-SAME: rank.arena_bytes = 256 : i64
// CHECK: rank.kernel "exp"{{.*}}rank.arena_offset = 0 : i64
// CHECK: rank.all_reduce {{.*}}rank.arena_offset = 64 : i64
// CHECK: rank.kernel "matmul"{{.*}}rank.arena_offset = 128 : i64
// CHECK: rank.kernel "transpose"{{.*}}rank.arena_offset = 192 : i64
// CHECK: rank.kernel "add"{{.*}}rank.arena_offset = 192 : i64
// CHECK: rank.kernel "transpose"{{.*}}rank.arena_offset = 0 : i64
// CHECK: rank.kernel "matmul"
// CHECK-NOT: rank.arena_offset
// CHECK: return
func.func @comm_lifetime(%x: tensor<4x4xf32>) -> tensor<4x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = rank.all_reduce %0 {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %2 = rank.kernel "matmul"(%x, %x) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = rank.kernel "transpose"(%2) {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %4 = rank.kernel "add"(%3, %1) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %5 = rank.kernel "transpose"(%4) {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %6 = rank.kernel "matmul"(%5, %x) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %6 : tensor<4x4xf32>
}

// -----

// Functions that are not rank programs yet are left alone.
// CHECK-LABEL: func @not_lowered
// CHECK-NOT: rank.arena
#m = #dtensor.mesh<[2]>
func.func @not_lowered(%x: !dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]> {
  %0 = dtensor.exp %x : (!dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  %1 = dtensor.neg %0 : (!dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return %1 : !dtensor.tensor<4xf32, #m, [R]>
}

// -----

// Every class of an uneven split is planned (here after SPMD lowering): the
// kernels write over the gathered value, which the all_gather made on the
// communication stream and the exp waited for.
// CLASSES-LABEL: func @classes_class0
// CLASSES-SAME: rank.arena_bytes = 128 : i64
// CLASSES: rank.all_gather {{.*}}rank.arena_offset = 0 : i64
// CLASSES: rank.kernel "exp"{{.*}}rank.arena_offset = 0 : i64
// CLASSES: rank.kernel "neg"{{.*}}rank.arena_offset = 0 : i64
// CLASSES-LABEL: func @classes_class1
// CLASSES-SAME: (%{{.+}}: tensor<2x4xf32>)
// CLASSES-SAME: rank.arena_bytes = 128 : i64
// CLASSES: rank.kernel "neg"{{.*}}rank.arena_offset = 0 : i64
#m = #dtensor.mesh<[2]>
func.func @classes(%x: !dtensor.tensor<5x4xf32, #m, [S(0)]>) -> !dtensor.tensor<5xf32, #m, [R]> {
  %0 = dtensor.all_gather %x on axis 0 : !dtensor.tensor<5x4xf32, #m, [S(0)]> -> !dtensor.tensor<5x4xf32, #m, [R]>
  %1 = dtensor.exp %0 : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5x4xf32, #m, [R]>
  %2 = dtensor.neg %1 : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5x4xf32, #m, [R]>
  %3 = dtensor.sum %2 dims = [1] : (!dtensor.tensor<5x4xf32, #m, [R]>) -> !dtensor.tensor<5xf32, #m, [R]>
  return %3 : !dtensor.tensor<5xf32, #m, [R]>
}

// -----

// A rank.fused with two results runs on the compute stream; both results
// are live at once, so they get two offsets, one per result, and a later
// kernel reuses the memory of the first once it is dead.
// CHECK-LABEL: func @fused_two_results
// CHECK-SAME: rank.arena_bytes = 128 : i64
// CHECK: rank.fused{{.*}}rank.arena_offset = array<i64: {{0, 64|64, 0}}>
// CHECK: rank.kernel "add"{{.*}}rank.arena_offset
// CHECK: return
// REPORT: remark: arena 128 bytes for 3 temporaries
func.func @fused_two_results(%x: tensor<4xf32>) -> tensor<4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0:2 = rank.fused(%x) : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %e = rank.kernel "exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %n = rank.kernel "neg"(%e) : (tensor<4xf32>) -> tensor<4xf32>
    rank.yield %e, %n : tensor<4xf32>, tensor<4xf32>
  }
  %1 = rank.kernel "add"(%0#0, %0#1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = rank.kernel "exp"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}
