func.func @bad_partial(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [P(prod)]>) { return }
