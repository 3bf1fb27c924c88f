// RUN: dtorch-opt %s --split-input-file --verify-diagnostics

func.func @no_kernel_name(%x: tensor<4xf32>) {
  // expected-error @+1 {{needs a kernel name}}
  %0 = rank.kernel ""(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @axis_out_of_mesh(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 2, 0, 2>]} {
  // expected-error @+1 {{mesh axis 2 is out of range for a mesh of rank 2}}
  %0 = rank.all_reduce %x {axis = 2 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @bad_reduce(%x: tensor<4xf32>) {
  // expected-error @+1 {{unknown reduction "prod" (expected sum, avg, max or min)}}
  %0 = rank.all_reduce %x {axis = 0 : i64, reduce = "prod"} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @gather_sizes(%x: tensor<4x5xf32>) {
  // expected-error @+1 {{sizes add up to 8, expected 7}}
  %0 = rank.all_gather %x {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 4, 4>} : tensor<4x5xf32> -> tensor<7x5xf32>
  return
}

// -----

func.func @gather_own_piece(%x: tensor<4x5xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>]} {
  // expected-error @+1 {{sizes[1] is 3 but this program's piece has extent 4}}
  %0 = rank.all_gather %x {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x5xf32>
  return
}

// -----

func.func @gather_axis_size(%x: tensor<2x5xf32>) attributes {rank.mesh = array<i64: 3>, rank.positions = [array<i64: 0, 3>]} {
  // expected-error @+1 {{sizes has 2 entries for mesh axis 0 of 3 ranks}}
  %0 = rank.all_gather %x {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 2, 2>} : tensor<2x5xf32> -> tensor<4x5xf32>
  return
}

// -----

func.func @gather_other_dim(%x: tensor<4x5xf32>) {
  // expected-error @+1 {{input and result differ in dim 1}}
  %0 = rank.all_gather %x {axis = 0 : i64, dim = 0 : i64, sizes = array<i64: 4, 4>} : tensor<4x5xf32> -> tensor<8x6xf32>
  return
}

// -----

func.func @scatter_count(%x: tensor<7x5xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
  // expected-error @+1 {{sizes has 3 entries for mesh axis 0 of 2 ranks}}
  %0 = rank.reduce_scatter %x {axis = 0 : i64, reduce = "sum", dim = 0 : i64, sizes = array<i64: 4, 2, 1>} : tensor<7x5xf32> -> tensor<4x5xf32>
  return
}

// -----

func.func @a2a_dims(%x: tensor<4x5xf32>) {
  // expected-error @+1 {{split_dim and concat_dim must be distinct dims in range}}
  %0 = rank.all_to_all %x {axis = 0 : i64, split_dim = 0 : i64, split_sizes = array<i64: 2, 2>, concat_dim = 0 : i64, concat_sizes = array<i64: 2, 2>} : tensor<4x5xf32> -> tensor<4x5xf32>
  return
}

// -----

// expected-error @+1 {{'rank.positions' box range [2, 3) of axis 0 is not inside [0, 2)}}
func.func @box_outside_mesh(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 2, 3>]} {
  return
}

// -----

// expected-error @+1 {{'rank.positions' boxes need 4 entries (lo, hi per mesh axis)}}
func.func @box_rank(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 2>]} {
  return
}

// -----

func.func @box_offset_shard_dims(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 2, 0, 2>]} {
  // expected-error @+1 {{'offset' has 1 shard_dims for a mesh of rank 2}}
  %0 = rank.kernel "iota"() {dim = 0 : i64, offset = #rank.box_offset<global_shape = [8], shard_dims = [0], dim = -1>} : () -> tensor<4xf32>
  return
}

// -----

func.func @box_offset_dim(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  // expected-error @+1 {{'offset' shards dim 1 of a rank-1 tensor}}
  %0 = rank.kernel "iota"() {dim = 0 : i64, offset = #rank.box_offset<global_shape = [8], shard_dims = [1], dim = -1>} : () -> tensor<4xf32>
  return
}

// -----

func.func @coord_axis(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  // expected-error @+1 {{mesh axis 1 is out of range for a mesh of rank 1}}
  %0 = rank.kernel "lead_or_zero"(%x) {coord = #rank.mesh_coord<axis = 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @fused_yield_types(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{yields 1 value(s) whose types differ from the results}}
  %0 = rank.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %e = rank.kernel "sum"(%a) {dims = array<i64: 0>, keepdim = 0 : i64, scale = 1.0 : f64} : (tensor<4xf32>) -> tensor<f32>
    rank.yield %e : tensor<f32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @fused_body_argument(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{body argument type 'tensor<4xf64>' differs from input type 'tensor<4xf32>'}}
  %0 = rank.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf64>):
    %e = rank.kernel "exp"(%a) : (tensor<4xf64>) -> tensor<4xf32>
    rank.yield %e : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @fused_arena_offsets_per_result(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'rank.arena_offset' has 1 entries for 2 results}}
  %0:2 = rank.fused(%x) {rank.arena_offset = array<i64: 0>} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %e = rank.kernel "exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    rank.yield %e, %e : tensor<4xf32>, tensor<4xf32>
  }
  return %0#0 : tensor<4xf32>
}

// -----

func.func @fused_arena_offset_alignment(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'rank.arena_offset' entries must be -1 or multiples of 64}}
  %0:2 = rank.fused(%x) {rank.arena_offset = array<i64: 0, 8>} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %e = rank.kernel "exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    rank.yield %e, %e : tensor<4xf32>, tensor<4xf32>
  }
  return %0#0 : tensor<4xf32>
}

// -----

func.func @fused_holds_a_collective(%x: tensor<4xf32>) -> tensor<4xf32> attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  %0 = rank.fused(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    // expected-error @+1 {{cannot be inside rank.fused (only rank.kernel)}}
    %r = rank.all_reduce %a {axis = 0 : i64, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
    rank.yield %r : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @send_peer_out_of_axis(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2, 2>, rank.positions = [array<i64: 0, 1, 0, 2>]} {
  // expected-error @+1 {{peer 2 is out of range for mesh axis 0 of 2 ranks}}
  rank.send %x {axis = 0 : i64, peer = 2 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}

// -----

func.func @send_to_itself(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 1, 2>]} {
  // expected-error @+1 {{peer 1 is the program's own coordinate on axis 0}}
  rank.send %x {axis = 0 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}

// -----

func.func @recv_spanning_the_axis() attributes {rank.mesh = array<i64: 4>, rank.positions = [array<i64: 0, 2>]} {
  // expected-error @+1 {{runs at coordinates [0, 2) of mesh axis 0; point to point needs one coordinate per program}}
  %0 = rank.recv {axis = 0 : i64, peer = 3 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}

// -----

func.func @negative_tag() {
  // expected-error @+1 {{tag -1 is negative}}
  %0 = rank.recv {axis = 0 : i64, peer = 1 : i64, tag = -1 : i64} : tensor<4xf32>
  return
}

// -----

func.func @recv_axis_out_of_mesh() attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
  // expected-error @+1 {{mesh axis 1 is out of range for a mesh of rank 1}}
  %0 = rank.recv {axis = 1 : i64, peer = 1 : i64, tag = 0 : i64} : tensor<4xf32>
  return
}

// -----

func.func @batch_peer_count(%x: tensor<4xf32>) {
  // expected-error @+1 {{has 2 send_peers for 1 inputs}}
  %0 = rank.batch_send_recv(%x) {axis = 0 : i64, send_peers = array<i64: 1, 2>, recv_peers = array<i64: 1>, tag = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @batch_empty() {
  // expected-error @+1 {{sends and receives nothing}}
  rank.batch_send_recv() {axis = 0 : i64, send_peers = array<i64>, recv_peers = array<i64>, tag = 0 : i64} : () -> ()
  return
}

// -----

func.func @batch_recv_peer_self(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 1>]} {
  // expected-error @+1 {{recv peer 0 is the program's own coordinate on axis 0}}
  %0 = rank.batch_send_recv(%x) {axis = 0 : i64, send_peers = array<i64: 1>, recv_peers = array<i64: 0>, tag = 0 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @a2av_axis(%x: tensor<6x4xf32>, %c: tensor<2xi64>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  // expected-error @+1 {{mesh axis 1 is out of range for a mesh of rank 1}}
  %0, %1 = rank.all_to_all_v %x, %c {axis = 1 : i64} : (tensor<6x4xf32>, tensor<2xi64>) -> (tensor<12x4xf32>, tensor<2xi64>)
  return
}

// -----

func.func @a2av_row_shape(%x: tensor<6x4xf32>, %c: tensor<2xi64>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  // expected-error @+1 {{input and result differ in dim 1; only the rows (dim 0) may differ}}
  %0, %1 = rank.all_to_all_v %x, %c {axis = 0 : i64} : (tensor<6x4xf32>, tensor<2xi64>) -> (tensor<12x5xf32>, tensor<2xi64>)
  return
}

// -----

func.func @a2av_element_type(%x: tensor<6x4xf32>, %c: tensor<2xi64>) {
  // expected-error @+1 {{input and result must share element type and rank (at least 1: the rows)}}
  %0, %1 = rank.all_to_all_v %x, %c {axis = 0 : i64} : (tensor<6x4xf32>, tensor<2xi64>) -> (tensor<12x4xf64>, tensor<2xi64>)
  return
}

// -----

func.func @a2av_count_type(%x: tensor<6x4xf32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{send_counts must be a 1-D i64 tensor, got 'tensor<2xi32>'}}
  %0, %1 = rank.all_to_all_v %x, %c {axis = 0 : i64} : (tensor<6x4xf32>, tensor<2xi32>) -> (tensor<12x4xf32>, tensor<2xi64>)
  return
}

// -----

func.func @a2av_count_extent(%x: tensor<6x4xf32>, %c: tensor<2xi64>) attributes {rank.mesh = array<i64: 4>, rank.positions = [array<i64: 0, 4>]} {
  // expected-error @+1 {{send_counts has 2 entries for the 4 coordinates of mesh axis 0}}
  %0, %1 = rank.all_to_all_v %x, %c {axis = 0 : i64} : (tensor<6x4xf32>, tensor<2xi64>) -> (tensor<12x4xf32>, tensor<4xi64>)
  return
}

// -----

func.func @a2av_recv_counts(%x: tensor<6x4xf32>, %c: tensor<4xi64>) attributes {rank.mesh = array<i64: 4>, rank.positions = [array<i64: 0, 4>]} {
  // expected-error @+1 {{recv_counts has 3 entries for the 4 coordinates of mesh axis 0}}
  %0, %1 = rank.all_to_all_v %x, %c {axis = 0 : i64} : (tensor<6x4xf32>, tensor<4xi64>) -> (tensor<12x4xf32>, tensor<3xi64>)
  return
}

// -----

// expected-error @+1 {{'rank.global_ranks' has 3 ranks for a mesh of 2 positions}}
func.func @global_ranks_size(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>], rank.global_ranks = array<i64: 0, 1, 2>} {
  return
}

// -----

// expected-error @+1 {{'rank.global_ranks' has a negative or repeated rank 1}}
func.func @global_ranks_repeated(%x: tensor<4xf32>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>], rank.global_ranks = array<i64: 1, 1>} {
  return
}

// -----

func.func @a2av_segment_rows(%x: tensor<12x4xf32>, %c: tensor<4xi64>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  // expected-error @+1 {{with segment_rows 2, the 4 segments need 8 rows, the input has 12}}
  %0, %1 = rank.all_to_all_v %x, %c {axis = 0 : i64, segment_rows = 2 : i64} : (tensor<12x4xf32>, tensor<4xi64>) -> (tensor<12x4xf32>, tensor<4xi64>)
  return
}

// -----

func.func @a2av_segment_counts(%x: tensor<9x4xf32>, %c: tensor<3xi64>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  // expected-error @+1 {{send_counts has 3 entries, not a multiple of the 2 coordinates of mesh axis 0}}
  %0, %1 = rank.all_to_all_v %x, %c {axis = 0 : i64, segment_rows = 3 : i64} : (tensor<9x4xf32>, tensor<3xi64>) -> (tensor<9x4xf32>, tensor<3xi64>)
  return
}

// -----

func.func @a2av_segment_shape(%x: tensor<12x4xf32>, %c: tensor<4xi64>) attributes {rank.mesh = array<i64: 2>, rank.positions = [array<i64: 0, 2>]} {
  // expected-error @+1 {{with segment_rows, input and result (and the two count tensors) must have the same type}}
  %0, %1 = rank.all_to_all_v %x, %c {axis = 0 : i64, segment_rows = 3 : i64} : (tensor<12x4xf32>, tensor<4xi64>) -> (tensor<24x4xf32>, tensor<4xi64>)
  return
}

// -----

// expected-error @+1 {{'rank.output_donors' has 2 entries for 1 results}}
func.func @output_donors_size(%x: tensor<4xf32>) -> tensor<4xf32> attributes {rank.output_donors = array<i64: 0, -1>} {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{'rank.output_donors' names argument 0, which is out of range or named twice}}
func.func @output_donors_twice(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) attributes {rank.output_donors = array<i64: 0, 0>} {
  return %x, %x : tensor<4xf32>, tensor<4xf32>
}
