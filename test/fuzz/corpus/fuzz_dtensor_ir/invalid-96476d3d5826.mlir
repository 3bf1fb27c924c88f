func.func @different_meshes(%a: !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [R]>, %b: !dtensor.tensor<4xf32, #dtensor.mesh<[4]>, [R]>) {
  %0 = dtensor.mul %a, %b : (!dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [R]>, !dtensor.tensor<4xf32, #dtensor.mesh<[4]>, [R]>) -> !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [R]>
  return
}
