func.func @shard_dim_out_of_range(%a: !dtensor.tensor<4x4xf32, #dtensor.mesh<[2]>, [S(2)]>) { return }
