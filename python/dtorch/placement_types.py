"""Placements: how a tensor is laid out along each dim of its device mesh.

A tensor on an N-dim mesh has N placements, one per mesh dim, with the names
and meanings of torch.distributed.tensor: `Shard`, `Replicate`, `Partial`.
"""


class Placement:
    """Base class of `Shard`, `Replicate` and `Partial`.

    Use it in ``isinstance`` checks; lay tensors out with its subclasses.

    Example:
        >>> from dtorch import Placement, Shard
        >>> isinstance(Shard(0), Placement)
        True
    """

    def is_shard(self, dim=None):
        """Whether this placement shards a tensor dim.

        Args:
            dim: if given, whether it shards this particular tensor dim.

        Returns:
            bool: False for every placement but `Shard`.

        Example:
            >>> from dtorch import Shard, Replicate
            >>> Shard(1).is_shard(), Shard(1).is_shard(0), Replicate().is_shard()
            (True, False, False)
        """
        return False

    def is_replicate(self):
        """Whether this placement is `Replicate`.

        Example:
            >>> from dtorch import Replicate, Partial
            >>> Replicate().is_replicate(), Partial().is_replicate()
            (True, False)
        """
        return False

    def is_partial(self):
        """Whether this placement is `Partial` (of any reduce op).

        Example:
            >>> from dtorch import Partial, Shard
            >>> Partial("max").is_partial(), Shard(0).is_partial()
            (True, False)
        """
        return False


class Shard(Placement):
    """Tensor dim ``dim`` is split over the ranks along the mesh dim.

    The pieces follow ``torch.chunk``: each holds ``ceil(size / n)`` elements
    until the dim runs out, so a 7-row tensor over 2 ranks is split 4 + 3 and
    a 5-row tensor over 4 ranks 2 + 2 + 1 + 0. A negative ``dim`` counts from
    the last dim of the tensor it is applied to. When several mesh dims shard
    the same tensor dim, the leftmost mesh dim splits first.

    Args:
        dim (int): the tensor dim to split.

    Raises:
        TypeError: ``dim`` is not an int. (A dim that the tensor does not have
            raises ValueError when the placement is used.)

    Example:
        >>> import numpy as np
        >>> import dtorch
        >>> from dtorch import Shard
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> x = dtorch.tensor(np.arange(14.0).reshape(7, 2), device_mesh=mesh,
        ...                   placements=[Shard(0)])
        >>> {rank: piece.shape for rank, piece in x.local_shards().items()}
        {0: (4, 2), 1: (3, 2)}
    """

    __slots__ = ("dim",)

    def __init__(self, dim):
        if not isinstance(dim, int):
            raise TypeError(f"Shard(dim) needs an int dim, got {type(dim).__name__}")
        self.dim = dim

    def is_shard(self, dim=None):
        return dim is None or dim == self.dim

    def _raw(self):
        return ("S", self.dim, "")

    def __eq__(self, other):
        return isinstance(other, Shard) and other.dim == self.dim

    def __hash__(self):
        return hash(("S", self.dim))

    def __repr__(self):
        return f"Shard(dim={self.dim})"


class Replicate(Placement):
    """Every rank along the mesh dim holds the whole tensor.

    This is the default placement of every creation function.

    Example:
        >>> import dtorch
        >>> from dtorch import Replicate
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> x = dtorch.ones(3, device_mesh=mesh, placements=[Replicate()])
        >>> [piece.tolist() for piece in x.local_shards().values()]
        [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    """

    def is_replicate(self):
        return True

    def _raw(self):
        return ("R", 0, "")

    def __eq__(self, other):
        return isinstance(other, Replicate)

    def __hash__(self):
        return hash("R")

    def __repr__(self):
        return "Replicate()"


class Partial(Placement):
    """Every rank along the mesh dim holds a value of the full shape, and the
    tensor is the element-wise reduction of those values.

    Partial tensors usually come out of ops: a matmul that contracts a
    sharded dim, or a sum over a sharded dim, gives ``Partial("sum")``.
    Reading the tensor, redistributing it, or an op that is not linear
    reduces the pieces.

    Args:
        reduce_op (str): ``"sum"`` (default), ``"avg"``, ``"max"`` or ``"min"``.

    Raises:
        ValueError: any other ``reduce_op``.

    Example:
        >>> import dtorch
        >>> from dtorch import Shard
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> a = dtorch.ones(3, 4, device_mesh=mesh, placements=[Shard(1)])
        >>> b = dtorch.ones(4, 2, device_mesh=mesh, placements=[Shard(0)])
        >>> c = a @ b
        >>> c.placements
        (Partial(sum),)
        >>> c.numpy().tolist()
        [[4.0, 4.0], [4.0, 4.0], [4.0, 4.0]]
    """

    __slots__ = ("reduce_op",)
    _OPS = ("sum", "avg", "max", "min")

    def __init__(self, reduce_op="sum"):
        if reduce_op not in self._OPS:
            raise ValueError(f"Partial reduce_op must be one of {self._OPS}, got {reduce_op!r}")
        self.reduce_op = reduce_op

    def is_partial(self):
        return True

    def _raw(self):
        return ("P", 0, self.reduce_op)

    def __eq__(self, other):
        return isinstance(other, Partial) and other.reduce_op == self.reduce_op

    def __hash__(self):
        return hash(("P", self.reduce_op))

    def __repr__(self):
        return f"Partial({self.reduce_op})"


def from_raw(raw):
    """The placement object for the extension's ``(kind, dim, op)`` triple.

    Example:
        >>> from_raw(("S", 1, ""))
        Shard(dim=1)
    """
    kind, dim, op = raw
    if kind == "S":
        return Shard(dim)
    if kind == "R":
        return Replicate()
    return Partial(op)


def to_raw(placements, ndim_mesh):
    """Checks a placement list for a mesh of ``ndim_mesh`` dims and returns it
    as the extension's ``(kind, dim, op)`` triples.

    Raises:
        TypeError: an entry is not a placement.
        ValueError: the list does not have one entry per mesh dim.

    Example:
        >>> to_raw([Shard(0), Replicate()], 2)
        [('S', 0, ''), ('R', 0, '')]
    """
    if isinstance(placements, Placement):
        placements = [placements]
    try:
        placements = list(placements)
    except TypeError:
        raise TypeError("placements must be a sequence of Shard/Replicate/Partial") from None
    for p in placements:
        if not isinstance(p, Placement):
            raise TypeError(f"placements must be Shard, Replicate or Partial objects, got {p!r}")
    if len(placements) != ndim_mesh:
        raise ValueError(
            f"expected {ndim_mesh} placements (one per mesh dim), got {len(placements)}")
    return [p._raw() for p in placements]
