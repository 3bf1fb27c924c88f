#m = #dtensor.mesh<[4]>
func.func @partial_through_add_not_relu(%a: !dtensor.tensor<8xf32, #m, [P(sum)]>, %b: !dtensor.tensor<8xf32, #m, [P(sum)]>) -> !dtensor.tensor<8xf32, #m, [R]> {
  %0 = dtensor.add %a, %b : (!dtensor.tensor<8xf32, #m, [P(sum)]>, !dtensor.tensor<8xf32, #m, [P(sum)]>) -> !dtensor.tensor<8xf32, #m, [P(sum)]>
  %1 = dtensor.relu %0 : (!dtensor.tensor<8xf32, #m, [P(sum)]>) -> !dtensor.tensor<8xf32, #m, [R]>
  return %1 : !dtensor.tensor<8xf32, #m, [R]>
}
