func.func @scalar_and_empty(%a: !dtensor.tensor<f32, #dtensor.mesh<[4]>, [P(sum)]>, %b: !dtensor.tensor<0x3xi64, #dtensor.mesh<[4]>, [S(0)]>) {
  return
}
