"""The operator surface of dtorch, built from the op registry.

Every operator is declared once, in ODS (dialects/dtensor/IR/DTensorOps.td
for dialect ops, DTensorDecompositions.td for torch operators built from
them). `_C.op_registry()` returns those declarations; `install()` gives each
of its torch names a function in `dtorch` and a method on `Tensor`, with the
op's ODS summary as docstring. The implementations below are per op family
(one for all unary ops, one for all comparisons, ...) or per op where the
signature is the op's own. A registry name without an implementation fails
the import, naming the op.
"""
from . import _C
from . import _decompositions as _dec

Tensor = _C.Tensor

_dims = _dec._dims  # None, an int or a sequence -> a list of dims


# ---- implementations per family ---------------------------------------------
def _unary(name):
    def op(x):
        return _C.unary(name, x)
    return op


def _binary(name):
    def op(a, b):
        if not isinstance(a, Tensor):
            return _C.binary(name, b, a, True)
        return _C.binary(name, a, b, False)
    return op


def _compare(name):
    def op(a, b):
        if not isinstance(a, Tensor):
            return _C.compare(name, b, a, True)
        return _C.compare(name, a, b, False)
    return op


_REDUCTION_OP = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min"}


def _reduction(name):
    kernel = _REDUCTION_OP[name]

    def op(x, dim=None, keepdim=False, *, dtype=None):
        if dtype is not None:
            x = x.to(dtype)
        return _C.reduce(kernel, x, _dims(dim), keepdim)
    return op


def _argreduce(name):
    def op(x, dim=None, keepdim=False):
        if dim is None:
            flat = _C.reshape(x, [-1]) if x.ndim != 1 else x
            out = _C.arg_reduce(name, flat, 0, False)
            return _C.reshape(out, [1] * x.ndim) if keepdim else out
        return _C.arg_reduce(name, x, dim, keepdim)
    return op


def _triangle(name):
    def op(x, diagonal=0):
        return _C.triangle(name, x, int(diagonal))
    return op


def _where(condition, input=None, other=None):  # noqa: A002
    if input is None and other is None:
        raise NotImplementedError(
            "where(condition) returns data-dependent indices; dtorch needs "
            "where(condition, input, other)")
    return _C.where(condition, input, other)


def _where_method(self, condition, other):
    return _C.where(condition, self, other)


def _matmul(a, b):
    return _C.matmul(a, b)


def _bmm(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise ValueError(f"bmm: expected 3-D tensors, got {a.ndim}-D and {b.ndim}-D")
    return _C.matmul(a, b)


def _mm(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"mm: expected 2-D tensors, got {a.ndim}-D and {b.ndim}-D")
    return _C.matmul(a, b)


def _gather(x, dim, index):
    return _C.gather(x, dim, index)


def _index_select(x, dim, index):
    return _C.index_select(x, dim, index)


def _scatter_add(x, dim, index, src):
    return _C.scatter_add(x, dim, index, src)


def _cat(tensors, dim=0):
    return _C.concat(list(tensors), dim)


def _like_random(normal):
    def op(x, *, dtype=None, requires_grad=False):
        t = _C.random(list(x.shape), normal, dtype or x.dtype, x._mesh_id, _dec._rep(x),
                      x._view)
        t._requires_grad = bool(requires_grad)
        return t
    return op


def _full_like(x, fill_value, *, dtype=None, requires_grad=False):
    t = _C.full(list(x.shape), float(fill_value), dtype or x.dtype, x._mesh_id, _dec._rep(x),
                x._view)
    t._requires_grad = bool(requires_grad)
    return t


# Families whose every member shares one implementation.
_FAMILY = {"unary": _unary, "binary": _binary, "compare": _compare,
           "reduction": _reduction, "argreduce": _argreduce, "triangle": _triangle}

# Names whose signature is their own (functions; methods default to these).
_NAMED = {
    "where": _where, "matmul": _matmul, "mm": _mm, "bmm": _bmm,
    "gather": _gather, "index_select": _index_select, "scatter_add": _scatter_add,
    "cat": _cat, "concat": _cat, "embedding": _dec.embedding,
    "rand_like": _like_random(False), "randn_like": _like_random(True),
    "full_like": _full_like,
}
_NAMED_METHODS = {"where": _where_method}

# Names implemented elsewhere in the package (hand-written Python with
# torch's signatures): module attribute lookups done at install time.
_ELSEWHERE = {
    "creation": "_creation", "cast": "_tensor", "shape": "_tensor", "slice": "_indexing",
    "layout": "_tensor",
}


def _lookup(entry, name, method):
    fam = entry["family"]
    if method and name in _NAMED_METHODS:
        return _NAMED_METHODS[name]
    if name in _NAMED:
        return _NAMED[name]
    if fam in _FAMILY:
        return _FAMILY[fam](name)
    if fam == "decomposition":
        return getattr(_dec, ("m_" if method else "") + name, None) or getattr(_dec, name, None)
    if fam in _ELSEWHERE:
        import importlib
        mod = importlib.import_module("dtorch." + _ELSEWHERE[fam])
        return getattr(mod, ("m_" if method else "") + name, None) or getattr(mod, name, None)
    return None


def registry():
    """The op registry: a list of dicts, one per dialect op or decomposition."""
    return _C.op_registry()


def install(namespace):
    """Gives every registry name its function in `namespace` (the dtorch
    module's globals) and its method on Tensor."""
    missing = []
    for entry in registry():
        doc = f"{entry['summary']}.\n\nDeclared in ODS as " + (
            f"dtensor.{entry['name']}" if entry["is_dialect_op"]
            else f"a decomposition into {', '.join(entry['uses'])}") + "."
        for name in entry["functions"]:
            fn = _lookup(entry, name, method=False)
            if fn is None:
                missing.append(f"dtorch.{name} ({entry['name']})")
                continue
            if getattr(fn, "__doc__", None) is None:
                fn.__doc__ = doc
            namespace.setdefault(name, fn)
        for name in entry["methods"]:
            if name.startswith("__") or name in _ALREADY_METHODS:
                continue
            fn = _lookup(entry, name, method=True)
            if fn is None:
                missing.append(f"Tensor.{name} ({entry['name']})")
                continue
            setattr(Tensor, name, fn)
    if missing:
        raise ImportError("dtorch: the op registry declares names without an "
                          "implementation: " + ", ".join(missing))


# Methods with torch signatures written in _tensor.py.
_ALREADY_METHODS = {"to", "float", "double", "long", "int", "bool", "half", "bfloat16",
                    "reshape", "view", "flatten", "unsqueeze", "squeeze", "transpose",
                    "permute", "t", "expand", "broadcast_to", "redistribute"}
