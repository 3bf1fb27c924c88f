"""Embedding."""
from ... import _C
from .. import functional as F
from .. import init
from .._grad import no_grad
from .._placement import factory
from ..parameter import Parameter
from .module import Module


class Embedding(Module):
    """A lookup table [num_embeddings, embedding_dim], N(0, 1) as torch's
    (the row ``padding_idx``, if given, zero).

    Args:
        num_embeddings, embedding_dim (int): sizes.
        padding_idx (int, optional): a row initialised to zeros.
        device_mesh, placements, dtype: as for `Linear`; ``[Shard(0)]``
            shards the vocabulary (lookups then give Partial results that
            reduce where they are used).
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, device=None, dtype=None, *, device_mesh=None, placements=None):
        super().__init__()
        if max_norm is not None or sparse or scale_grad_by_freq:
            raise NotImplementedError("Embedding: max_norm, sparse and scale_grad_by_freq "
                                      "are not supported")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        make = factory(device_mesh, placements, dtype, device)
        if _weight is None:
            self.weight = Parameter(make("weight", (num_embeddings, embedding_dim)),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError("Shape of weight does not match num_embeddings and "
                                 "embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None and not self.weight.is_meta:
            w = self.weight
            rows = _C.iota([w.shape[0], 1], 0, 0.0, 1.0, _C.dtype.int64, w._mesh_id,
                           [("R", 0, "")] * len(w._placements_raw), w._view)
            with no_grad():
                w._assign(_C.where(_C.compare("eq", rows, self.padding_idx, False), 0.0, w))

    def forward(self, input):  # noqa: A002
        return F.embedding(input, self.weight)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s
