"""In-place updates of symbolic tensors: `Tensor._assign` and torch's
`copy_`, `zero_`, `fill_`, `mul_`, `add_`, `sub_`, `div_` built on it.

A tensor is a name for a value on the workers. `x._assign(v)` makes `x`
name `v` (after redistributing `v` to `x`'s placements), so every holder of
the Python object `x` (a module, an optimizer) sees the new value; the old
value is freed on the workers once no pending op reads it. Nothing waits.
"""
import numpy as np

from . import _C

Tensor = _C.Tensor


def _check_inplace(self, name):
    """torch refuses in-place updates of a leaf that requires grad while
    grad mode is on."""
    from .autograd import is_grad_enabled
    if is_grad_enabled() and self.requires_grad and self.is_leaf:
        raise RuntimeError(f"{name}: a leaf tensor that requires grad is being used in an "
                           "in-place operation (wrap it in dtorch.no_grad())")


def _assign(self, value):
    """Makes this tensor name `value` (same shape, dtype and mesh; the value is
    redistributed to this tensor's placements). Returns self."""
    if not isinstance(value, Tensor):
        raise TypeError(f"_assign expects a dtorch.Tensor, got {type(value).__name__}")
    _C.assign(self, value)
    return self


def _as_value(self, src):
    """`src` (a tensor, number, numpy array, list or torch tensor) as a tensor
    of self's dtype, shape, mesh and placements."""
    if isinstance(src, Tensor):
        if src._mesh_id != self._mesh_id:
            from ._creation import tensor
            src = tensor(src.numpy(), device_mesh=self.device_mesh,
                         placements=self.placements, dtype=self.dtype)
        if src.dtype != self.dtype:
            src = _C.cast(src, self.dtype)
        if tuple(src.shape) != tuple(self.shape):
            src = _C.broadcast_to(src, list(self.shape))
        return src
    if isinstance(src, (bool, int, float, np.number)):
        return _C.full(list(self.shape), float(src), self.dtype, self._mesh_id,
                       _replicate_partials(self), self._view)
    from ._creation import tensor
    if hasattr(src, "detach") and hasattr(src, "numpy"):  # a torch tensor
        src = src.detach().cpu()
        if str(src.dtype) == "torch.bfloat16":
            src = src.float()
        src = src.numpy()
    arr = np.asarray(src)
    if arr.shape != tuple(self.shape):
        arr = np.broadcast_to(arr, tuple(self.shape))
    return tensor(np.ascontiguousarray(arr), device_mesh=self.device_mesh,
                  placements=[p if not p.is_partial() else _rep() for p in self.placements],
                  dtype=self.dtype)


def _rep():
    from .placement_types import Replicate
    return Replicate()


def _replicate_partials(x):
    return [("R", 0, "") if k == "P" else (k, d, o) for k, d, o in x._placements_raw]


def copy_(self, src, non_blocking=False):
    """Copies `src` into this tensor (broadcast and cast as torch does)."""
    _check_inplace(self, "copy_")
    return _assign(self, _as_value(self, src))


def zero_(self):
    _check_inplace(self, "zero_")
    return _assign(self, _as_value(self, 0.0))


def fill_(self, value):
    _check_inplace(self, "fill_")
    return _assign(self, _as_value(self, value))


def _update(name, op):
    def method(self, other, *, alpha=None):
        _check_inplace(self, name)
        if alpha is not None and alpha != 1:
            other = other * alpha
        out = op(self, other)
        if out.dtype != self.dtype:
            raise RuntimeError(f"{name}: result type {out.dtype} can't be cast to the "
                               f"desired output type {self.dtype}")
        if tuple(out.shape) != tuple(self.shape):
            raise RuntimeError(f"{name}: output with shape {tuple(self.shape)} doesn't match "
                               f"the broadcast shape {tuple(out.shape)}")
        return _assign(self, out)
    method.__name__ = name
    method.__doc__ = f"In-place {name[:-1]}: this tensor names the result (see _assign)."
    return method


add_ = _update("add_", lambda a, b: a + b)
sub_ = _update("sub_", lambda a, b: a - b)
mul_ = _update("mul_", lambda a, b: a * b)
div_ = _update("div_", lambda a, b: a / b)


def __deepcopy__(self, memo):
    """A deep copy is another name for the same (immutable) value."""
    if id(self) not in memo:
        copy = _C.alias(self)
        copy._requires_grad = self._requires_grad
        memo[id(self)] = copy
    return memo[id(self)]


def _install():
    Tensor.__deepcopy__ = __deepcopy__
    Tensor._assign = _assign
    Tensor.copy_ = copy_
    Tensor.zero_ = zero_
    Tensor.fill_ = fill_
    Tensor.add_ = add_
    Tensor.sub_ = sub_
    Tensor.mul_ = mul_
    Tensor.div_ = div_


_install()
