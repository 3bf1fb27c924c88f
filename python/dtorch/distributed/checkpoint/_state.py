"""The structure of a state dict in a checkpoint: flattening a nested state
(dicts, lists, tuples, tensors, numpy arrays, Python scalars and strings)
into tensor entries keyed by dotted paths plus one JSON document, and
reading that document back, strictly.

In the JSON document a dict is ``{"dict": [[key, value], ...]}`` (a key is
``["s", str]`` or ``["i", int]``, so integer keys of an optimizer's state
stay integers), a list ``{"list": [...]}``, a tuple ``{"tuple": [...]}``, a
tensor saved in the checkpoint's data files ``{"tensor": key, "kind":
"dtensor" | "array"}``, a numpy array of a dtype the runtime lacks
``{"ndarray": {"dtype", "shape", "data" (base64)}}``, and None, booleans,
numbers and strings are themselves (``{"float": "nan"}`` for NaN and the
infinities)."""
import base64
import math
from collections.abc import Mapping

import numpy as np

from ... import _C

Tensor = _C.Tensor

RUNTIME_DTYPES = {
    "float32": _C.dtype.float32, "float64": _C.dtype.float64,
    "float16": _C.dtype.float16, "bfloat16": _C.dtype.bfloat16,
    "int32": _C.dtype.int32, "int64": _C.dtype.int64, "bool": _C.dtype.bool,
}


def child_key(prefix, key):
    return f"{prefix}.{key}" if prefix else str(key)


def _torch_to_numpy(obj):
    t = obj.detach().cpu()
    if str(t.dtype) == "torch.bfloat16":
        import ml_dtypes
        return t.view(__import__("torch").int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _is_torch_tensor(obj):
    return type(obj).__module__.startswith("torch") and hasattr(obj, "detach")


def flatten(state, tensors, arrays, prefix=""):
    """The JSON structure of `state`; DTensors go to `tensors` and numpy
    arrays of runtime dtypes to `arrays` (both {key: value})."""
    if isinstance(state, Tensor):
        _claim(prefix, tensors, arrays)
        tensors[prefix] = state
        return {"tensor": prefix, "kind": "dtensor"}
    if _is_torch_tensor(state):
        state = _torch_to_numpy(state)
    if isinstance(state, np.generic):
        state = np.asarray(state)
        return {"ndarray": _encode_array(state), "scalar": True}
    if isinstance(state, np.ndarray):
        if state.dtype.name in RUNTIME_DTYPES:
            _claim(prefix, tensors, arrays)
            arrays[prefix] = np.ascontiguousarray(state)
            return {"tensor": prefix, "kind": "array"}
        return {"ndarray": _encode_array(state)}
    if isinstance(state, Mapping):
        items = []
        for k, v in state.items():
            if isinstance(k, bool) or not isinstance(k, (str, int)):
                raise TypeError(f"checkpoint: key {k!r} under '{prefix}' is not a str or int")
            items.append([["i", k] if isinstance(k, int) else ["s", k],
                          flatten(v, tensors, arrays, child_key(prefix, k))])
        return {"dict": items}
    if isinstance(state, (list, tuple)):
        values = [flatten(v, tensors, arrays, child_key(prefix, i)) for i, v in enumerate(state)]
        return {"list" if isinstance(state, list) else "tuple": values}
    if isinstance(state, float) and not math.isfinite(state):
        return {"float": repr(state)}
    if state is None or isinstance(state, (bool, int, float, str)):
        return state
    raise TypeError(f"checkpoint: cannot save '{prefix}' of type {type(state).__name__}")


def _claim(key, tensors, arrays):
    if not key:
        raise TypeError("checkpoint: the state must be a dict, not a single tensor")
    if key in tensors or key in arrays:
        raise ValueError(f"checkpoint: two values of the state have the key '{key}'")


def _encode_array(a):
    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.str, "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode("ascii")}


class TensorRef:
    """A tensor of the checkpoint, by key (read when it is loaded)."""
    __slots__ = ("key", "kind")

    def __init__(self, key, kind):
        self.key = key
        self.kind = kind


def _fail(where, what):
    raise ValueError(f"checkpoint metadata is not valid: {what} at '{where}'")


def decode(node, where="", tensor_keys=frozenset()):
    """The saved structure with TensorRef leaves, validated: every node has
    the shape `flatten` writes, every tensor it names exists."""
    if node is None or isinstance(node, (bool, str)):
        return node
    if isinstance(node, (int, float)):
        return node
    if not isinstance(node, dict):
        _fail(where, f"unexpected {type(node).__name__}")
    if set(node) == {"dict"} and isinstance(node["dict"], list):
        out = {}
        for item in node["dict"]:
            if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], list)
                    or len(item[0]) != 2 or item[0][0] not in ("s", "i")):
                _fail(where, "malformed dict item")
            kind, k = item[0]
            if (kind == "s" and not isinstance(k, str)) or \
                    (kind == "i" and (not isinstance(k, int) or isinstance(k, bool))):
                _fail(where, "malformed dict key")
            if k in out:
                _fail(where, f"duplicate key {k!r}")
            out[k] = decode(item[1], child_key(where, k), tensor_keys)
        return out
    for seq in ("list", "tuple"):
        if set(node) == {seq} and isinstance(node[seq], list):
            values = [decode(v, child_key(where, i), tensor_keys)
                      for i, v in enumerate(node[seq])]
            return values if seq == "list" else tuple(values)
    if set(node) == {"tensor", "kind"}:
        if node["kind"] not in ("dtensor", "array") or node["tensor"] not in tensor_keys:
            _fail(where, f"reference to a tensor that is not saved: {node['tensor']!r}")
        return TensorRef(node["tensor"], node["kind"])
    if set(node) in ({"ndarray"}, {"ndarray", "scalar"}):
        a = node["ndarray"]
        try:
            dtype = np.dtype(a["dtype"])
            if dtype.hasobject:
                raise TypeError("object arrays are not allowed")
            shape = tuple(int(s) for s in a["shape"])
            data = base64.b64decode(a["data"], validate=True)
            value = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
        except (KeyError, TypeError, ValueError) as e:
            _fail(where, f"malformed array ({e})")
        return value[()] if node.get("scalar") else value
    if set(node) == {"float"} and node["float"] in ("nan", "inf", "-inf"):
        return float(node["float"])
    _fail(where, f"unknown node {sorted(node)}")
