"""dtorch.distributed.pipelining: pipeline parallelism on the single
controller.

The stages of a pipeline are the positions of one mesh dim (``"pp"``).
`pipeline` runs a list of stage modules, one per position, each on its own
ranks (the sub-mesh of the other dims, which may itself be DP x TP): the
batch is split into microbatches, every microbatch's forward and backward
is recorded stage by stage in the order of the schedule (GPipe or 1F1B),
and activations and gradients move between the stages' ranks with
point-to-point messages (``dtensor.send``/``dtensor.recv``) on the
communication stream, so the stages run concurrently; the controller pairs
every receive with a message sent before it, of its type, before running
it (a mismatch is an error naming both programs, never a hang). `transfer` moves
blocks of one tensor between the positions of a mesh dim inside one
program (``dtensor.transfer``, checked at compile time to pair every send
with its receive). The user writes no send or recv.
"""
from ... import _C
from ...device_mesh import mesh_of
from .schedules import PipelineSchedule, pipeline

__all__ = ["transfer", "pipeline", "PipelineSchedule"]


def _root_axis(mesh, mesh_dim):
    """The root mesh dim of `mesh_dim` (a name or an index of `mesh`)."""
    if isinstance(mesh_dim, str):
        names = mesh.mesh_dim_names or ()
        if mesh_dim not in names:
            raise ValueError(f"transfer: the tensor's mesh has no dim named {mesh_dim!r} "
                             f"(it has {names})")
        index = names.index(mesh_dim)
    elif isinstance(mesh_dim, int) and not isinstance(mesh_dim, bool):
        index = mesh_dim
        if not -mesh.ndim <= index < mesh.ndim:
            raise ValueError(f"transfer: mesh dim {mesh_dim} is out of range for a mesh of "
                             f"{mesh.ndim} dims")
        index %= mesh.ndim
    else:
        raise TypeError(f"transfer: mesh_dim must be a name or an int, got {mesh_dim!r}")
    group = mesh._groups[index]
    if len(group) != 1:
        raise ValueError(f"transfer: mesh dim {mesh_dim!r} joins several dims of the root "
                         "mesh; transfer along one of them")
    return group[0]


def transfer(x, mesh_dim, sources, destinations):
    """Moves blocks of `x` between the positions of one mesh dim.

    `x` is ``Shard(d)`` on `mesh_dim`, split evenly and by that dim alone,
    so the ranks at position ``c`` of the dim hold block ``c`` of tensor dim
    ``d``. In the result, block ``destinations[k]`` is x's block
    ``sources[k]`` and every block that no pair fills is zero; the other
    mesh dims keep their placements (each rank exchanges with the rank of
    the same coordinates there). Differentiable: the gradient goes back
    along the reversed pairs.

    On the workers the ranks at a source position send their piece to the
    ranks at the destination position (``rank.send``/``rank.recv``, or both
    at once where a position sends and receives) on the communication
    stream, so the transfer overlaps compute that does not need it.

    Args:
        x (Tensor): the blocks, ``Shard(d)`` on `mesh_dim`.
        mesh_dim (str or int): the stage dim of x's mesh (``"pp"``).
        sources (list[int]): positions whose block moves (distinct).
        destinations (list[int]): where each goes (distinct, none equal to
            its source).

    Returns:
        Tensor: x's shape, dtype, mesh and placements.

    Raises:
        ValueError: with the numbers involved: x is not ``Shard(d)`` on the
            dim, the dim does not split it evenly, a position is out of
            range, repeated or moved onto itself, or the lists differ in
            length.

    Example:
        >>> import numpy as np
        >>> import dtorch
        >>> from dtorch import Shard
        >>> from dtorch.distributed.pipelining import transfer
        >>> mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("pp",))
        >>> x = dtorch.distribute_tensor(np.array([[1.0, 2.0], [3.0, 4.0]], np.float32),
        ...                              mesh, [Shard(0)])
        >>> transfer(x, "pp", [0], [1]).numpy().tolist()   # stage 0's block to stage 1
        [[0.0, 0.0], [1.0, 2.0]]
    """
    mesh = mesh_of(x)
    axis = _root_axis(mesh, mesh_dim)
    try:
        sources = [int(s) for s in sources]
        destinations = [int(d) for d in destinations]
    except TypeError:
        raise TypeError("transfer: sources and destinations must be lists of ints") from None
    return _C.transfer(x, axis, sources, destinations)
