"""ZeroRedundancyOptimizer: ZeRO-1 by placements.

The wrapped optimizer keeps its update rule; its state tensors that have
their parameter's shape (momentum buffers, Adam's moments) are laid out
``Shard(0)`` on the data-parallel mesh dim after the step that creates
them, and keep that layout (in-place updates keep placements). A step then
computes each update on the rank's shard (the replicated gradient and
parameter are sliced locally) and assigning the result to the replicated
parameter all-gathers it: each rank keeps 1/n of the optimizer state.
"""
from ... import _C
from ...optim.optimizer import Optimizer
from ...placement_types import Shard
from .. import _layout

__all__ = ["ZeroRedundancyOptimizer"]


class ZeroRedundancyOptimizer(Optimizer):
    """Wraps an optimizer so that its state is sharded on a data-parallel
    mesh dim (ZeRO-1), as torch's ``ZeroRedundancyOptimizer``.

    Args:
        params: parameters or param groups, as for any optimizer.
        optimizer_class: the optimizer to wrap (``dtorch.optim.AdamW``, ...).
        mesh (DeviceMesh, optional): a 1-D mesh or sub-mesh (``mesh["dp"]``)
            of the parameters' mesh; by default the parameters' own mesh
            when it is 1-D.
        **defaults: the wrapped optimizer's arguments (``lr=...``).

    Example:
        >>> import dtorch
        >>> from dtorch.distributed.optim import ZeroRedundancyOptimizer
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> fc = dtorch.nn.Linear(4, 6, device_mesh=mesh)
        >>> opt = ZeroRedundancyOptimizer(fc.parameters(), dtorch.optim.Adam, lr=0.1)
        >>> fc(dtorch.ones(3, 4, device_mesh=mesh)).sum().backward()
        >>> opt.step()
        >>> opt.state[fc.weight]["exp_avg"].placements, fc.weight.placements
        ((Shard(dim=0),), (Replicate(),))
    """

    def __init__(self, params, optimizer_class, *, mesh=None, process_group=None,
                 parameters_as_bucket_view=False, overlap_with_ddp=False, **defaults):
        if overlap_with_ddp:
            raise NotImplementedError("ZeroRedundancyOptimizer: overlap_with_ddp")
        self.optim = optimizer_class(params, **defaults)
        self._mesh = mesh
        if mesh is not None and mesh.ndim != 1:
            raise ValueError("ZeroRedundancyOptimizer needs a 1-D mesh (e.g. mesh['dp'])")

    @property
    def param_groups(self):
        """The wrapped optimizer's param groups (a scheduler changes them).

        Example:
            >>> import dtorch
            >>> from dtorch.distributed.optim import ZeroRedundancyOptimizer
            >>> opt = ZeroRedundancyOptimizer([dtorch.nn.Parameter(dtorch.ones(2))],
            ...                               dtorch.optim.SGD, lr=0.5)
            >>> opt.param_groups is opt.optim.param_groups
            True
        """
        return self.optim.param_groups

    @property
    def state(self):
        """The wrapped optimizer's state by parameter (sharded tensors).

        Example:
            >>> import dtorch
            >>> from dtorch.distributed.optim import ZeroRedundancyOptimizer
            >>> opt = ZeroRedundancyOptimizer([dtorch.nn.Parameter(dtorch.ones(2))],
            ...                               dtorch.optim.SGD, lr=0.5)
            >>> len(opt.state)
            0
        """
        return self.optim.state

    @property
    def defaults(self):
        """The wrapped optimizer's defaults.

        Example:
            >>> import dtorch
            >>> from dtorch.distributed.optim import ZeroRedundancyOptimizer
            >>> opt = ZeroRedundancyOptimizer([dtorch.nn.Parameter(dtorch.ones(2))],
            ...                               dtorch.optim.SGD, lr=0.5)
            >>> opt.defaults["lr"]
            0.5
        """
        return self.optim.defaults

    def _mesh_of(self, p):
        if self._mesh is not None:
            return self._mesh
        mesh = p.device_mesh
        if mesh.ndim != 1:
            raise ValueError("ZeroRedundancyOptimizer: give mesh= for parameters on a "
                             f"{mesh.ndim}-D mesh")
        return mesh

    def _shard_state(self):
        for p, state in self.optim.state.items():
            for value in state.values():
                if (getattr(value, "shape", None) == p.shape and value.ndim > 0
                        and not value.is_meta):
                    mesh = self._mesh_of(p)
                    want = _layout.root_placements(value, mesh, [Shard(0)])
                    if [tuple(r) for r in value._placements_raw] != want:
                        _layout.relayout_(value, mesh, [Shard(0)])

    def step(self, closure=None):
        """The wrapped optimizer's step, then any new state sharded.

        Example:
            >>> import dtorch
            >>> from dtorch.distributed.optim import ZeroRedundancyOptimizer
            >>> p = dtorch.nn.Parameter(dtorch.ones(4))
            >>> opt = ZeroRedundancyOptimizer([p], dtorch.optim.SGD, lr=0.5, momentum=0.9)
            >>> p.grad = dtorch.ones(4)
            >>> opt.step()
            >>> p.tolist(), opt.state[p]["momentum_buffer"].placements
            ([0.5, 0.5, 0.5, 0.5], (Shard(dim=0),))
        """
        loss = self.optim.step(closure)
        self._shard_state()
        _C.cut_segment()  # the step boundary (see Optimizer.step)
        return loss

    def zero_grad(self, set_to_none=True):
        """The wrapped optimizer's zero_grad.

        Example:
            >>> import dtorch
            >>> from dtorch.distributed.optim import ZeroRedundancyOptimizer
            >>> p = dtorch.nn.Parameter(dtorch.ones(4))
            >>> opt = ZeroRedundancyOptimizer([p], dtorch.optim.SGD, lr=0.5)
            >>> p.grad = dtorch.ones(4)
            >>> opt.zero_grad()
            >>> p.grad is None
            True
        """
        self.optim.zero_grad(set_to_none)

    def add_param_group(self, param_group):
        """Adds a param group to the wrapped optimizer.

        Example:
            >>> import dtorch
            >>> from dtorch.distributed.optim import ZeroRedundancyOptimizer
            >>> opt = ZeroRedundancyOptimizer([dtorch.nn.Parameter(dtorch.ones(2))],
            ...                               dtorch.optim.SGD, lr=0.5)
            >>> opt.add_param_group({"params": [dtorch.nn.Parameter(dtorch.ones(2))]})
            >>> len(opt.param_groups)
            2
        """
        self.optim.add_param_group(param_group)

    def state_dict(self):
        """The wrapped optimizer's state dict (torch's layout; the state
        tensors are the sharded ones).

        Example:
            >>> import dtorch
            >>> from dtorch.distributed.optim import ZeroRedundancyOptimizer
            >>> opt = ZeroRedundancyOptimizer([dtorch.nn.Parameter(dtorch.ones(2))],
            ...                               dtorch.optim.SGD, lr=0.5)
            >>> sorted(opt.state_dict())
            ['param_groups', 'state']
        """
        return self.optim.state_dict()

    def load_state_dict(self, state_dict):
        """Loads into the wrapped optimizer and shards the loaded state.

        Example:
            >>> import dtorch
            >>> from dtorch.distributed.optim import ZeroRedundancyOptimizer
            >>> opt = ZeroRedundancyOptimizer([dtorch.nn.Parameter(dtorch.ones(2))],
            ...                               dtorch.optim.SGD, lr=0.5)
            >>> opt.load_state_dict(opt.state_dict())
            >>> opt.param_groups[0]["lr"]
            0.5
        """
        self.optim.load_state_dict(state_dict)
        self._shard_state()

    def __repr__(self):
        return f"ZeroRedundancyOptimizer({self.optim!r})"
