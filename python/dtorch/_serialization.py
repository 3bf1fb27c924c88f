"""Full-tensor files for torch users (safetensors) and the random number
generator's state (what a checkpoint needs for a bitwise resume).

`save_safetensors` gathers one tensor at a time on the client (each
DTensor's ``numpy()``), so the client holds at most one full tensor at a
time; sharded checkpoints that never gather are
`dtorch.distributed.checkpoint`.
"""
import json
import os
from collections.abc import Mapping

import numpy as np

from . import _C

Tensor = _C.Tensor

# numpy dtype name -> safetensors dtype, and back.
_SAFETENSORS_DTYPES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
}
_NUMPY_OF = {v: k for k, v in _SAFETENSORS_DTYPES.items()}


def _flat_items(state, prefix=""):
    for k, v in state.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            yield from _flat_items(v, key)
        else:
            yield key, v


def _as_numpy(key, v):
    if isinstance(v, Tensor):
        return v.numpy()
    if type(v).__module__.startswith("torch") and hasattr(v, "detach"):
        from .distributed.checkpoint._state import _torch_to_numpy
        return _torch_to_numpy(v)
    if isinstance(v, (np.ndarray, np.generic, int, float, bool)):
        return np.asarray(v)
    raise TypeError(f"save_safetensors: '{key}' is a {type(v).__name__}, not a tensor")


def save_safetensors(state_dict, path, metadata=None):
    """Writes the full tensors of a (nested) state dict as one safetensors
    file, readable by ``safetensors.numpy.load_file`` and
    ``safetensors.torch.load_file``.

    Nested dicts give dotted keys. Each DTensor is gathered on the client
    one at a time (its full value, as ``numpy()`` gives it) and written at
    once, so the client holds one full tensor at a time. The file is
    written under a temporary name, synced, and renamed into place.

    Args:
        state_dict (dict): tensors (DTensors, numpy arrays, torch tensors,
            numbers) by name, possibly nested.
        path (str or os.PathLike): the file to write.
        metadata (dict[str, str], optional): the header's ``__metadata__``.

    Raises:
        TypeError: a value that is not a tensor, or metadata that is not
            str -> str.

    Example:
        >>> import os, tempfile
        >>> import dtorch
        >>> from safetensors.numpy import load_file
        >>> mesh = dtorch.init_device_mesh("cpu", (2,))
        >>> fc = dtorch.nn.Linear(4, 3)
        >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
        >>> dtorch.save_safetensors(fc.state_dict(), path)
        >>> sorted((k, v.shape) for k, v in load_file(path).items())
        [('bias', (3,)), ('weight', (3, 4))]
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"save_safetensors expects a dict, got {type(state_dict).__name__}")
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str)
                                        for k, v in metadata.items()):
        raise TypeError("save_safetensors: metadata must map str to str")
    items = list(_flat_items(state_dict))
    keys = [k for k, _ in items]
    if len(set(keys)) != len(keys):
        raise ValueError("save_safetensors: two tensors have the same dotted name")
    # The header needs every size first: shapes and dtypes are known without
    # fetching (DTensors) or from the arrays.
    header = {}
    offset = 0
    for key, v in items:
        if isinstance(v, Tensor):
            name = "bool" if v.dtype == _C.dtype.bool else v.dtype.name
            shape = list(v.shape)
        else:
            a = _as_numpy(key, v)
            name, shape = a.dtype.name, list(a.shape)
        if name not in _SAFETENSORS_DTYPES:
            raise TypeError(f"save_safetensors: '{key}' has dtype {name}, which "
                            "safetensors cannot hold")
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(_numpy_dtype(name)).itemsize
        header[key] = {"dtype": _SAFETENSORS_DTYPES[name], "shape": shape,
                       "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        header["__metadata__"] = dict(metadata)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(len(text).to_bytes(8, "little"))
            f.write(text)
            for key, v in items:
                a = np.ascontiguousarray(_as_numpy(key, v))
                data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
                begin, end = header[key]["data_offsets"]
                if len(data) != end - begin:
                    raise RuntimeError(f"save_safetensors: '{key}' changed size while saving")
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _numpy_dtype(name):
    if name == "bfloat16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return np.dtype(name)


def load_safetensors(path):
    """The tensors of a safetensors file as numpy arrays by name (bfloat16
    as ``ml_dtypes.bfloat16``); give them to ``model.load_state_dict`` to
    place them on the model's meshes.

    Raises:
        ValueError: the file is not a valid safetensors file.

    Example:
        >>> import os, tempfile
        >>> import numpy as np, dtorch
        >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
        >>> dtorch.save_safetensors({"w": np.eye(2, dtype=np.float32)}, path)
        >>> dtorch.load_safetensors(path)["w"].tolist()
        [[1.0, 0.0], [0.0, 1.0]]
    """
    with open(os.fspath(path), "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file (too short)")
    n = int.from_bytes(raw[:8], "little")
    if n > len(raw) - 8:
        raise ValueError(f"{path}: header length {n} exceeds the file")
    try:
        header = json.loads(raw[8:8 + n])
    except ValueError as e:
        raise ValueError(f"{path}: header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")
    data = memoryview(raw)[8 + n:]
    out = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            dtype = _numpy_dtype(_NUMPY_OF[info["dtype"]])
            shape = tuple(int(s) for s in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: invalid header entry for '{key}'") from None
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= len(data) or end - begin != count * np.dtype(dtype).itemsize:
            raise ValueError(f"{path}: data offsets of '{key}' do not match its shape")
        out[key] = np.frombuffer(data[begin:end], dtype=np.dtype(dtype).newbyteorder("<")) \
            .astype(dtype).reshape(shape)
    return out


def get_rng_state():
    """The random number generator's state: a numpy uint64 array
    ``[seed, ops drawn since the seed]``. Saved with a checkpoint and given
    back to `set_rng_state`, the random ops after it draw the same values
    (e.g. dropout masks of a resumed run).

    Example:
        >>> import dtorch
        >>> dtorch.manual_seed(5)
        >>> state = dtorch.get_rng_state()
        >>> a = dtorch.randn(3).numpy()
        >>> dtorch.set_rng_state(state)
        >>> bool((dtorch.randn(3).numpy() == a).all())
        True
    """
    from . import _runtime
    _runtime.ensure_initialized()
    seed, counter = _C.get_rng_state()
    return np.array([seed, counter], dtype=np.uint64)


def set_rng_state(new_state):
    """Restores a state from `get_rng_state` (any sequence of the two
    numbers).

    Raises:
        ValueError: not two non-negative integers.

    Example:
        >>> import dtorch
        >>> state = dtorch.get_rng_state()
        >>> first = dtorch.rand(2).numpy()
        >>> dtorch.set_rng_state(state)
        >>> bool((dtorch.rand(2).numpy() == first).all())
        True
    """
    from . import _runtime
    values = np.asarray(new_state).reshape(-1)
    if values.shape != (2,) or not np.issubdtype(values.dtype, np.integer) or (values < 0).any():
        raise ValueError("set_rng_state expects [seed, counter] as two non-negative integers, "
                         f"got {new_state!r}")
    _runtime.ensure_initialized()
    _C.set_rng_state(int(values[0]), int(values[1]))
