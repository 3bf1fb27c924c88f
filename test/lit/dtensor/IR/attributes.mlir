// RUN: dtorch-opt %s --split-input-file | FileCheck %s

// Meshes and placements round-trip, as attributes and inside the type.

// CHECK: #dtensor.mesh<[2, 3], names = ["x", "y"], device = "cuda">
// CHECK-LABEL: func @mesh_attrs
// CHECK-SAME: dtensor.placements = [#dtensor.placement<S(1)>, #dtensor.placement<R>, #dtensor.placement<P(avg)>, #dtensor.placement<P(min)>]
func.func @mesh_attrs() attributes {
    m = #dtensor.mesh<[2, 3], names = ["x", "y"], device = "cuda">,
    dtensor.placements = [#dtensor.placement<S(1)>, #dtensor.placement<R>, #dtensor.placement<P(avg)>, #dtensor.placement<P(min)>]} {
  return
}

// -----

// CHECK-LABEL: func @scalar_and_empty
// CHECK-SAME: !dtensor.tensor<f32, #{{.*}}, [P(sum)]>
// CHECK-SAME: !dtensor.tensor<0x3xi64, #{{.*}}, [S(0)]>
func.func @scalar_and_empty(%a: !dtensor.tensor<f32, #dtensor.mesh<[4]>, [P(sum)]>, %b: !dtensor.tensor<0x3xi64, #dtensor.mesh<[4]>, [S(0)]>) {
  return
}
