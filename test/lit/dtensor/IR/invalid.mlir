// RUN: dtorch-opt %s --split-input-file --verify-diagnostics

// expected-error @+1 {{expected 2 placements (one per mesh dim), got 1}}
func.func @wrong_placement_count(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2, 2]>, [R]>) { return }

// -----

// expected-error @+1 {{placement 0 is Shard(2) but the tensor has rank 2}}
func.func @shard_dim_out_of_range(%a: !dtensor.tensor<4x4xf32, #dtensor.mesh<[2]>, [S(2)]>) { return }

// -----

// expected-error @+1 {{unknown placement 'X' (expected S(dim), R or P(op))}}
func.func @bad_placement(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [X]>) { return }

// -----

// expected-error @+1 {{unknown partial reduction 'prod' (expected sum, avg, max or min)}}
func.func @bad_partial(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [P(prod)]>) { return }

// -----

// expected-error @+1 {{mesh dims must be positive, got 0}}
func.func @bad_mesh(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[0]>, [R]>) { return }

// -----

// More positions than the runtime accepts (a fuzzer's 8,555,555 x 3 mesh
// made the compile walk every position for minutes).
// expected-error @+1 {{mesh has more than 1048576 devices}}
func.func @huge_mesh(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[8555555, 3]>, [R, R]>) { return }

// -----

// expected-error @+1 {{mesh has 2 dims but 1 dim names}}
func.func @bad_mesh_names(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2, 2], names = ["a"]>, [R, R]>) { return }

// -----

// expected-error @+1 {{mesh dim name "a" is used twice}}
func.func @dup_mesh_names(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2, 2], names = ["a", "a"]>, [R, R]>) { return }

// -----

// expected-error @+1 {{unknown device type "tpu"}}
func.func @bad_device(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2], device = "tpu">, [R]>) { return }

// -----

#m = #dtensor.mesh<[2]>
func.func @add_shape_mismatch(%a: !dtensor.tensor<4xf32, #m, [R]>, %b: !dtensor.tensor<5xf32, #m, [R]>) {
  // expected-error @+1 {{operand shape [5] does not match result shape [4]}}
  %0 = dtensor.add %a, %b : (!dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<5xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @add_dtype_mismatch(%a: !dtensor.tensor<4xf32, #m, [R]>, %b: !dtensor.tensor<4xf64, #m, [R]>) {
  // expected-error @+1 {{operand element type 'f64' does not match result element type 'f32'}}
  %0 = dtensor.add %a, %b : (!dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf64, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

func.func @different_meshes(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [R]>, %b: !dtensor.tensor<4xf32, #dtensor.mesh<[4]>, [R]>) {
  // expected-error @+1 {{operands and result must be on the same mesh}}
  %0 = dtensor.mul %a, %b : (!dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [R]>, !dtensor.tensor<4xf32, #dtensor.mesh<[4]>, [R]>) -> !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @exp_of_int(%a: !dtensor.tensor<4xi64, #m, [R]>) {
  // expected-error @+1 {{needs a float element type, got 'i64'}}
  %0 = dtensor.exp %a : (!dtensor.tensor<4xi64, #m, [R]>) -> !dtensor.tensor<4xi64, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @unary_shape(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  // expected-error @+1 {{operand shape [4] does not match result shape [5]}}
  %0 = dtensor.relu %a : (!dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<5xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @random_dist() {
  // expected-error @+1 {{distribution must be "uniform" or "normal", got "poisson"}}
  %0 = dtensor.random seed = 1 distribution = "poisson" : !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @random_int() {
  // expected-error @+1 {{random values need a float element type}}
  %0 = dtensor.random seed = 1 distribution = "uniform" : !dtensor.tensor<4xi64, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @constant_shape() {
  // expected-error @+1 {{does not match the result's shape and element type}}
  %0 = dtensor.constant dense<[1.0, 2.0]> : tensor<2xf32> : !dtensor.tensor<3xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @matmul_k(%a: !dtensor.tensor<4x3xf32, #m, [R]>, %b: !dtensor.tensor<4x5xf32, #m, [R]>) {
  // expected-error @+1 {{contracting dims differ: lhs has 3, rhs has 4}}
  %0 = dtensor.matmul %a, %b : (!dtensor.tensor<4x3xf32, #m, [R]>, !dtensor.tensor<4x5xf32, #m, [R]>) -> !dtensor.tensor<4x5xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @matmul_rank(%a: !dtensor.tensor<4xf32, #m, [R]>, %b: !dtensor.tensor<4x5xf32, #m, [R]>) {
  // expected-error @+1 {{expects rank-2 operands and result}}
  %0 = dtensor.matmul %a, %b : (!dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4x5xf32, #m, [R]>) -> !dtensor.tensor<4x5xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @matmul_result(%a: !dtensor.tensor<4x3xf32, #m, [R]>, %b: !dtensor.tensor<3x5xf32, #m, [R]>) {
  // expected-error @+1 {{result shape must be [4, 5] in its last two dims}}
  %0 = dtensor.matmul %a, %b : (!dtensor.tensor<4x3xf32, #m, [R]>, !dtensor.tensor<3x5xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @bmm_rank(%a: !dtensor.tensor<4x3xf32, #m, [R]>, %b: !dtensor.tensor<3x5xf32, #m, [R]>) {
  // expected-error @+1 {{expects operands of rank 3 or more}}
  %0 = dtensor.bmm %a, %b : (!dtensor.tensor<4x3xf32, #m, [R]>, !dtensor.tensor<3x5xf32, #m, [R]>) -> !dtensor.tensor<4x5xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @bmm_batch4(%a: !dtensor.tensor<2x3x4x3xf32, #m, [R]>, %b: !dtensor.tensor<2x2x3x5xf32, #m, [R]>) {
  // expected-error @+1 {{batch dim 1 differs}}
  %0 = dtensor.bmm %a, %b : (!dtensor.tensor<2x3x4x3xf32, #m, [R]>, !dtensor.tensor<2x2x3x5xf32, #m, [R]>) -> !dtensor.tensor<2x3x4x5xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @bmm_batch(%a: !dtensor.tensor<2x4x3xf32, #m, [R]>, %b: !dtensor.tensor<3x3x5xf32, #m, [R]>) {
  // expected-error @+1 {{batch dim 0 differs}}
  %0 = dtensor.bmm %a, %b : (!dtensor.tensor<2x4x3xf32, #m, [R]>, !dtensor.tensor<3x3x5xf32, #m, [R]>) -> !dtensor.tensor<2x4x5xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @sum_dim_range(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  // expected-error @+1 {{reduction dim 2 is out of range for rank 2}}
  %0 = dtensor.sum %a dims = [2] : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @sum_dim_repeat(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  // expected-error @+1 {{reduction dim 1 is repeated}}
  %0 = dtensor.mean %a dims = [1, 1] : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @sum_result(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  // expected-error @+1 {{result shape must be [4, 1], got [4]}}
  %0 = dtensor.max %a dims = [1] keepdim : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @reshape_count(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  // expected-error @+1 {{cannot reshape 12 elements into shape [5, 2] (10 elements)}}
  %0 = dtensor.reshape %a : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<5x2xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @transpose_perm(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  // expected-error @+1 {{perm [0, 0] is not a permutation}}
  %0 = dtensor.transpose %a perm = [0, 0] : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<4x4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @transpose_shape(%a: !dtensor.tensor<4x3xf32, #m, [R]>) {
  // expected-error @+1 {{result dim 0 must have extent 3}}
  %0 = dtensor.transpose %a perm = [1, 0] : (!dtensor.tensor<4x3xf32, #m, [R]>) -> !dtensor.tensor<4x3xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @redistribute_shape(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  // expected-error @+1 {{may change only placements}}
  %0 = dtensor.redistribute %a : !dtensor.tensor<4xf32, #m, [R]> -> !dtensor.tensor<5xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2, 2]>
func.func @step_wrong_kind(%a: !dtensor.tensor<4xf32, #m, [S(0), R]>) {
  // expected-error @+1 {{expects P(op) -> R on axis 0, got S(0) -> R}}
  %0 = dtensor.all_reduce %a on axis 0 : !dtensor.tensor<4xf32, #m, [S(0), R]> -> !dtensor.tensor<4xf32, #m, [R, R]>
  return
}

// -----

#m = #dtensor.mesh<[2, 2]>
func.func @step_wrong_axis(%a: !dtensor.tensor<4xf32, #m, [S(0), R]>) {
  // expected-error @+1 {{changes the placement of mesh axis 0, but acts on axis 1}}
  %0 = dtensor.all_gather %a on axis 1 : !dtensor.tensor<4xf32, #m, [S(0), R]> -> !dtensor.tensor<4xf32, #m, [R, R]>
  return
}

// -----

#m = #dtensor.mesh<[2, 2]>
func.func @step_axis_range(%a: !dtensor.tensor<4xf32, #m, [S(0), R]>) {
  // expected-error @+1 {{axis 2 is out of range for a 2-d mesh}}
  %0 = dtensor.local_slice %a on axis 2 : !dtensor.tensor<4xf32, #m, [S(0), R]> -> !dtensor.tensor<4xf32, #m, [S(0), R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @all_to_all_same_dim(%a: !dtensor.tensor<4x4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{expects S(a) -> S(b) with a != b on axis 0, got S(0) -> S(0)}}
  %0 = dtensor.all_to_all %a on axis 0 : !dtensor.tensor<4x4xf32, #m, [S(0)]> -> !dtensor.tensor<4x4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @to_partial_from_shard(%a: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{expects R -> P(op) on axis 0, got S(0) -> P(sum)}}
  %0 = dtensor.to_partial %a on axis 0 : !dtensor.tensor<4xf32, #m, [S(0)]> -> !dtensor.tensor<4xf32, #m, [P(sum)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @reduce_scatter_from_replicate(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  // expected-error @+1 {{expects P(op) -> S(d) on axis 0, got R -> S(0)}}
  %0 = dtensor.reduce_scatter %a on axis 0 : !dtensor.tensor<4xf32, #m, [R]> -> !dtensor.tensor<4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @broadcast_bad(%a: !dtensor.tensor<3x4xf32, #m, [R]>) {
  // expected-error @+1 {{cannot broadcast [3, 4] to [2, 4, 4]: dim 0 has extent 3}}
  %0 = dtensor.broadcast_to %a : (!dtensor.tensor<3x4xf32, #m, [R]>) -> !dtensor.tensor<2x4x4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @broadcast_rank(%a: !dtensor.tensor<3x4xf32, #m, [R]>) {
  // expected-error @+1 {{cannot broadcast rank 2 to rank 1}}
  %0 = dtensor.broadcast_to %a : (!dtensor.tensor<3x4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @cast_shape(%a: !dtensor.tensor<3x4xi64, #m, [R]>) {
  // expected-error @+1 {{operand shape [3, 4] does not match result shape [4, 3]}}
  %0 = dtensor.cast %a : (!dtensor.tensor<3x4xi64, #m, [R]>) -> !dtensor.tensor<4x3xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @compare_result_not_bool(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  // expected-error @+1 {{result element type must be i1}}
  %0 = dtensor.lt %a, %a : (!dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @where_condition_not_bool(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  // expected-error @+1 {{condition element type must be i1}}
  %0 = dtensor.where %a, %a, %a : (!dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf32, #m, [R]>, !dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @argmax_dim_out_of_range(%a: !dtensor.tensor<4x6xf32, #m, [R]>) {
  // expected-error @+1 {{dim 2 is out of range for rank 2}}
  %0 = dtensor.argmax %a {dim = 2 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4xi64, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @slice_out_of_bounds(%a: !dtensor.tensor<4x6xf32, #m, [R]>) {
  // expected-error @+1 {{dim 1: 3 elements from 1 with stride 3 do not fit in extent 6}}
  %0 = dtensor.slice %a {offsets = array<i64: 0, 1>, sizes = array<i64: 4, 3>, strides = array<i64: 1, 3>} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x3xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @concat_extent_mismatch(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %b: !dtensor.tensor<3x6xf32, #m, [R]>) {
  // expected-error @+1 {{operand extent 3 differs from the result's 4 in dim 0}}
  %0 = dtensor.concat %a, %b {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<3x6xf32, #m, [R]>) -> !dtensor.tensor<4x12xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @gather_index_not_i64(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %i: !dtensor.tensor<4x2xi32, #m, [R]>) {
  // expected-error @+1 {{index element type must be i64, got 'i32'}}
  %0 = dtensor.gather %a, %i {dim = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x2xi32, #m, [R]>) -> !dtensor.tensor<4x2xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @index_select_2d_index(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %i: !dtensor.tensor<2x2xi64, #m, [R]>) {
  // expected-error @+1 {{index must be 1-D, got rank 2}}
  %0 = dtensor.index_select %a, %i {dim = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<2x2xi64, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @scatter_add_index_too_big(%a: !dtensor.tensor<4x6xf32, #m, [R]>, %i: !dtensor.tensor<4x7xi64, #m, [R]>, %s: !dtensor.tensor<4x6xf32, #m, [R]>) {
  // expected-error @+1 {{index extent 7 exceeds src's 6 in dim 1}}
  %0 = dtensor.scatter_add %a, %i, %s {dim = 0 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>, !dtensor.tensor<4x7xi64, #m, [R]>, !dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x6xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @tril_of_vector(%a: !dtensor.tensor<4xf32, #m, [R]>) {
  // expected-error @+1 {{needs a tensor of rank 2 or more}}
  %0 = dtensor.tril %a {diagonal = 0 : i64} : (!dtensor.tensor<4xf32, #m, [R]>) -> !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @iota_bool() {
  // expected-error @+1 {{needs a numeric element type}}
  %0 = dtensor.iota {dim = 0 : i64, start = 0.0 : f64, step = 1.0 : f64} : () -> !dtensor.tensor<4xi1, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @topk_k_too_large(%a: !dtensor.tensor<4x6xf32, #m, [R]>) {
  // expected-error @+1 {{k = 7 is out of range for extent 6}}
  %0 = dtensor.topk_indices %a {dim = 1 : i64, k = 7 : i64, largest = 1 : i64} : (!dtensor.tensor<4x6xf32, #m, [R]>) -> !dtensor.tensor<4x7xi64, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2, 2]>
func.func @transfer_not_sharded(%a: !dtensor.tensor<4x6xf32, #m, [R, S(0)]>) {
  // expected-error @+1 {{needs the input Shard(d) on mesh axis 0}}
  %0 = dtensor.transfer %a {axis = 0 : i64, sources = array<i64: 0>, destinations = array<i64: 1>} : !dtensor.tensor<4x6xf32, #m, [R, S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2, 2]>
func.func @transfer_nested(%a: !dtensor.tensor<4x6xf32, #m, [S(0), S(0)]>) {
  // expected-error @+1 {{tensor dim 0 is sharded by mesh axes 0 and 1; a transfer needs it split by its axis alone}}
  %0 = dtensor.transfer %a {axis = 0 : i64, sources = array<i64: 0>, destinations = array<i64: 1>} : !dtensor.tensor<4x6xf32, #m, [S(0), S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @transfer_uneven(%a: !dtensor.tensor<5x6xf32, #m, [S(0)]>) {
  // expected-error @+1 {{tensor dim 0 of extent 5 does not split evenly over the 2 positions of mesh axis 0}}
  %0 = dtensor.transfer %a {axis = 0 : i64, sources = array<i64: 0>, destinations = array<i64: 1>} : !dtensor.tensor<5x6xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[4]>
func.func @transfer_onto_itself(%a: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{pair 1 moves block 2 onto itself}}
  %0 = dtensor.transfer %a {axis = 0 : i64, sources = array<i64: 0, 2>, destinations = array<i64: 1, 2>} : !dtensor.tensor<4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[4]>
func.func @transfer_destination_twice(%a: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{destination 1 appears twice}}
  %0 = dtensor.transfer %a {axis = 0 : i64, sources = array<i64: 0, 2>, destinations = array<i64: 1, 1>} : !dtensor.tensor<4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[4]>
func.func @transfer_out_of_axis(%a: !dtensor.tensor<4xf32, #m, [S(0)]>) {
  // expected-error @+1 {{coordinate 4 is out of range for mesh axis 0 of 4 positions}}
  %0 = dtensor.transfer %a {axis = 0 : i64, sources = array<i64: 0>, destinations = array<i64: 4>} : !dtensor.tensor<4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2, 2]>
func.func @send_peer_count(%a: !dtensor.tensor<4xf32, #m, [S(0), R]>) {
  // expected-error @+1 {{has 2 peers for a mesh of 4 positions}}
  %0 = dtensor.send %a {peers = array<i64: 4, 5>, tag = 0 : i64} : !dtensor.tensor<4xf32, #m, [S(0), R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @recv_negative_peer() {
  // expected-error @+1 {{peer rank -1 is negative}}
  %0 = dtensor.recv {peers = array<i64: 2, -1>, tag = 0 : i64} : !dtensor.tensor<4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @a2av_not_sharded(%x: !dtensor.tensor<2x8x4xf32, #m, [R]>, %c: !dtensor.tensor<2x4xi64, #m, [S(0)]>) {
  // expected-error @+1 {{input must be Shard(0) on mesh axis 0 and split neither dim 0 nor dim 1 on any other}}
  %0 = dtensor.all_to_all_v %x, %c {axis = 0 : i64} : (!dtensor.tensor<2x8x4xf32, #m, [R]>, !dtensor.tensor<2x4xi64, #m, [S(0)]>) -> !dtensor.tensor<2x8x4xf32, #m, [R]>
  return
}

// -----

#m = #dtensor.mesh<[2, 2]>
func.func @a2av_rows_split(%x: !dtensor.tensor<2x8x4xf32, #m, [S(0), S(1)]>, %c: !dtensor.tensor<2x4xi64, #m, [S(0), R]>) {
  // expected-error @+1 {{input must be Shard(0) on mesh axis 0 and split neither dim 0 nor dim 1 on any other}}
  %0 = dtensor.all_to_all_v %x, %c {axis = 0 : i64} : (!dtensor.tensor<2x8x4xf32, #m, [S(0), S(1)]>, !dtensor.tensor<2x4xi64, #m, [S(0), R]>) -> !dtensor.tensor<2x8x4xf32, #m, [S(0), S(1)]>
  return
}

// -----

#m = #dtensor.mesh<[2, 2]>
func.func @a2av_counts_partial(%x: !dtensor.tensor<2x8x4xf32, #m, [S(0), R]>, %c: !dtensor.tensor<2x4xi64, #m, [S(0), P(sum)]>) {
  // expected-error @+1 {{counts must not be partial}}
  %0 = dtensor.all_to_all_v %x, %c {axis = 0 : i64} : (!dtensor.tensor<2x8x4xf32, #m, [S(0), R]>, !dtensor.tensor<2x4xi64, #m, [S(0), P(sum)]>) -> !dtensor.tensor<2x8x4xf32, #m, [S(0), R]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @a2av_positions(%x: !dtensor.tensor<4x8x4xf32, #m, [S(0)]>, %c: !dtensor.tensor<2x4xi64, #m, [S(0)]>) {
  // expected-error @+1 {{dim 0 of input (4) and counts (2) must be the 2 positions of mesh axis 0}}
  %0 = dtensor.all_to_all_v %x, %c {axis = 0 : i64} : (!dtensor.tensor<4x8x4xf32, #m, [S(0)]>, !dtensor.tensor<2x4xi64, #m, [S(0)]>) -> !dtensor.tensor<4x8x4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @a2av_segments(%x: !dtensor.tensor<2x9x4xf32, #m, [S(0)]>, %c: !dtensor.tensor<2x3xi64, #m, [S(0)]>) {
  // expected-error @+1 {{the counts' 3 segments do not split over the 2 positions of mesh axis 0}}
  %0 = dtensor.all_to_all_v %x, %c {axis = 0 : i64} : (!dtensor.tensor<2x9x4xf32, #m, [S(0)]>, !dtensor.tensor<2x3xi64, #m, [S(0)]>) -> !dtensor.tensor<2x9x4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @a2av_rows(%x: !dtensor.tensor<2x6x4xf32, #m, [S(0)]>, %c: !dtensor.tensor<2x4xi64, #m, [S(0)]>) {
  // expected-error @+1 {{the input's 6 rows do not split into 4 segments}}
  %0 = dtensor.all_to_all_v %x, %c {axis = 0 : i64} : (!dtensor.tensor<2x6x4xf32, #m, [S(0)]>, !dtensor.tensor<2x4xi64, #m, [S(0)]>) -> !dtensor.tensor<2x6x4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @a2av_counts_type(%x: !dtensor.tensor<2x8x4xf32, #m, [S(0)]>, %c: !dtensor.tensor<2x4xi32, #m, [S(0)]>) {
  // expected-error @+1 {{counts must be a 2-D i64 tensor [positions, segments]}}
  %0 = dtensor.all_to_all_v %x, %c {axis = 0 : i64} : (!dtensor.tensor<2x8x4xf32, #m, [S(0)]>, !dtensor.tensor<2x4xi32, #m, [S(0)]>) -> !dtensor.tensor<2x8x4xf32, #m, [S(0)]>
  return
}

// -----

#m = #dtensor.mesh<[2]>
func.func @a2av_axis(%x: !dtensor.tensor<2x8x4xf32, #m, [S(0)]>, %c: !dtensor.tensor<2x4xi64, #m, [S(0)]>) {
  // expected-error @+1 {{mesh axis 1 is out of range for a mesh of rank 1}}
  %0 = dtensor.all_to_all_v %x, %c {axis = 1 : i64} : (!dtensor.tensor<2x8x4xf32, #m, [S(0)]>, !dtensor.tensor<2x4xi64, #m, [S(0)]>) -> !dtensor.tensor<2x8x4xf32, #m, [S(0)]>
  return
}
