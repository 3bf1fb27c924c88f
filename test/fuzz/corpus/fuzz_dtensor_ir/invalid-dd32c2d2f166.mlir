func.func @bad_mesh_names(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2, 2], names = ["a"]>, [R, R]>) { return }
