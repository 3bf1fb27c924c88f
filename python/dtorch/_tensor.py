"""The Python surface of dtorch.Tensor (the class itself is dtorch._C.Tensor).

A Tensor is a symbol: shape, dtype, mesh and placements are known at once;
values are fetched with numpy(), item(), tolist(), local_shards() (these wait).
"""
import numpy as np

from . import _C
from . import _async
from . import device_mesh as _dm
from . import profiler as _profiler
from ._printing import tensor_repr as _repr
from .placement_types import Placement

Tensor = _C.Tensor


def _placements(self):
    return _dm.mesh_of(self)._view_placements(self._placements_raw)


def _device_mesh(self):
    return _dm.mesh_of(self)


def _size(self, dim=None):
    if dim is None:
        return self.shape
    return self.shape[dim]


def _numel(self):
    return int(np.prod(self.shape)) if self.shape else 1


def _fetch(self):
    """The full value as numpy (bfloat16: an ml_dtypes.bfloat16 array)."""
    if _profiler._active is None:
        return _C.fetch(self)
    return _profiler._fetch_recorded(_C.fetch, self, "fetch")


def _numpy(self):
    return _fetch(self)


def _item(self):
    if _numel(self) != 1:
        raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
    return _fetch(self).reshape(()).item()


def _tolist(self):
    return _fetch(self).tolist()


def _to_torch(self):
    import torch
    if self.dtype == _C.dtype.bfloat16:
        return torch.from_numpy(_fetch(self).astype("float32")).to(torch.bfloat16)
    return torch.from_numpy(_fetch(self).copy())


def _local_shards(self):
    return _C.fetch_local(self)


def _redistribute(self, device_mesh=None, placements=None):
    mesh = device_mesh if device_mesh is not None else _dm.mesh_of(self)
    if placements is None:
        raise TypeError("redistribute() needs placements")
    raw = mesh._root_placements(placements, self.ndim)
    return _C.redistribute(self, mesh._mesh_id, raw, mesh._view)


def _requires_grad_get(self):
    return self._requires_grad


def _requires_grad_(self, flag=True):
    self._requires_grad = bool(flag)
    return self


def _bool(self):
    return bool(_item(self))


def _float(self):
    return float(_item(self))


def _len(self):
    if not self.shape:
        raise TypeError("len() of a 0-d tensor")
    return self.shape[0]


# ---- shape and cast methods with torch's signatures (the rest of the ----------
# ---- operator surface comes from the op registry: _ops.py) ----------------------
def _shape_args(args):
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return list(args[0])
    return list(args)


def _reshape(self, *shape):
    return _C.reshape(self, _shape_args(shape))


def _permute(self, *dims):
    return _C.permute(self, _shape_args(dims))


def _transpose(self, dim0, dim1):
    n = self.ndim
    perm = list(range(n))
    d0, d1 = dim0 % n if n else 0, dim1 % n if n else 0
    if not (-n <= dim0 < n and -n <= dim1 < n):
        raise ValueError(f"transpose: dims ({dim0}, {dim1}) out of range for rank {n}")
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _C.permute(self, perm)


def _t(self):
    if self.ndim > 2:
        raise ValueError("t() expects a tensor with <= 2 dims")
    return self if self.ndim < 2 else _C.permute(self, [1, 0])


def _unsqueeze(self, dim):
    n = self.ndim + 1
    if not -n <= dim < n:
        raise ValueError(f"unsqueeze: dim {dim} out of range for rank {self.ndim}")
    dim %= n
    shape = list(self.shape)
    shape.insert(dim, 1)
    return _C.reshape(self, shape)


def _squeeze(self, dim=None):
    shape = list(self.shape)
    if dim is None:
        new = [s for s in shape if s != 1]
    else:
        if not -max(self.ndim, 1) <= dim < max(self.ndim, 1):
            raise ValueError(f"squeeze: dim {dim} out of range for rank {self.ndim}")
        dim %= max(self.ndim, 1)
        new = shape[:dim] + shape[dim + 1:] if shape and shape[dim] == 1 else shape
    return _C.reshape(self, new)


def _flatten(self, start_dim=0, end_dim=-1):
    n = self.ndim
    if n == 0:
        return _C.reshape(self, [1])
    s, e = start_dim % n, end_dim % n
    shape = list(self.shape)
    return _C.reshape(self, shape[:s] + [int(np.prod(shape[s:e + 1]))] + shape[e + 1:])


def _expand(self, *sizes):
    sizes = _shape_args(sizes)
    lead = len(sizes) - self.ndim
    target = [self.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes)]
    return _C.broadcast_to(self, target)


def _to(self, *args, dtype=None, **kwargs):
    """x.to(dtype), x.to("cpu"), x.to(other_tensor): dtype conversion only."""
    for a in args:
        if isinstance(a, _C.dtype):
            dtype = a
        elif isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, str) and a != "cpu":
            raise ValueError(f"to({a!r}): dtorch tensors stay on their mesh's devices")
    return self if dtype is None else _C.cast(self, dtype)


def _install():
    T = Tensor
    T.placements = property(_placements)
    T.device_mesh = property(_device_mesh)
    T.requires_grad = property(_requires_grad_get)
    T.requires_grad_ = _requires_grad_
    T.size = _size
    T.numel = _numel
    T.dim = lambda self: self.ndim
    T.numpy = _numpy
    T.item = _item
    T.tolist = _tolist
    T.numpy_async = _async.numpy_async
    T.item_async = _async.item_async
    T.__await__ = _async.tensor_await
    T.to_torch = _to_torch
    T.local_shards = _local_shards
    T.redistribute = _redistribute
    T.__repr__ = _repr
    T.__str__ = _repr
    T.__bool__ = _bool
    T.__float__ = _float
    T.__len__ = _len
    T.reshape = _reshape
    T.view = _reshape
    T.permute = _permute
    T.transpose = _transpose
    T.t = _t
    T.unsqueeze = _unsqueeze
    T.squeeze = _squeeze
    T.flatten = _flatten
    T.expand = _expand
    T.to = _to
    T.float = lambda self: _C.cast(self, _C.dtype.float32)
    T.double = lambda self: _C.cast(self, _C.dtype.float64)
    T.long = lambda self: _C.cast(self, _C.dtype.int64)
    T.bool = lambda self: _C.cast(self, _C.dtype.bool)
    T.int = lambda self: _C.cast(self, _C.dtype.int32)
    T.half = lambda self: _C.cast(self, _C.dtype.float16)
    T.bfloat16 = lambda self: _C.cast(self, _C.dtype.bfloat16)
    T.broadcast_to = lambda self, shape: _C.broadcast_to(self, list(shape))
    T.__array_priority__ = 1000  # numpy scalars defer to our reflected operators


_install()


# ---- the shape functions under their torch names (dtorch.reshape, ...) ------------
def reshape(x, shape):
    return _reshape(x, shape)


def permute(x, dims):
    return _permute(x, dims)


def transpose(x, dim0, dim1):
    return _transpose(x, dim0, dim1)


def t(x):
    return _t(x)


def broadcast_to(x, shape):
    return _C.broadcast_to(x, list(shape))
