"""Creation functions with torch's names: zeros, ones, full, randn, tensor,
distribute_tensor, ...

Each takes the global shape (or the global data) and the keyword arguments
``device_mesh``, ``placements``, ``dtype`` and ``requires_grad``. None of them
waits for the workers: the tensor is a symbol whose metadata is known at once.
"""
import math

import numpy as np

from . import _C
from . import device_mesh as _dm
from .placement_types import Replicate


# The paragraphs that the creation functions' docstrings share, written
# once: a docstring names them as {size}, {mesh}, {dtype}, {returns},
# {raises} or {shaped_args}, and `_shared_docs` fills them in when the
# function is defined.
_DOC_PIECES = {
    "size": "*size (int): the global shape, as separate ints or one sequence.",
    "mesh": """device_mesh (DeviceMesh, optional): the mesh; by default every rank
            of the world as a 1-D mesh.
        placements (list[Placement], optional): one per mesh dim; by default
            `Replicate` on every dim.""",
    "dtype": """dtype (dtorch.dtype, optional): by default ``dtorch.float32``.
        requires_grad (bool): recorded on the tensor, as in torch.""",
    "returns": """Returns:
        Tensor: the new tensor; nothing waits for the workers.""",
    "raises": """Raises:
        TypeError: a size is not an int, or a placement is not a placement.
        ValueError: the placements do not fit the mesh or the shape.""",
}
# The whole Args, Returns and Raises of the creators taking *size.
_DOC_PIECES["shaped_args"] = """Args:
        {size}
        {mesh}
        {dtype}

    {returns}

    {raises}""".format(**_DOC_PIECES)


def _shared_docs(fn):
    if fn.__doc__:  # None under python -OO
        fn.__doc__ = fn.__doc__.format(**_DOC_PIECES)
    return fn


_NP_OF = {}


def _np_dtype(dt):
    if not _NP_OF:
        _NP_OF.update({_C.dtype.float32: np.float32, _C.dtype.float64: np.float64,
                       _C.dtype.float16: np.float16, _C.dtype.int32: np.int32,
                       _C.dtype.int64: np.int64, _C.dtype.bool: np.bool_})
        try:
            import ml_dtypes
            _NP_OF[_C.dtype.bfloat16] = ml_dtypes.bfloat16
        except ImportError:  # bfloat16 data then needs ml_dtypes
            pass
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


@_shared_docs
def randn(*size, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    """A tensor of samples of the standard normal distribution.

    The value of each element depends only on the seed (`dtorch.manual_seed`)
    and the element's global position, never on the placements.

    {shaped_args}

    Example:
        >>> import dtorch
        >>> from dtorch import Shard, Replicate
        >>> mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        >>> x = dtorch.randn(8, 16, device_mesh=mesh, placements=[Shard(0), Replicate()])
        >>> x.shape, x.placements
        ((8, 16), (Shard(dim=0), Replicate()))
    """
    return _make("normal", size, 0, device_mesh, placements, dtype, requires_grad)


@_shared_docs
def rand(*size, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    """A tensor of samples of the uniform distribution on [0, 1).

    Like `randn`, the values do not depend on the placements.

    {shaped_args}

    Example:
        >>> import dtorch
        >>> x = dtorch.rand(1000)
        >>> bool(((x.numpy() >= 0) & (x.numpy() < 1)).all())
        True
    """
    return _make("uniform", size, 0, device_mesh, placements, dtype, requires_grad)


@_shared_docs
def zeros(*size, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    """A tensor filled with 0.

    {shaped_args}

    Example:
        >>> import dtorch
        >>> from dtorch import Shard
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> dtorch.zeros(2, 3, device_mesh=mesh, placements=[Shard(1)]).tolist()
        [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    """
    return _make("full", size, 0.0, device_mesh, placements, dtype, requires_grad)


@_shared_docs
def ones(*size, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    """A tensor filled with 1.

    {shaped_args}

    Example:
        >>> import dtorch
        >>> dtorch.ones((2, 2), dtype=dtorch.int64).tolist()
        [[1, 1], [1, 1]]
    """
    return _make("full", size, 1.0, device_mesh, placements, dtype, requires_grad)


@_shared_docs
def empty(*size, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    """A tensor whose values are not specified, as torch's ``empty``.

    Write it before reading it; do not rely on the values it starts with.

    {shaped_args}

    Example:
        >>> import dtorch
        >>> dtorch.empty(3, 4).shape
        (3, 4)
    """
    return _make("full", size, 0.0, device_mesh, placements, dtype, requires_grad)


@_shared_docs
def full(size, fill_value, *, device_mesh=None, placements=None, dtype=None,
         requires_grad=False):
    """A tensor filled with ``fill_value``.

    Args:
        size (tuple[int, ...]): the global shape.
        fill_value (int, float or bool): the value of every element.
        {mesh}
        dtype (dtorch.dtype, optional): by default ``dtorch.int64`` for an int
            ``fill_value`` and ``dtorch.float32`` otherwise, as in torch.
        requires_grad (bool): recorded on the tensor, as in torch.

    Returns:
        Tensor: the new tensor.

    {raises}

    Example:
        >>> import dtorch
        >>> dtorch.full((2,), 7).tolist(), dtorch.full((2,), 0.5).dtype == dtorch.float32
        ([7, 7], True)
    """
    if dtype is None and isinstance(fill_value, (int, np.integer)) and not isinstance(fill_value, bool):
        dtype = _C.dtype.int64
    return _make("full", (tuple(size),), fill_value, device_mesh, placements, dtype,
                 requires_grad)


def zeros_like(x, *, dtype=None, requires_grad=False):
    """A tensor of zeros with the shape, mesh, dtype and placements of ``x``
    (`Replicate` where ``x`` is `Partial`).

    Args:
        x (Tensor): the model tensor.
        dtype (dtorch.dtype, optional): another dtype.
        requires_grad (bool): recorded on the tensor.

    Example:
        >>> import dtorch
        >>> from dtorch import Shard
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> z = dtorch.zeros_like(dtorch.ones(4, 2, device_mesh=mesh, placements=[Shard(0)]))
        >>> z.placements, float(z.numpy().sum())
        ((Shard(dim=0),), 0.0)
    """
    return _like(x, 0.0, dtype, requires_grad)


def ones_like(x, *, dtype=None, requires_grad=False):
    """A tensor of ones with the shape, mesh, dtype and placements of ``x``
    (`Replicate` where ``x`` is `Partial`).

    Args:
        x (Tensor): the model tensor.
        dtype (dtorch.dtype, optional): another dtype.
        requires_grad (bool): recorded on the tensor.

    Example:
        >>> import dtorch
        >>> dtorch.ones_like(dtorch.zeros(3), dtype=dtorch.int64).tolist()
        [1, 1, 1]
    """
    return _like(x, 1.0, dtype, requires_grad)


def _like(x, value, dtype, requires_grad):
    placements = [p if not p.is_partial() else Replicate() for p in x.placements]
    return _make("full", (tuple(x.shape),), value, x.device_mesh, placements,
                 dtype or x.dtype, requires_grad)


# The dtypes a batch usually has: known not to be bfloat16 without asking
# numpy for the dtype's name (a Python-level property, ~2 us).
_NOT_BFLOAT16 = frozenset(np.dtype(t) for t in (np.float32, np.float64, np.float16, np.int64,
                                                np.int32, np.int16, np.int8, np.uint8,
                                                np.bool_))


def _is_bfloat16(dt):
    return dt not in _NOT_BFLOAT16 and dt.name == "bfloat16"


def tensor(data, *, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    """A tensor with the given global value, laid out on a mesh.

    Args:
        data: the full global value: a number, a nested list, a numpy array
            or a torch tensor.
        device_mesh (DeviceMesh, optional): the mesh; by default every rank
            of the world as a 1-D mesh.
        placements (list[Placement], optional): one per mesh dim; by default
            `Replicate` on every dim. With `Partial`, the value is the
            reduction of what the ranks hold (for ``"sum"``, the first rank
            holds the value and the others zeros).
        dtype (dtorch.dtype, optional): by default the data's own: a numpy
            array keeps its dtype; Python floats become ``float32`` and
            Python ints ``int64``, as in torch.
        requires_grad (bool): recorded on the tensor.

    Returns:
        Tensor: the new tensor.

    Raises:
        TypeError: a placement is not a placement, or the dtype has no numpy
            equivalent.
        ValueError: the placements do not fit the mesh or the data's shape.

    Example:
        >>> import dtorch
        >>> from dtorch import Shard
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> x = dtorch.tensor([[1, 2], [3, 4], [5, 6]], device_mesh=mesh, placements=[Shard(0)])
        >>> x.dtype == dtorch.int64, x.local_shards()[1].tolist()
        (True, [[5, 6]])
    """
    if isinstance(data, _C.Tensor):
        data = data.numpy()
    elif hasattr(data, "detach") and hasattr(data, "numpy"):
        data = data.detach().cpu().numpy()
    arr = np.asarray(data)
    if dtype is not None:
        arr = arr.astype(_np_dtype(dtype))
    elif arr.dtype == np.float64 and not isinstance(data, np.ndarray):
        arr = arr.astype(np.float32)  # Python floats become float32, as in torch
    elif _is_bfloat16(arr.dtype):
        pass  # ml_dtypes.bfloat16: sent as its 16-bit pattern
    elif arr.dtype.kind == "f" and arr.dtype not in (np.float32, np.float64, np.float16):
        arr = arr.astype(np.float32)
    elif arr.dtype.kind in "iu" and arr.dtype not in (np.int32, np.int64):
        arr = arr.astype(np.int64)
    # np.ascontiguousarray would make a 0-d value 1-d; torch keeps shape ().
    if not arr.flags.c_contiguous:
        arr = np.require(arr, requirements="C")
    mesh, raw = _target(device_mesh, placements, arr.ndim)
    if _is_bfloat16(arr.dtype):
        t = _C.from_numpy(arr.view(np.uint16), mesh._mesh_id, raw, mesh._view,
                          _C.dtype.bfloat16)
    else:
        t = _C.from_numpy(arr, mesh._mesh_id, raw, mesh._view)
    t._requires_grad = bool(requires_grad)
    return t


@_shared_docs
def distribute_tensor(tensor_data, device_mesh=None, placements=None):
    """Places a full global value on a mesh, as torch's ``distribute_tensor``.

    The same as `tensor` with ``device_mesh`` and ``placements``, taking them
    by position as torch does.

    Args:
        tensor_data: the global value: a numpy array, a nested list or a
            torch tensor.
        {mesh}

    Returns:
        Tensor: the distributed tensor.

    Example:
        >>> import numpy as np
        >>> import dtorch
        >>> from dtorch import Shard
        >>> mesh = dtorch.init_device_mesh("cpu", (2, 2))
        >>> x = dtorch.distribute_tensor(np.ones((4, 6)), mesh, [Shard(0), Shard(1)])
        >>> x.local_shards()[3].shape
        (2, 3)
    """
    return tensor(tensor_data, device_mesh=device_mesh, placements=placements,
                  dtype=None if not isinstance(tensor_data, np.ndarray) else None)


@_shared_docs
def arange(start, end=None, step=1, *, device_mesh=None, placements=None, dtype=None,
           requires_grad=False):
    """The 1-D tensor of ``start, start + step, ...`` up to ``end`` (excluded),
    as torch's ``arange``; ``arange(n)`` counts from 0.

    Args:
        start (int or float): the first value, or the end when ``end`` is
            omitted.
        end (int or float, optional): the bound, not included.
        step (int or float): the distance between values.
        {mesh}
        dtype (dtorch.dtype, optional): ``int64`` when every value is an int, else
            ``float32``.
        requires_grad (bool): recorded on the tensor, as in torch.

    Returns:
        Tensor: the new 1-D tensor.

    Example:
        >>> import dtorch
        >>> dtorch.arange(5).tolist(), dtorch.arange(1, 2, 0.5).tolist()
        ([0, 1, 2, 3, 4], [1.0, 1.5])
    """
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    count = max(0, math.ceil((end - start) / step))
    if dtype is None:
        integral = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        dtype = _C.dtype.int64 if integral else _C.dtype.float32
    # dtensor.iota: each rank makes its own piece, nothing is sent.
    mesh, raw = _target(device_mesh, placements, 1)
    t = _C.iota([count], 0, float(start), float(step), dtype, mesh._mesh_id, raw, mesh._view)
    t._requires_grad = bool(requires_grad)
    return t


@_shared_docs
def eye(n, m=None, *, device_mesh=None, placements=None, dtype=None, requires_grad=False):
    """The ``n`` x ``m`` identity matrix (ones on the diagonal).

    Args:
        n (int): rows.
        m (int, optional): columns; ``n`` when omitted.
        {mesh}
        {dtype}

    Returns:
        Tensor: the new 2-D tensor.

    Example:
        >>> import dtorch
        >>> dtorch.eye(2, 3).tolist()
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    return tensor(np.eye(n, m), device_mesh=device_mesh, placements=placements,
                  dtype=dtype or _C.dtype.float32, requires_grad=requires_grad)
