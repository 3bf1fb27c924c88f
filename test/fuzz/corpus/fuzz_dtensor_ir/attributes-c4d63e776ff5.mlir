func.func @mesh_attrs() attributes {
    m = #dtensor.mesh<[2, 3], names = ["x", "y"], device = "cuda">,
    dtensor.placements = [#dtensor.placement<S(1)>, #dtensor.placement<R>, #dtensor.placement<P(avg)>, #dtensor.placement<P(min)>]} {
  return
}
