"""Placements: how a DTensor is laid out along each mesh dim (torch names)."""


class Placement:
    """Base class of Shard, Replicate and Partial."""

    def is_shard(self, dim=None):
        return False

    def is_replicate(self):
        return False

    def is_partial(self):
        return False


class Shard(Placement):
    """Tensor dim `dim` is split over the mesh dim (leading ranks get the
    ceil-sized pieces, as torch.chunk)."""

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
    """Every rank holds the whole tensor."""

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
    """Every rank holds a partial value; the tensor is their reduction."""

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
    kind, dim, op = raw
    if kind == "S":
        return Shard(dim)
    if kind == "R":
        return Replicate()
    return Partial(op)


def to_raw(placements, ndim_mesh):
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
