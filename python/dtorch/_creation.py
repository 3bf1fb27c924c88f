"""Creation functions: randn, zeros, tensor, distribute_tensor, ..."""
import numpy as np

from . import _C
from . import device_mesh as _dm
from .placement_types import Replicate

_NP_OF = {}


def _np_dtype(dt):
    if not _NP_OF:
        _NP_OF.update({_C.dtype.float32: np.float32, _C.dtype.float64: np.float64,
                       _C.dtype.float16: np.float16, _C.dtype.int32: np.int32,
                       _C.dtype.int64: np.int64, _C.dtype.bool: np.bool_})
    if dt not in _NP_OF:
        raise TypeError(f"dtype {dt} has no numpy equivalent here")
    return _NP_OF[dt]


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    for s in size:
        if not isinstance(s, (int, np.integer)):
            raise TypeError(f"sizes must be ints, got {type(s).__name__}")
    return [int(s) for s in size]


def _target(device_mesh, placements, ndim):
    mesh = device_mesh if device_mesh is not None else _dm.default_mesh()
    if not isinstance(mesh, _dm.DeviceMesh):
        raise TypeError(f"device_mesh must be a DeviceMesh, got {type(mesh).__name__}")
    if placements is None:
        placements = [Replicate()] * mesh.ndim
    return mesh, mesh._root_placements(placements, ndim)


def _default_dtype(dtype):
    return _C.dtype.float32 if dtype is None else dtype


def _make(kind, size, value, device_mesh, placements, dtype, requires_grad):
    shape = _shape(size)
    mesh, raw = _target(device_mesh, placements, len(shape))
    dt = _default_dtype(dtype)
    if kind == "full":
        t = _C.full(shape, float(value), dt, mesh._mesh_id, raw, mesh._view)
    else:
        t = _C.random(shape, kind == "normal", dt, mesh._mesh_id, raw, mesh._view)
    t._requires_grad = bool(requires_grad)
    return t


def randn(*size, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    return _make("normal", size, 0, device_mesh, placements, dtype, requires_grad)


def rand(*size, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    return _make("uniform", size, 0, device_mesh, placements, dtype, requires_grad)


def zeros(*size, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    return _make("full", size, 0.0, device_mesh, placements, dtype, requires_grad)


def ones(*size, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    return _make("full", size, 1.0, device_mesh, placements, dtype, requires_grad)


def empty(*size, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    return _make("full", size, 0.0, device_mesh, placements, dtype, requires_grad)


def full(size, fill_value, *, device_mesh=None, placements=None, dtype=None,
         requires_grad=False):
    if dtype is None and isinstance(fill_value, (int, np.integer)) and not isinstance(fill_value, bool):
        dtype = _C.dtype.int64
    return _make("full", (tuple(size),), fill_value, device_mesh, placements, dtype,
                 requires_grad)


def zeros_like(x, *, dtype=None, requires_grad=False):
    return _like(x, 0.0, dtype, requires_grad)


def ones_like(x, *, dtype=None, requires_grad=False):
    return _like(x, 1.0, dtype, requires_grad)


def _like(x, value, dtype, requires_grad):
    placements = [p if not p.is_partial() else Replicate() for p in x.placements]
    return _make("full", (tuple(x.shape),), value, x.device_mesh, placements,
                 dtype or x.dtype, requires_grad)


def tensor(data, *, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    """data: a list, numpy array or torch tensor (its full global value)."""
    if hasattr(data, "detach") and hasattr(data, "numpy"):
        data = data.detach().cpu().numpy()
    arr = np.asarray(data)
    if dtype is not None:
        arr = arr.astype(_np_dtype(dtype))
    elif arr.dtype == np.float64 and not isinstance(data, np.ndarray):
        arr = arr.astype(np.float32)  # Python floats become float32, as in torch
    elif arr.dtype.kind == "f" and arr.dtype not in (np.float32, np.float64, np.float16):
        arr = arr.astype(np.float32)
    elif arr.dtype.kind in "iu" and arr.dtype not in (np.int32, np.int64):
        arr = arr.astype(np.int64)
    arr = np.ascontiguousarray(arr)
    mesh, raw = _target(device_mesh, placements, arr.ndim)
    t = _C.from_numpy(arr, mesh._mesh_id, raw, mesh._view)
    t._requires_grad = bool(requires_grad)
    return t


def distribute_tensor(tensor_data, device_mesh=None, placements=None):
    """Places a full value (numpy, list or torch) on the mesh, as torch's
    distribute_tensor."""
    return tensor(tensor_data, device_mesh=device_mesh, placements=placements,
                  dtype=None if not isinstance(tensor_data, np.ndarray) else None)


def arange(start, end=None, step=1, *, device_mesh=None, placements=None, dtype=None,
           requires_grad=False):
    if end is None:
        start, end = 0, start
    values = np.arange(start, end, step)
    if dtype is None:
        dtype = _C.dtype.int64 if values.dtype.kind in "iu" else _C.dtype.float32
    return tensor(values, device_mesh=device_mesh, placements=placements, dtype=dtype,
                  requires_grad=requires_grad)


def eye(n, m=None, *, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    return tensor(np.eye(n, m), device_mesh=device_mesh, placements=placements,
                  dtype=dtype or _C.dtype.float32, requires_grad=requires_grad)
