"""dtorch.distributed: torch.distributed's parallelism API over dtorch
tensors: ``tensor`` (DTensor names and ``tensor.parallel``, the
tensor-parallel styles), ``fsdp`` (``fully_shard``) and
`distribute_module`.

Data parallelism needs no module: place the batch with
``distribute_tensor(batch, mesh, [Shard(0), ...])`` and keep the parameters
replicated; the gradient all-reduce follows from the sharding rules.
"""
import inspect

from ..device_mesh import DeviceMesh, init_device_mesh
from ..placement_types import Partial, Placement, Replicate, Shard
from .._creation import distribute_tensor
from . import _layout
from . import tensor
from . import fsdp
from . import optim
from . import pipelining
from ._all_to_all_v import all_to_all_v

__all__ = ["distribute_module", "distribute_tensor", "DeviceMesh", "init_device_mesh",
           "Partial", "Placement", "Replicate", "Shard", "tensor", "fsdp", "optim", "pipelining",
           "all_to_all_v"]


def _arity(fn):
    try:
        return len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return 3


def distribute_module(module, device_mesh=None, partition_fn=None, input_fn=None,
                      output_fn=None):
    """Lays a module's parameters and buffers out on a mesh and wraps its
    inputs and outputs, as torch's ``distribute_module``.

    Args:
        module (nn.Module): changed in place and returned.
        device_mesh (DeviceMesh): by default dtorch's default mesh.
        partition_fn (callable, optional): ``partition_fn(name, submodule,
            device_mesh)``, called for every submodule (``name`` its path),
            to lay its parameters out (e.g. by registering Parameters made
            with `distribute_tensor`). Parameters and buffers it leaves on
            another mesh, and all of them without a partition_fn, are
            replicated on `device_mesh` (in place: the objects stay).
        input_fn (callable, optional): ``input_fn(module, inputs,
            device_mesh)`` runs before each forward; a non-None result
            replaces the positional inputs.
        output_fn (callable, optional): ``output_fn(module, outputs,
            device_mesh)`` runs after each forward; a non-None result
            replaces the outputs.

    Returns:
        nn.Module: `module`.

    Example:
        >>> import dtorch
        >>> from dtorch import Shard
        >>> from dtorch.distributed import distribute_module
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> def shard_rows(name, mod, mesh):
        ...     for pname, p in list(mod.named_parameters(recurse=False)):
        ...         value = dtorch.distribute_tensor(p, mesh, [Shard(0)])
        ...         mod.register_parameter(pname, dtorch.nn.Parameter(value))
        >>> fc = distribute_module(dtorch.nn.Linear(4, 6), mesh, shard_rows)
        >>> fc.weight.placements, fc(dtorch.ones(3, 4, device_mesh=mesh)).shape
        ((Shard(dim=0),), (3, 6))
    """
    if device_mesh is None:
        from ..device_mesh import default_mesh
        device_mesh = default_mesh()
    if partition_fn is not None:
        for name, sub in list(module.named_modules()):
            partition_fn(name, sub, device_mesh)
    for t in list(module.parameters()) + list(module.buffers()):
        if partition_fn is None or not _layout.same_root(t, device_mesh):
            _layout.relayout_(t, device_mesh, [Replicate()] * device_mesh.ndim,
                              keep_others=False)
    if input_fn is not None:
        if _arity(input_fn) == 2:  # torch's deprecated input_fn(inputs, device_mesh)
            module.register_forward_pre_hook(lambda mod, args: input_fn(args, device_mesh))
        else:
            module.register_forward_pre_hook(
                lambda mod, args: input_fn(mod, args, device_mesh))
    if output_fn is not None:
        if _arity(output_fn) == 2:
            module.register_forward_hook(
                lambda mod, args, out: output_fn(out, device_mesh))
        else:
            module.register_forward_hook(
                lambda mod, args, out: output_fn(mod, out, device_mesh))
    return module
