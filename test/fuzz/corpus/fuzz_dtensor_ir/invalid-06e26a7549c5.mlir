func.func @bad_device(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2], device = "tpu">, [R]>) { return }
