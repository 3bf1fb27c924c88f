func.func @wrong_placement_count(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2, 2]>, [R]>) { return }
