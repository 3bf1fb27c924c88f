"""torch operators built from dialect ops.

Each function here is declared in DTensorDecompositions.td (its name and the
dialect ops it emits); the registry installs it under its torch names. Their
sharding follows from the rules of the ops they use: a softmax over a sharded
dim reduces its max and its sum across that dim (Partial -> Replicate), and
stays local otherwise.
"""
import builtins
import collections
import math
import os

from . import _C

Tensor = _C.Tensor

# The hot functions below first try their one-call recording in C++
# (python/src/functional_bindings.cpp: the same ops in the same order, so the
# same program and bits); it returns None for a case it leaves to the Python
# definition, which then runs. DTORCH_FAST_FUNCTIONAL=0: Python only.
_FAST = os.environ.get("DTORCH_FAST_FUNCTIONAL", "1") != "0"

MaxMin = collections.namedtuple("MaxMin", ["values", "indices"])
TopK = collections.namedtuple("TopK", ["values", "indices"])


def topk(x, k, dim=-1, largest=True, sorted=True):  # noqa: A002
    """The k largest (or smallest) values along `dim` and their indices."""
    indices = _C.topk_indices(x, int(k), dim, bool(largest))
    return TopK(_C.gather(x, dim, indices), indices)


def _dims(dim):
    if dim is None:
        return []
    if isinstance(dim, int):
        return [dim]
    return list(dim)


def _rep(x):
    """x's placements with Partial made Replicate (raw tuples)."""
    return [("R", 0, "") if k == "P" else (k, d, o) for k, d, o in x._placements_raw]


def _replicated(x):
    return [("R", 0, "")] * len(x._placements_raw)


def _as_float(x):
    return x if x.dtype in (_C.dtype.float32, _C.dtype.float64, _C.dtype.float16,
                            _C.dtype.bfloat16) else _C.cast(x, _C.dtype.float32)


def square(x):
    return _C.binary("mul", x, x, False)


def softmax(x, dim=-1, dtype=None):
    if _FAST and dtype is None:
        out = _C.fast_softmax(x, dim)
        if out is not None:
            return out
    x = _as_float(x if dtype is None else _C.cast(x, dtype))
    m = _C.reduce("max", x, [dim], True)
    e = _C.unary("exp", _C.binary("sub", x, m, False))
    return _C.binary("div", e, _C.reduce("sum", e, [dim], True), False)


def log_softmax(x, dim=-1, dtype=None):
    x = _as_float(x if dtype is None else _C.cast(x, dtype))
    m = _C.reduce("max", x, [dim], True)
    shifted = _C.binary("sub", x, m, False)
    lse = _C.unary("log", _C.reduce("sum", _C.unary("exp", shifted), [dim], True))
    return _C.binary("sub", shifted, lse, False)


def logsumexp(x, dim=None, keepdim=False):
    x = _as_float(x)
    dims = _dims(dim)
    m = _C.reduce("max", x, dims, True)
    # A row of -inf: keep the shift finite so the result is -inf, not NaN.
    finite = _C.where(_C.compare("eq", m, float("-inf"), False), 0.0, m)
    s = _C.reduce("sum", _C.unary("exp", _C.binary("sub", x, finite, False)), dims, True)
    out = _C.binary("add", _C.unary("log", s), finite, False)
    if not keepdim:
        out = _C.reduce("sum", out, dims or list(range(x.ndim)), False)
    return out


def var(x, dim=None, *, correction=1, keepdim=False, unbiased=None):
    if unbiased is not None:
        correction = 1 if unbiased else 0
    x = _as_float(x)
    dims = _dims(dim) or list(range(x.ndim))
    n = 1
    for d in dims:
        n *= x.shape[d % builtins.max(x.ndim, 1)] if x.ndim else 1
    centered = _C.binary("sub", x, _C.reduce("mean", x, dims, True), False)
    ss = _C.reduce("sum", square(centered), dims, keepdim)
    return _C.binary("div", ss, float(builtins.max(n - correction, 0)), False)


def std(x, dim=None, *, correction=1, keepdim=False, unbiased=None):
    return _C.unary("sqrt", var(x, dim, correction=correction, keepdim=keepdim,
                                unbiased=unbiased))


def clamp(x, min=None, max=None):  # noqa: A002
    out = x
    if min is not None:
        out = _C.binary("maximum", out, min, False)
    if max is not None:
        out = _C.binary("minimum", out, max, False)
    return out


clip = clamp


def masked_fill(x, mask, value):
    if mask.dtype != _C.dtype.bool:
        raise TypeError(f"masked_fill: mask must be a bool tensor, got {mask.dtype.name}")
    if isinstance(value, Tensor):
        value = _C.cast(value, x.dtype)
    else:
        value = _C.cast(_C.full([], float(value), x.dtype, x._mesh_id, _replicated(x), x._view),
                        x.dtype)
    out = _C.where(mask, value, x)
    if tuple(out.shape) != tuple(x.shape):
        raise ValueError(f"masked_fill: mask of shape {tuple(mask.shape)} does not "
                         f"broadcast to the input's shape {tuple(x.shape)}")
    return out


def one_hot(t, num_classes=-1):
    if t.dtype != _C.dtype.int64:
        raise TypeError(f"one_hot: needs an int64 tensor, got {t.dtype.name}")
    if num_classes < 0:
        num_classes = int(_C.fetch(_C.reduce("max", t, [], False))) + 1
    classes = _C.iota([num_classes], 0, 0.0, 1.0, _C.dtype.int64, t._mesh_id,
                      [("R", 0, "")] * len(t._placements_raw), t._view)
    hit = _C.compare("eq", _C.reshape(t, list(t.shape) + [1]), classes, False)
    return _C.cast(hit, _C.dtype.int64)


def dropout(x, p=0.5, training=True, inplace=False):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return _C.binary("mul", x, 0.0, False)
    # The same counter-based generator as rand(): the mask of a global
    # element does not depend on the placements.
    u = _C.random(list(x.shape), False, _C.dtype.float32, x._mesh_id, _rep(x), x._view)
    keep = _C.compare("ge", u, float(p), False)
    return _C.where(keep, _C.binary("mul", x, 1.0 / (1.0 - p), False), 0.0)


def _norm_dims(x, normalized_shape):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    n = len(normalized_shape)
    if tuple(x.shape[x.ndim - n:]) != tuple(normalized_shape):
        raise ValueError(f"normalized_shape {tuple(normalized_shape)} does not match the "
                         f"last dims of an input of shape {tuple(x.shape)}")
    return list(range(x.ndim - n, x.ndim))


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    if _FAST:
        out = _C.fast_layer_norm(x, normalized_shape, weight, bias, eps)
        if out is not None:
            return out
    dims = _norm_dims(x, normalized_shape)
    mean = _C.reduce("mean", x, dims, True)
    centered = _C.binary("sub", x, mean, False)
    v = _C.reduce("mean", square(centered), dims, True)
    out = _C.binary("mul", centered, _C.unary("rsqrt", _C.binary("add", v, float(eps), False)),
                    False)
    if weight is not None:
        out = _C.binary("mul", out, weight, False)
    if bias is not None:
        out = _C.binary("add", out, bias, False)
    return out


def rms_norm(x, normalized_shape, weight=None, eps=None):
    dims = _norm_dims(x, normalized_shape)
    if eps is None:
        eps = {_C.dtype.float64: 2.220446049250313e-16}.get(x.dtype, 1.1920928955078125e-07)
    ms = _C.reduce("mean", square(x), dims, True)
    out = _C.binary("mul", x, _C.unary("rsqrt", _C.binary("add", ms, float(eps), False)), False)
    if weight is not None:
        out = _C.binary("mul", out, weight, False)
    return out


def cross_entropy(input, target, weight=None, ignore_index=-100,  # noqa: A002
                  reduction="mean", label_smoothing=0.0):
    """Class-index targets: input [N, C] (or [C]), target [N] int64."""
    if _FAST and weight is None and reduction == "mean" and label_smoothing == 0.0:
        out = _C.fast_cross_entropy(input, target, ignore_index)
        if out is not None:
            return out
    if weight is not None:
        raise NotImplementedError("cross_entropy: per-class weight is not supported yet")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: unknown reduction '{reduction}'")
    if target.dtype != _C.dtype.int64:
        raise TypeError("cross_entropy: target must hold class indices (int64); "
                        f"got {target.dtype.name}")
    if input.ndim == 1:
        input = _C.reshape(input, [1, input.shape[0]])
        target = _C.reshape(target, [1])
    if input.ndim != 2 or target.ndim != 1 or target.shape[0] != input.shape[0]:
        raise ValueError(f"cross_entropy: expected input [N, C] and target [N], got "
                         f"{tuple(input.shape)} and {tuple(target.shape)}")
    n, c = input.shape
    if any(k == "S" and d == 1 for k, d, _ in input._placements_raw):
        logp, picked = _class_sharded_pick(input, target, ignore_index)
    else:
        logp = log_softmax(input, 1)
        valid = _C.compare("ne", target, ignore_index, False)
        safe = _C.where(valid, target, 0)
        picked = _C.reshape(_C.gather(logp, 1, _C.reshape(safe, [n, 1])), [n])
    valid = _C.compare("ne", target, ignore_index, False)
    nll = _C.unary("neg", picked)
    if label_smoothing > 0.0:
        smooth = _C.unary("neg", _C.reduce("mean", logp, [1], False))
        nll = _C.binary("add", _C.binary("mul", nll, 1.0 - label_smoothing, False),
                        _C.binary("mul", smooth, float(label_smoothing), False), False)
    nll = _C.where(valid, nll, 0.0)
    if reduction == "none":
        return nll
    total = _C.reduce("sum", nll, [], False)
    if reduction == "sum":
        return total
    count = _C.reduce("sum", _C.cast(valid, nll.dtype), [], False)
    return _C.binary("div", total, count, False)


def _class_sharded_pick(input, target, ignore_index):  # noqa: A002
    """log_softmax over the class dim and the target's log-probability for
    logits sharded on the class dim (loss parallel): the row statistics
    (max, sum of exponentials) are laid out replicated on the class dim's
    mesh dims, and the target is picked with a mask sharded like the
    logits and a sum, so nothing of size [N, C] ever moves."""
    x = _as_float(input)
    n, c = x.shape
    stats = [("R", 0, "") if k == "P" or (k == "S" and d == 1) else (k, d, o)
             for k, d, o in x._placements_raw]

    def rows(t):
        return _C.redistribute(t, x._mesh_id, stats, x._view)
    m = rows(_C.reduce("max", x, [1], True)).detach()
    shifted = _C.binary("sub", x, m, False)
    lse = _C.unary("log", rows(_C.reduce("sum", _C.unary("exp", shifted), [1], True)))
    logp = _C.binary("sub", shifted, lse, False)
    safe = _C.where(_C.compare("ne", target, ignore_index, False), target, 0)
    # The mask is made in the logits' layout (a declared broadcast), so the
    # compiler has no reason to move the logits to the targets' layout.
    layout = [("R", 0, "") if k == "P" else (k, d, o) for k, d, o in x._placements_raw]
    classes = _C.iota([n, c], 1, 0.0, 1.0, _C.dtype.int64, x._mesh_id, layout, x._view)
    wanted = _C.broadcast_to(_C.reshape(safe, [n, 1]), [n, c], layout)
    hit = _C.compare("eq", wanted, classes, False)
    picked = _C.binary("mul", logp, _C.cast(hit, logp.dtype), False)
    return logp, rows(_C.reduce("sum", picked, [1], False))


def mse_loss(input, target, reduction="mean"):  # noqa: A002
    d = square(_C.binary("sub", input, target, False))
    if reduction == "none":
        return d
    if reduction == "sum":
        return _C.reduce("sum", d, [], False)
    if reduction == "mean":
        return _C.reduce("mean", d, [], False)
    raise ValueError(f"mse_loss: unknown reduction '{reduction}'")


def _batched_matmul(a, b):
    """[..., M, K] @ [..., K, N] with equal leading dims: one bmm over all of
    them (so [batch, heads, ...] sharded on both needs no redistribution)."""
    return _C.matmul(a, b)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    if _FAST and attn_mask is None and dropout_p == 0.0:
        out = _C.fast_scaled_dot_product_attention(query, key, value, bool(is_causal), scale)
        if out is not None:
            return out
    if query.ndim < 3:
        raise ValueError("scaled_dot_product_attention: expected [..., L, E] inputs "
                         "with at least one batch dim")
    if attn_mask is not None and is_causal:
        raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    L, E = query.shape[-2], query.shape[-1]
    S = key.shape[-2]
    scale = 1.0 / math.sqrt(E) if scale is None else scale
    perm = list(range(key.ndim))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    scores = _C.binary("mul", _batched_matmul(query, _C.permute(key, perm)), float(scale), False)
    if is_causal:
        rows = _C.iota([L, S], 0, 0.0, 1.0, _C.dtype.int64, query._mesh_id,
                       _replicated(query), query._view)
        cols = _C.iota([L, S], 1, 0.0, 1.0, _C.dtype.int64, query._mesh_id,
                       _replicated(query), query._view)
        attn_mask = _C.compare("ge", rows, cols, False)
    if attn_mask is not None:
        if attn_mask.dtype == _C.dtype.bool:
            scores = _C.where(attn_mask, scores, float("-inf"))
        else:
            scores = _C.binary("add", scores, attn_mask, False)
    p = softmax(scores, -1)
    if dropout_p > 0.0:
        p = dropout(p, dropout_p)
    return _batched_matmul(p, value)


def linear(x, weight, bias=None):
    if _FAST:
        out = _C.fast_linear(x, weight, bias)
        if out is not None:
            return out
    out = _C.matmul(x, _C.permute(weight, [1, 0]))
    if bias is not None:
        out = _C.binary("add", out, bias, False)
    return out


def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors")
    n = tensors[0].ndim + 1
    if not -n <= dim < n:
        raise ValueError(f"stack: dim {dim} out of range for rank {n - 1}")
    dim %= n
    parts = []
    for t in tensors:
        if tuple(t.shape) != tuple(tensors[0].shape):
            raise ValueError(f"stack: expects each tensor to be equal size, got "
                             f"{tuple(tensors[0].shape)} and {tuple(t.shape)}")
        shape = list(t.shape)
        shape.insert(dim, 1)
        parts.append(_C.reshape(t, shape))
    return _C.concat(parts, dim)


def _extreme(kind):
    red, arg, elem = ("max", "argmax", "maximum") if kind == "max" else ("min", "argmin",
                                                                          "minimum")

    def op(x, dim=None, keepdim=False):
        if isinstance(dim, Tensor):
            return _C.binary(elem, x, dim, False)
        if dim is None:
            return _C.reduce(red, x, [], False)
        return MaxMin(_C.reduce(red, x, [dim], keepdim), _C.arg_reduce(arg, x, dim, keepdim))
    op.__name__ = kind
    return op


max = _extreme("max")  # noqa: A001
min = _extreme("min")  # noqa: A001


def embedding(input, weight):  # noqa: A002
    """Rows of `weight` picked by the int64 indices in `input` (any shape)."""
    if _FAST:
        out = _C.fast_embedding(input, weight)
        if out is not None:
            return out
    flat = _C.reshape(input, [-1]) if input.ndim != 1 else input
    rows = _C.index_select(weight, 0, flat)
    return _C.reshape(rows, list(input.shape) + [weight.shape[1]])
