func.func @bad_placement(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [X]>) { return }
