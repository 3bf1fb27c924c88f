"""parallelize_module and loss_parallel."""
import contextlib
import fnmatch
import warnings

from .style import ParallelStyle

__all__ = ["parallelize_module", "loss_parallel"]


def _apply_plan(module, atoms, style, mesh):
    """Applies `style` to every submodule whose path matches `atoms` (one
    fnmatch pattern per level); returns how many matched."""
    head, rest = atoms[0], atoms[1:]
    matched = 0
    for name, child in module.named_children():
        if not fnmatch.fnmatchcase(name, head):
            continue
        if rest:
            matched += _apply_plan(child, rest, style, mesh)
        else:
            parallelize_module(child, mesh, style)
            matched += 1
    return matched


def parallelize_module(module, device_mesh=None, parallelize_plan=None, *, src_data_rank=0):
    """Applies tensor-parallel styles to a module, as torch's
    ``parallelize_module``.

    `parallelize_plan` is one `ParallelStyle` (applied to `module` itself)
    or a dict from submodule paths to styles; a path's parts may be fnmatch
    patterns (``"layers.*.mlp.fc1"``). The styles lay the parameters out in
    place on `device_mesh` (the Parameter objects stay, so optimizers made
    before or after see them), and redistribute inputs and outputs with
    forward hooks. `device_mesh` may be a 1-D sub-mesh (``mesh["tp"]``) of a
    bigger mesh: the parameters are then Replicate on the other mesh dims
    (unless already sharded there, e.g. by `fully_shard`), so tensor
    parallelism composes with a batch sharded on ``"dp"``.

    Args:
        module (nn.Module): the module to parallelize (in place).
        device_mesh (DeviceMesh): a 1-D mesh or sub-mesh; by default
            dtorch's default mesh.
        parallelize_plan (ParallelStyle or dict): what to apply.
        src_data_rank: accepted for torch's signature (values are already
            global).

    Returns:
        nn.Module: `module`.

    Raises:
        ValueError: a plan entry matches no submodule, or a style gets a
            mesh with more than one dim.

    Example:
        >>> import dtorch
        >>> from dtorch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
        ...                                                 parallelize_module)
        >>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        >>> with dtorch.nn.default_device_mesh(mesh):
        ...     mlp = dtorch.nn.Sequential(dtorch.nn.Linear(8, 16), dtorch.nn.ReLU(),
        ...                                dtorch.nn.Linear(16, 8))
        >>> _ = parallelize_module(mlp, mesh["tp"], {"0": ColwiseParallel(),
        ...                                          "2": RowwiseParallel()})
        >>> mlp[0].weight.placements, mlp[2].weight.placements
        ((Shard(dim=0),), (Shard(dim=1),))
    """
    if device_mesh is None:
        from ...device_mesh import default_mesh
        device_mesh = default_mesh()
    if parallelize_plan is None:
        warnings.warn("parallelize_module: no parallelize_plan given, the module is unchanged")
        return module
    if isinstance(parallelize_plan, ParallelStyle):
        return parallelize_plan._apply(module, device_mesh)
    if not isinstance(parallelize_plan, dict):
        raise TypeError("parallelize_plan must be a ParallelStyle or a dict of them, got "
                        f"{type(parallelize_plan).__name__}")
    for path, style in parallelize_plan.items():
        if not isinstance(style, ParallelStyle):
            raise TypeError(f"parallelize_plan[{path!r}] is not a ParallelStyle: {style!r}")
        if path == "":
            parallelize_module(module, device_mesh, style)
            continue
        if _apply_plan(module, path.split("."), style, device_mesh) == 0:
            raise ValueError(f"parallelize_plan: {path!r} matches no submodule of "
                             f"{type(module).__name__}")
    return module


@contextlib.contextmanager
def loss_parallel():
    """torch's loss-parallel context: ``F.cross_entropy`` on logits sharded
    on the class dim (``Shard(-1)`` from a `ColwiseParallel` head with
    ``use_local_output=False``) without gathering them.

    In dtorch this is what ``cross_entropy`` always does: its decomposition
    picks the target's log-probability with a mask and a sum over the class
    dim when that dim is sharded, so only per-row statistics (the max, the
    sum of exponentials, the picked value) are all-reduced, forward and
    backward; the gradient of the logits stays sharded on the class dim.
    The context is kept so that torch code runs unchanged.

    Example:
        >>> import dtorch
        >>> from dtorch import Shard
        >>> from dtorch.distributed.tensor.parallel import loss_parallel
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> logits = dtorch.zeros(4, 6, device_mesh=mesh, placements=[Shard(1)])
        >>> with loss_parallel():
        ...     loss = dtorch.nn.functional.cross_entropy(logits, dtorch.arange(4, device_mesh=mesh))
        >>> round(loss.item(), 4)
        1.7918
    """
    yield
