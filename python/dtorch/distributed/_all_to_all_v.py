"""all_to_all with data-dependent counts over one mesh dim, with static
shapes: the exchange an MoE dispatch and combine are made of."""
from .. import autograd as _autograd


def _root_axis(mesh, mesh_dim):
    """The root mesh dim of `mesh_dim` (a name or an index of `mesh`)."""
    names = tuple(mesh.mesh_dim_names or ())
    if isinstance(mesh_dim, str):
        if mesh_dim not in names:
            raise ValueError(f"all_to_all_v: the mesh has no dim named {mesh_dim!r} "
                             f"(it has {names})")
        index = names.index(mesh_dim)
    elif isinstance(mesh_dim, int) and not isinstance(mesh_dim, bool):
        if not -mesh.ndim <= mesh_dim < mesh.ndim:
            raise ValueError(f"all_to_all_v: mesh dim {mesh_dim} is out of range for a "
                             f"mesh of {mesh.ndim} dims")
        index = mesh_dim % mesh.ndim
    else:
        raise TypeError(f"all_to_all_v: mesh_dim must be a name or an int, got {mesh_dim!r}")
    group = mesh._groups[index]
    if len(group) != 1:
        raise ValueError(f"all_to_all_v: mesh dim {mesh_dim!r} joins several dims of the "
                         "root mesh; exchange along one of them")
    return group[0]


def all_to_all_v(x, counts, mesh_dim, device_mesh=None):
    """Exchanges counted rows of fixed slots among the n positions of one
    mesh dim (``dtensor.all_to_all_v``; torch's ``all_to_all_single`` with
    split sizes, with every shape static).

    Args:
        x (Tensor): ``[n, n * S * C, ...]``: row block i belongs to position
            i and holds n * S segments of C rows, segment ``(j, s)`` bound
            for position j.
        counts (Tensor): int64 ``[n, n * S]``: ``counts[i, j * S + s]`` rows
            (at most C) of segment ``(j, s)`` of block i are real; they are
            the only rows that move.
        mesh_dim (str or int): the mesh dim of the exchange.
        device_mesh (DeviceMesh, optional): the mesh `mesh_dim` names a dim
            of (by default x's).

    Returns:
        Tensor: x's shape; block j holds in its segment ``(i, s)`` the first
        ``counts[i, j * S + s]`` rows of x's segment ``(j, s)`` of block i,
        zeros after them. It is ``Shard(0)`` on `mesh_dim` (x and counts
        are laid out so first). Gradients flow to x: the same exchange of
        the result's gradient with the counts transposed.

    Raises:
        ValueError: shapes that do not split as above (with the numbers), an
            unknown mesh dim. TypeError: counts not int64.

    Example:
        >>> import dtorch
        >>> from dtorch.distributed import all_to_all_v
        >>> mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("ep",))
        >>> x = dtorch.arange(8.0, device_mesh=mesh).reshape(2, 4, 1)
        >>> counts = dtorch.tensor([[2, 1], [0, 2]], device_mesh=mesh)
        >>> all_to_all_v(x, counts, "ep").reshape(2, 4).numpy().tolist()
        [[0.0, 1.0, 0.0, 0.0], [2.0, 0.0, 6.0, 7.0]]
    """
    mesh = device_mesh if device_mesh is not None else x.device_mesh
    return _autograd.all_to_all_v(x, counts, _root_axis(mesh, mesh_dim))
