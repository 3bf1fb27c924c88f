"""Expert parallelism: the experts of a `dtorch.nn.MoE` split over a mesh dim."""
from ... import _layout
from ....placement_types import Replicate, Shard
from .style import ParallelStyle, _check_1d


class ExpertParallel(ParallelStyle):
    """Shards a `dtorch.nn.MoE`'s experts over a 1-D mesh (``mesh["ep"]``):
    the stacked expert weights and biases become ``Shard(0)`` (each rank
    holds ``n_experts / ep`` whole experts), the router stays replicated.
    The tokens keep their own layout (e.g. ``Shard(0)`` on the same dim, as
    in data parallelism); moving each assignment to its expert's rank and
    back (dispatch and combine) is what the compiler plans from the layouts.

    Raises:
        TypeError: the module is not an MoE.
        ValueError: the mesh has more than one dim, or its size does not
            divide the number of experts (with both numbers).

    Example:
        >>> import dtorch
        >>> from dtorch.nn import MoE
        >>> from dtorch.distributed.tensor.parallel import ExpertParallel, parallelize_module
        >>> mesh = dtorch.init_device_mesh("cpu", (4,), mesh_dim_names=("ep",))
        >>> moe = parallelize_module(MoE(8, 16, n_experts=4, top_k=2), mesh["ep"], ExpertParallel())
        >>> moe.w1.placements, moe.router.weight.placements
        ((Shard(dim=0),), (Replicate(),))
    """

    def _apply(self, module, device_mesh):
        from ....nn import MoE
        _check_1d(self, device_mesh)
        if not isinstance(module, MoE):
            raise TypeError(f"ExpertParallel applies to dtorch.nn.MoE, got {type(module).__name__}")
        size = device_mesh.size()
        if module.n_experts % size:
            raise ValueError(f"ExpertParallel: {module.n_experts} experts do not split over the "
                             f"{size} ranks of the mesh")
        for name in ("w1", "b1", "w2", "b2"):
            _layout.relayout_(getattr(module, name), device_mesh, [Shard(0)])
        _layout.relayout_(module.router.weight, device_mesh, [Replicate()])
        return module

    def __repr__(self):
        return "ExpertParallel()"
