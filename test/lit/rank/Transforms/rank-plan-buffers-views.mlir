// RUN: dtorch-opt %s --split-input-file --rank-plan-buffers | FileCheck %s
// RUN: dtorch-opt %s --split-input-file "--rank-plan-buffers=views=false result-views=false" | FileCheck %s --check-prefix=NOVIEWS
// RUN: dtorch-opt %s --split-input-file --rank-plan-buffers=report=true 2>&1 >/dev/null | FileCheck %s --check-prefix=REPORT

// A reshape of a temporary that is read after it is a view: it gets its
// source's offset, and the source's memory stays theirs until the
// transpose, the last read of either. Without views the reshape needs
// memory of its own (its source is still read: no write in place).
// CHECK-LABEL: func @source_read_later
// CHECK: rank.kernel "exp"{{.*}}rank.arena_offset = [[A:[0-9]+]] : i64
// CHECK: rank.kernel "reshape"{{.*}}rank.arena_offset = [[A]] : i64
// CHECK: rank.kernel "sum"
// CHECK: rank.kernel "transpose"
// CHECK-NOT: rank.arena_offset = [[A]] :
// CHECK: return
// NOVIEWS-LABEL: func @source_read_later
// NOVIEWS: rank.kernel "exp"{{.*}}rank.arena_offset = [[A:[0-9]+]] : i64
// NOVIEWS: rank.kernel "reshape"{{.*}}rank.arena_offset = [[B:[0-9]+]] : i64
// NOVIEWS-NOT: rank.arena_offset = [[A]] : i64
// NOVIEWS: rank.kernel "sum"
// REPORT: remark: arena {{[0-9]+}} bytes for {{[0-9]+}} temporaries ({{.*}}, 0 in place, 2 views)
func.func @source_read_later(%x: tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4x4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = rank.kernel "reshape"(%0) : (tensor<4x4xf32>) -> tensor<16xf32>
  %2 = rank.kernel "reshape"(%1) : (tensor<16xf32>) -> tensor<4x4xf32>
  %3 = rank.kernel "sum"(%2) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x4xf32>) -> tensor<4xf32>
  %4 = rank.kernel "transpose"(%0) {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  return %3, %4 : tensor<4xf32>, tensor<4x4xf32>
}

// -----

// No write in place over a viewed slot: %0 dies at the neg, but its view
// %1 is read by the sum after it, so the neg writes elsewhere. Without
// views the neg takes %0's memory (the reshape then copies).
// CHECK-LABEL: func @no_in_place_over_a_view
// CHECK-SAME: rank.arena_bytes = 128 : i64
// CHECK: rank.kernel "exp"{{.*}}rank.arena_offset = [[A:[0-9]+]] : i64
// CHECK: rank.kernel "reshape"{{.*}}rank.arena_offset = [[A]] : i64
// CHECK: rank.kernel "neg"{{.*}}rank.arena_offset = [[B:[0-9]+]] : i64
// CHECK-NOT: rank.kernel "neg"{{.*}}rank.arena_offset = [[A]] : i64
// CHECK: rank.kernel "sum"
// NOVIEWS-LABEL: func @no_in_place_over_a_view
// NOVIEWS-SAME: rank.arena_bytes = 128 : i64
// NOVIEWS: rank.kernel "exp"{{.*}}rank.arena_offset = [[A:[0-9]+]] : i64
// NOVIEWS: rank.kernel "reshape"{{.*}}rank.arena_offset = [[B:[0-9]+]] : i64
// NOVIEWS: rank.kernel "neg"{{.*}}rank.arena_offset = [[A]] : i64
// REPORT: remark: arena 128 bytes for 3 temporaries (192 bytes without planning, 0 in place, 1 views)
func.func @no_in_place_over_a_view(%x: tensor<16xf32>) -> (tensor<4xf32>, tensor<16xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<16xf32>) -> tensor<16xf32>
  %1 = rank.kernel "reshape"(%0) : (tensor<16xf32>) -> tensor<4x4xf32>
  %2 = rank.kernel "neg"(%0) : (tensor<16xf32>) -> tensor<16xf32>
  %3 = rank.kernel "sum"(%1) {dims = array<i64: 1>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4x4xf32>) -> tensor<4xf32>
  %4 = rank.kernel "exp"(%2) : (tensor<16xf32>) -> tensor<16xf32>
  return %3, %4 : tensor<4xf32>, tensor<16xf32>
}

// -----

// A reshape of an argument is an ordinary temporary (the executor binds it
// as a view of the argument). The temporary a returned reshape reads keeps
// storage of its own (result views): the executor makes the result a view
// of it. Without views the exp writes over the first reshape in place and
// the returned reshape copies out of the arena.
// CHECK-LABEL: func @own_storage
// CHECK: rank.kernel "reshape"(%arg0) {rank.arena_offset = 0 : i64}
// CHECK: rank.kernel "exp"(%{{.+}}) : (tensor<16xf32>)
// CHECK: %[[R:.+]] = rank.kernel "reshape"
// CHECK-NOT: rank.arena_offset
// CHECK: return %[[R]]
// NOVIEWS-LABEL: func @own_storage
// NOVIEWS: rank.kernel "reshape"(%arg0) {rank.arena_offset = 0 : i64}
// NOVIEWS: rank.kernel "exp"{{.*}}rank.arena_offset = 0 : i64
// NOVIEWS: %[[R:.+]] = rank.kernel "reshape"
// NOVIEWS-NOT: rank.arena_offset
// NOVIEWS: return %[[R]]
// REPORT: remark: arena 64 bytes for 1 temporaries (64 bytes without planning, 0 in place, 0 views); results 128 bytes
func.func @own_storage(%x: tensor<4x4xf32>) -> tensor<16xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "reshape"(%x) : (tensor<4x4xf32>) -> tensor<16xf32>
  %1 = rank.kernel "exp"(%0) : (tensor<16xf32>) -> tensor<16xf32>
  %2 = rank.kernel "reshape"(%1) : (tensor<16xf32>) -> tensor<16xf32>
  return %2 : tensor<16xf32>
}

// -----

// A collective's input stays live until a kernel waits for its result; a
// view of it lives as long: %2 (the reshape of %0) shares %0's memory, and
// the matmul's %3, written while the all_reduce may still read %0, does not.
// CHECK-LABEL: func @view_of_a_collective_input
// CHECK: rank.kernel "exp"{{.*}}rank.arena_offset = [[A:[0-9]+]] : i64
// CHECK: rank.all_reduce
// CHECK: rank.kernel "reshape"{{.*}}rank.arena_offset = [[A]] : i64
// CHECK: rank.kernel "matmul"
// CHECK-NOT: rank.arena_offset = [[A]] :
// CHECK-SAME: : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
func.func @view_of_a_collective_input(%x: tensor<4x4xf32>) -> tensor<4x4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.kernel "exp"(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = rank.all_reduce %0 {axis = 0 : i64, reduce = "sum"} : tensor<4x4xf32> -> tensor<4x4xf32>
  %2 = rank.kernel "reshape"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = rank.kernel "matmul"(%2, %x) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %4 = rank.kernel "add"(%3, %1) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  return %4 : tensor<4x4xf32>
}
