"""dtorch.distributed.tensor.experimental: context parallelism.

`ring_attention` computes scaled dot-product attention with the sequence
split over a ``"cp"`` mesh dim: each rank keeps its block of queries and
passes its key/value block around the ring (``dtensor.transfer``, lowered to
``rank.batch_send_recv`` on the communication stream), combining the blocks
it sees with an online softmax, so no rank ever holds the whole sequence's
keys, values or score matrix. With ``zigzag=True`` (for causal attention)
rank r holds chunks r and 2cp - 1 - r of 2cp chunks, which gives every rank
the same amount of unmasked work. The backward is the autograd of these
ops: gradients of the key/value blocks travel the ring the other way.
"""
import contextlib
import math

import numpy as np

import dtorch

from .... import _C
from ....device_mesh import mesh_of
from ....placement_types import Replicate, Shard
from ...._creation import distribute_tensor

__all__ = ["ring_attention", "context_parallel"]


def _cp_axis(mesh, mesh_dim):
    names = mesh.mesh_dim_names or ()
    if mesh_dim not in names:
        raise ValueError(f"ring_attention: the tensors' mesh has no dim named {mesh_dim!r} "
                         f"(it has {names})")
    index = names.index(mesh_dim)
    return index, mesh.shape[index]


def _positions(t_len, cp, zigzag):
    """The sequence positions each rank holds, in its local order."""
    if not zigzag:
        return np.arange(t_len).reshape(cp, t_len // cp)
    chunk = t_len // (2 * cp)
    chunks = np.arange(t_len).reshape(2 * cp, chunk)
    return np.stack([np.concatenate([chunks[r], chunks[2 * cp - 1 - r]]) for r in range(cp)])


def ring_attention(q, k, v, mesh_dim="cp", is_causal=False, zigzag=None):
    """``softmax(q kᵀ / sqrt(d)) v`` with the sequence split over `mesh_dim`.

    Args:
        q, k, v (Tensor): ``[B, H, T, D]`` on a mesh with a dim named
            `mesh_dim`; their layout is changed to the split as needed
            (dim 2 over `mesh_dim`, Replicate on the mesh's other dims).
        mesh_dim (str): the context-parallel dim.
        is_causal (bool): position i attends to positions <= i.
        zigzag (bool, optional): the load-balanced split (chunks r and
            2cp - 1 - r on rank r); by default on for causal attention.

    Returns:
        Tensor: ``[B, H, T, D]``, dim 2 split over `mesh_dim` (contiguous
        blocks, in the original order).

    Raises:
        ValueError: T is not divisible by cp (or by 2cp for the zig-zag
            split), the shapes differ, or the mesh has no such dim; with the
            numbers.

    Example:
        >>> import numpy as np
        >>> import dtorch
        >>> from dtorch.distributed.tensor.experimental import ring_attention
        >>> mesh = dtorch.init_device_mesh("cpu", (4,), mesh_dim_names=("cp",))
        >>> x = dtorch.distribute_tensor(np.ones((1, 1, 8, 2), np.float32), mesh, [dtorch.Replicate()])
        >>> ring_attention(x, x, x, is_causal=True).numpy()[0, 0, :2].tolist()
        [[1.0, 1.0], [1.0, 1.0]]
        >>> ring_attention(x, x, x, is_causal=True, zigzag=True).shape
        (1, 1, 8, 2)
    """
    mesh = mesh_of(q)
    axis, cp = _cp_axis(mesh, mesh_dim)
    if tuple(q.shape) != tuple(k.shape) or tuple(q.shape) != tuple(v.shape) or q.ndim != 4:
        raise ValueError(f"ring_attention: q, k, v must be [B, H, T, D] of one shape, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    b, h, t_len, d = q.shape
    zigzag = is_causal if zigzag is None else zigzag
    parts = 2 * cp if zigzag else cp
    if t_len % parts:
        raise ValueError(f"ring_attention: a sequence of {t_len} does not split into "
                         f"{parts} {'zig-zag chunks (2 per rank)' if zigzag else 'blocks'} "
                         f"over {cp} ranks of {mesh_dim!r} ({t_len} % {parts} = {t_len % parts})")
    t = t_len // cp
    pos = _positions(t_len, cp, zigzag)  # [cp, t]
    blocks = [Replicate()] * mesh.ndim
    blocks[axis] = Shard(2)

    def to_blocks(x):
        # [B, H, T, D] -> [B, H, cp, t, D] in the split's order, dim 2 on cp
        if zigzag:
            order = distribute_tensor(pos.reshape(-1).astype(np.int64), mesh,
                                      [Replicate()] * mesh.ndim)
            x = dtorch.index_select(x, 2, order)
        x = x.redistribute(mesh, blocks)
        return x.reshape(b, h, cp, t, d)

    qb, kb, vb = to_blocks(q), to_blocks(k), to_blocks(v)
    scale = 1.0 / math.sqrt(d)
    ring_src = list(range(cp))
    ring_dst = [(c + 1) % cp for c in range(cp)]
    mask_placements = [Replicate()] * mesh.ndim
    mask_placements[axis] = Shard(0)
    m = l = o = None
    for step in range(cp):
        s = (qb @ kb.transpose(-1, -2)) * scale  # [B, H, cp, t, t]
        if is_causal:
            # block c now holds the keys of rank (c - step) % cp
            src = [(c - step) % cp for c in range(cp)]
            blocked = pos[:, :, None] < pos[src][:, None, :]  # [cp, t, t]
            s = s.masked_fill(distribute_tensor(blocked, mesh, mask_placements), -1e30)
        row_max = dtorch.amax(s, -1, keepdim=True)
        m_new = row_max if m is None else dtorch.maximum(m, row_max)
        p = (s - m_new).exp()
        if m is None:
            l, o = p.sum(-1, keepdim=True), p @ vb
        else:
            corr = (m - m_new).exp()
            l = l * corr + p.sum(-1, keepdim=True)
            o = o * corr + p @ vb
        m = m_new
        if step < cp - 1:  # pass the key/value blocks on around the ring
            kb = _C.transfer(kb, _root_axis(mesh, axis), ring_src, ring_dst)
            vb = _C.transfer(vb, _root_axis(mesh, axis), ring_src, ring_dst)
    out = (o / l).reshape(b, h, t_len, d)
    if zigzag:
        inverse = np.argsort(pos.reshape(-1)).astype(np.int64)
        out = dtorch.index_select(out, 2, distribute_tensor(inverse, mesh,
                                                          [Replicate()] * mesh.ndim))
        out = out.redistribute(mesh, blocks)
    return out


def _root_axis(mesh, index):
    group = mesh._groups[index]
    if len(group) != 1:
        raise ValueError("ring_attention: the cp dim joins several dims of the root mesh")
    return group[0]


@contextlib.contextmanager
def context_parallel(mesh, buffers=(), seq_dims=(), no_restore_buffers=()):
    """Within the block, ``F.scaled_dot_product_attention`` of tensors on
    `mesh`'s root mesh runs as `ring_attention` over `mesh` (a 1-D view,
    ``mesh["cp"]``), as torch's ``context_parallel``.

    Each of `buffers` is laid out in place with ``Shard(seq_dims[i])`` on
    the cp dim for the block (values stay global: the split is a layout, so
    nothing is reordered as seen from Python) and gets its layout back on
    exit, unless it is in `no_restore_buffers`. Attention with an
    ``attn_mask``, dropout or a custom ``scale`` keeps the ordinary
    computation.

    Args:
        mesh (DeviceMesh): a 1-D view of one mesh dim.
        buffers (list[Tensor]): tensors to split along their sequence dim.
        seq_dims (list[int]): each buffer's sequence dim.
        no_restore_buffers (iterable[Tensor]): buffers left split.

    Raises:
        ValueError: buffers and seq_dims differ in length, or the mesh is not
            a 1-D view.

    Example:
        >>> import numpy as np
        >>> import dtorch
        >>> import dtorch.nn.functional as F
        >>> from dtorch.distributed.tensor.experimental import context_parallel
        >>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "cp"))
        >>> q = dtorch.distribute_tensor(np.ones((1, 2, 8, 4), np.float32), mesh, [dtorch.Replicate()] * 2)
        >>> with context_parallel(mesh["cp"], buffers=[q], seq_dims=[2]):
        ...     print(q.placements, q.device_mesh.mesh_dim_names)
        ...     out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        (Shard(dim=2),) ('cp',)
        >>> q.placements, out.shape
        ((Replicate(), Replicate()), (1, 2, 8, 4))
    """
    from ... import _layout
    from ....nn import functional as F_module
    buffers, seq_dims = list(buffers), list(seq_dims)
    if len(buffers) != len(seq_dims):
        raise ValueError(f"context_parallel: {len(buffers)} buffers but {len(seq_dims)} "
                         f"seq_dims")
    if mesh.ndim != 1 or len(mesh._groups[0]) != 1:
        raise ValueError("context_parallel: mesh must be a 1-D view of one mesh dim, "
                         "e.g. mesh['cp']")
    name = mesh.mesh_dim_names[0]
    keep = {id(b) for b in no_restore_buffers}
    saved = []
    for buf, dim in zip(buffers, seq_dims):
        saved.append((buf, mesh_of(buf), buf.placements))
        _layout.relayout_(buf, mesh, [Shard(dim % buf.ndim)])
    original = F_module.scaled_dot_product_attention

    def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                  scale=None, **kwargs):
        if (attn_mask is None and not dropout_p and scale is None and not kwargs
                and query.ndim == 4 and query._mesh_id == mesh._mesh_id):
            return ring_attention(query, key, value, mesh_dim=name, is_causal=is_causal)
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale, **kwargs)

    F_module.scaled_dot_product_attention = attention
    try:
        yield
    finally:
        F_module.scaled_dot_product_attention = original
        for buf, buf_mesh, placements in saved:
            if id(buf) not in keep:
                _layout.relayout_(buf, buf_mesh, list(placements), keep_others=False)
