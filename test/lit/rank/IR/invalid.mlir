// RUN: dtorch-opt %s --split-input-file --verify-diagnostics

func.func @no_kernel_name(%x: tensor<4xf32>) {
  // expected-error @+1 {{needs a kernel name}}
  %0 = rank.kernel ""(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @empty_group(%x: tensor<4xf32>) {
  // expected-error @+1 {{group must not be empty}}
  %0 = rank.all_reduce %x {group = array<i64>, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @dup_group(%x: tensor<4xf32>) {
  // expected-error @+1 {{rank 1 appears twice in the group}}
  %0 = rank.all_reduce %x {group = array<i64: 1, 1>, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @not_member(%x: tensor<4xf32>) attributes {rank.rank = 3 : i64} {
  // expected-error @+1 {{group does not contain this program's rank 3}}
  %0 = rank.all_reduce %x {group = array<i64: 0, 1>, reduce = "sum"} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @bad_reduce(%x: tensor<4xf32>) {
  // expected-error @+1 {{unknown reduction "prod" (expected sum, avg, max or min)}}
  %0 = rank.all_reduce %x {group = array<i64: 0, 1>, reduce = "prod"} : tensor<4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @gather_sizes(%x: tensor<4x5xf32>) {
  // expected-error @+1 {{sizes add up to 8, expected 7}}
  %0 = rank.all_gather %x {group = array<i64: 0, 1>, dim = 0 : i64, sizes = array<i64: 4, 4>} : tensor<4x5xf32> -> tensor<7x5xf32>
  return
}

// -----

func.func @gather_own_piece(%x: tensor<4x5xf32>) attributes {rank.rank = 1 : i64} {
  // expected-error @+1 {{sizes[1] is 3 but this rank's piece has extent 4}}
  %0 = rank.all_gather %x {group = array<i64: 0, 1>, dim = 0 : i64, sizes = array<i64: 4, 3>} : tensor<4x5xf32> -> tensor<7x5xf32>
  return
}

// -----

func.func @gather_other_dim(%x: tensor<4x5xf32>) {
  // expected-error @+1 {{input and result differ in dim 1}}
  %0 = rank.all_gather %x {group = array<i64: 0, 1>, dim = 0 : i64, sizes = array<i64: 4, 4>} : tensor<4x5xf32> -> tensor<8x6xf32>
  return
}

// -----

func.func @scatter_count(%x: tensor<7x5xf32>) {
  // expected-error @+1 {{sizes has 3 entries for a group of 2}}
  %0 = rank.reduce_scatter %x {group = array<i64: 0, 1>, reduce = "sum", dim = 0 : i64, sizes = array<i64: 4, 2, 1>} : tensor<7x5xf32> -> tensor<4x5xf32>
  return
}

// -----

func.func @a2a_dims(%x: tensor<4x5xf32>) {
  // expected-error @+1 {{split_dim and concat_dim must be distinct dims in range}}
  %0 = rank.all_to_all %x {group = array<i64: 0, 1>, split_dim = 0 : i64, split_sizes = array<i64: 2, 2>, concat_dim = 0 : i64, concat_sizes = array<i64: 2, 2>} : tensor<4x5xf32> -> tensor<4x5xf32>
  return
}
