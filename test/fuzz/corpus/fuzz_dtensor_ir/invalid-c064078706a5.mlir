func.func @bad_mesh(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[0]>, [R]>) { return }
