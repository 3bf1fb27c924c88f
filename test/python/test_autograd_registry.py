"""The generated gradient test: every op of the registry with a gradient
formula (and every differentiable decomposition) is differentiated by
dtorch's backward in float64 on meshes (4,) and (2, 2), with inputs laid out
Shard / Replicate / Partial, and compared with central finite differences of
the op's numpy reference on the full tensors (1e-6 relative). Samples come
from test_registry_ops (per family), so an op of a known family with a new
formula is tested without writing a test."""
import math

import numpy as np
import pytest

import dtorch
import dtorch.nn.functional as F
from dtorch import Partial, Replicate, Shard

from test_registry_ops import ref_scatter_add, reference, samples

EPS = 1e-6
TOL = 1e-6


def fd_grad(fn, arrays, name, w):
    """d/d arrays[name] of sum(fn(arrays) * w), by central differences."""
    arrays = {k: np.array(v, copy=True) for k, v in arrays.items()}
    a = arrays[name]
    out = np.zeros_like(a)
    for idx in np.ndindex(a.shape):
        orig = a[idx]
        a[idx] = orig + EPS
        plus = np.sum(np.asarray(fn(arrays)) * w)
        a[idx] = orig - EPS
        minus = np.sum(np.asarray(fn(arrays)) * w)
        a[idx] = orig
        out[idx] = (plus - minus) / (2 * EPS)
    return out


def layout(arr, mesh, k, partial_ok):
    """Mixed placements per mesh dim, cycling through Replicate, Partial and
    a shard of every dim."""
    choices = [Replicate()] + ([Partial()] if partial_ok else []) + \
        [Shard(d) for d in range(arr.ndim)]
    return [choices[(k + 2 * a) % len(choices)] for a in range(mesh.ndim)]


def is_float(a):
    return np.asarray(a).dtype.kind == "f"


def check_gradients(dt, mesh, arrays, ref, build, k, wrt=None):
    """Backward of build(tensors) with a random upstream gradient against
    finite differences of ref(arrays); every float array is differentiated
    (or those named in `wrt`)."""
    arrays = {n: (a.astype(np.float64) if is_float(a) else a) for n, a in arrays.items()}
    wrt = [n for n, a in arrays.items() if is_float(a)] if wrt is None else wrt
    want_out = np.asarray(ref(arrays))
    rng = np.random.default_rng(k)
    w = np.asarray(rng.standard_normal(want_out.shape), dtype=np.float64)
    ts = {}
    for i, (n, a) in enumerate(arrays.items()):
        t = dt.distribute_tensor(a, mesh, layout(a, mesh, k + i, is_float(a)))
        if n in wrt:
            t.requires_grad_()
        ts[n] = t
    out = build(ts)
    assert tuple(out.shape) == want_out.shape
    assert out.requires_grad and out.grad_fn is not None
    # (distribute_tensor gives a 0-d array shape (1,): reshape it back)
    gw = dt.distribute_tensor(w.reshape(w.shape or (1,)), mesh, layout(w, mesh, k + 1, True))
    gw = gw.reshape(w.shape)
    out.backward(gw)
    for n in wrt:
        want = fd_grad(ref, arrays, n, w)
        got = ts[n].grad
        assert got is not None, f"no gradient for {n}"
        assert got.dtype == dtorch.float64
        assert got.placements == tuple(Replicate() if p.is_partial() else p
                                       for p in ts[n].placements)
        np.testing.assert_allclose(got.numpy(), want, rtol=TOL, atol=TOL,
                                   err_msg=f"gradient of {n}")


# ---- dialect ops with a gradient formula ---------------------------------------------
def differentiable_entries():
    return [e for e in dtorch.op_registry() if e["is_dialect_op"] and e["gradient"]]


# Ops whose registry samples do not fit a gradient check get their own here:
# (label, arrays, numpy reference over arrays, build over tensors).
def extra_samples(name):
    rng = np.random.default_rng(11)
    f = lambda *s: rng.standard_normal(s)  # noqa: E731
    if name == "cast":
        yield "f64-f32-f64", dict(x=f(5, 3)), lambda a: a["x"] * 3.0, \
            lambda t: (t["x"].float() * 3.0).double()
    elif name == "redistribute":
        def build(t):
            p = [Shard(1)] + [Replicate()] * (t["x"].device_mesh.ndim - 1)
            return t["x"].redistribute(t["x"].device_mesh, p) * 2.0
        yield "to-S1", dict(x=f(4, 6)), lambda a: a["x"] * 2.0, build
    elif name == "transfer":
        # Every stage's block goes one stage on, through tanh, and back: the
        # result is tanh(x) on any number of stages only when the forward
        # and the gradient both move each block to the right place.
        def build(t):
            from dtorch.distributed.pipelining import transfer
            mesh = t["x"].device_mesh
            stages = list(range(mesh.shape[0]))
            on = stages[1:] + stages[:1]
            x = t["x"].redistribute(mesh, [Shard(0)] + [Replicate()] * (mesh.ndim - 1))
            return transfer(transfer(x, 0, stages, on).tanh(), 0, on, stages)
        yield "ring-and-back", dict(x=f(4, 6)), lambda a: np.tanh(a["x"]), build
    elif name == "all_to_all_v":
        # Every slot full: the exchange transposes the blocks' segments, and
        # the exchange back (counts transposed) undoes it, through tanh; the
        # counts' masking is checked against numpy in test_all_to_all_v.py.
        def build(t):
            from dtorch.autograd import all_to_all_v, transposed_counts
            mesh = t["x"].device_mesh
            n = mesh.shape[0]
            x = t["x"].reshape(n, 32 // n, 2)
            counts = dtorch.full((n, n), 32 // n // n, dtype=dtorch.int64, device_mesh=mesh)
            there = all_to_all_v(x, counts, 0).tanh()
            return all_to_all_v(there, transposed_counts(counts), 0).reshape(32, 2)
        yield "full-slots-and-back", dict(x=f(32, 2)), lambda a: np.tanh(a["x"]), build
    elif name == "pow":
        yield "scalar-exponent", dict(x=np.abs(f(5, 3)) + 0.5), lambda a: a["x"] ** 3, \
            lambda t: t["x"] ** 3
        yield "scalar-base", dict(x=f(5, 3)), lambda a: 2.0 ** a["x"], lambda t: 2.0 ** t["x"]
    elif name == "matmul":
        yield "broadcast-batch", dict(a=f(2, 3, 4), b=f(4, 5)), lambda a: a["a"] @ a["b"], \
            lambda t: t["a"] @ t["b"]
    elif name == "broadcast_to":
        yield "add-bias", dict(a=f(5, 3), b=f(3)), lambda a: a["a"] + a["b"], \
            lambda t: t["a"] + t["b"]
    elif name == "slice":
        yield "2d-strided", dict(x=f(7, 8)), lambda a: a["x"][1:6:2, 2:8:3], \
            lambda t: t["x"][1:6:2, 2:8:3]
    elif name == "scatter_add":
        index = rng.integers(0, 4, (2, 3))
        yield "src-larger-than-index", dict(x=f(4, 3), index=index, src=f(3, 3)), \
            lambda a: ref_scatter_add(a["x"], 0, a["index"], a["src"]), \
            lambda t: dtorch.scatter_add(t["x"], 0, t["index"], t["src"])
    elif name == "concat":
        yield "three-dim0", dict(a=f(2, 3), b=f(1, 3), c=f(3, 3)), \
            lambda a: np.concatenate([a["a"], a["b"], a["c"]], 0), \
            lambda t: dtorch.cat([t["a"], t["b"], t["c"]], 0)


def gradient_cases():
    cases = []
    for e in differentiable_entries():
        for label, *_ in samples(e):
            cases.append((e["name"], "registry:" + label))
        for label, *_ in extra_samples(e["name"]):
            cases.append((e["name"], "extra:" + label))
    return cases


CASES = gradient_cases()


def test_every_formula_has_a_sample():
    named = {n for n, _ in CASES}
    missing = [e["name"] for e in differentiable_entries() if e["name"] not in named]
    assert not missing, f"ops with a gradient formula but no gradient test sample: {missing}"


def test_formulas_cover_the_differentiable_ops():
    """Every dialect op with a float result and float operands that torch
    differentiates declares its formulas."""
    want = """neg abs exp log sqrt rsqrt relu tanh sigmoid gelu silu sin cos add sub mul div pow
    maximum minimum where cast matmul bmm sum mean max min reshape transpose broadcast_to slice
    concat gather index_select scatter_add tril triu redistribute""".split()
    reg = {e["name"]: e for e in dtorch.op_registry()}
    for name in want:
        e = reg[name]
        n = 1 if e["num_operands"] < 0 else e["num_operands"]
        assert len(e["gradient"]) == n, name
        assert len(e["operand_names"]) == n, name
    assert reg["where"]["gradient"][0] == "" and reg["gather"]["gradient"][1] == ""


@pytest.mark.parametrize("name,label", CASES)
@pytest.mark.parametrize("mesh_key", ["4", "2x2"])
def test_op_gradient(dt, meshes, name, label, mesh_key):
    entry = next(e for e in differentiable_entries() if e["name"] == name)
    mesh = meshes[mesh_key]
    kind, _, lab = label.partition(":")
    if kind == "registry":
        arrays, params, build = next((a, p, b) for lb, a, p, b in samples(entry) if lb == lab)
        ref = lambda a: reference(entry, a, params)  # noqa: E731
        fn = lambda t: build(dict(t, mesh=mesh, placements=None), params)  # noqa: E731
    else:
        arrays, ref, fn = next((a, r, b) for lb, a, r, b in extra_samples(name) if lb == lab)
    for k in range(3):
        check_gradients(dt, mesh, arrays, ref, fn, k)


# ---- decompositions: their gradients come from the formulas of their ops ---------------
def np_softmax(x, dim):
    e = np.exp(x - x.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


def np_log_softmax(x, dim):
    m = x.max(dim, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(dim, keepdims=True))


def np_cross_entropy(x, target, smoothing=0.0):
    logp = np_log_softmax(x, 1)
    valid = target != -100
    nll = -logp[np.arange(len(target)), np.where(valid, target, 0)]
    per = (1 - smoothing) * nll + smoothing * (-logp.mean(1))
    return per[valid].mean()


def np_sdpa(q, k, v, causal):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    return np_softmax(s, -1) @ v


def decomposition_samples():
    rng = np.random.default_rng(5)
    f = lambda *s: rng.standard_normal(s)  # noqa: E731
    target = rng.integers(0, 5, (6,))
    target[1] = -100
    tokens = rng.integers(0, 7, (2, 3))
    return {
        "softmax": (dict(x=f(4, 5)), lambda a: np_softmax(a["x"], 1),
                    lambda t: dtorch.softmax(t["x"], 1)),
        "log_softmax": (dict(x=f(4, 5)), lambda a: np_log_softmax(a["x"], 0),
                        lambda t: F.log_softmax(t["x"], 0)),
        "logsumexp": (dict(x=f(4, 5)),
                      lambda a: np.log(np.exp(a["x"]).sum(1)),
                      lambda t: dtorch.logsumexp(t["x"], 1)),
        "var": (dict(x=f(4, 5)), lambda a: a["x"].var(1, ddof=1),
                lambda t: dtorch.var(t["x"], 1)),
        "std": (dict(x=f(4, 5)), lambda a: a["x"].std(0, ddof=0),
                lambda t: t["x"].std(0, correction=0)),
        "layer_norm": (dict(x=f(4, 6), w=f(6), b=f(6)),
                       lambda a: (a["x"] - a["x"].mean(1, keepdims=True)) /
                       np.sqrt(a["x"].var(1, keepdims=True) + 1e-5) * a["w"] + a["b"],
                       lambda t: F.layer_norm(t["x"], (6,), t["w"], t["b"])),
        "rms_norm": (dict(x=f(4, 6), w=f(6)),
                     lambda a: a["x"] / np.sqrt((a["x"] ** 2).mean(1, keepdims=True) + 1e-6)
                     * a["w"],
                     lambda t: F.rms_norm(t["x"], [6], t["w"], eps=1e-6)),
        "cross_entropy": (dict(x=f(6, 5), target=target),
                          lambda a: np_cross_entropy(a["x"], a["target"], 0.1),
                          lambda t: F.cross_entropy(t["x"], t["target"], label_smoothing=0.1)),
        "mse_loss": (dict(a=f(4, 5), b=f(4, 5)), lambda a: ((a["a"] - a["b"]) ** 2).mean(),
                     lambda t: F.mse_loss(t["a"], t["b"])),
        "scaled_dot_product_attention": (
            dict(q=f(2, 2, 4, 3), k=f(2, 2, 4, 3), v=f(2, 2, 4, 3)),
            lambda a: np_sdpa(a["q"], a["k"], a["v"], True),
            lambda t: F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=True)),
        "linear": (dict(x=f(4, 3), w=f(5, 3), b=f(5)),
                   lambda a: a["x"] @ a["w"].T + a["b"],
                   lambda t: F.linear(t["x"], t["w"], t["b"])),
        "embedding": (dict(tokens=tokens, w=f(7, 4)), lambda a: a["w"][a["tokens"]],
                      lambda t: F.embedding(t["tokens"], t["w"])),
        "clamp": (dict(x=f(5, 4)), lambda a: np.clip(a["x"], -0.5, 0.7),
                  lambda t: dtorch.clamp(t["x"], -0.5, 0.7)),
        "masked_fill": (dict(x=f(5, 4), m=f(5, 4) > 0), lambda a: np.where(a["m"], 2.0, a["x"]),
                        lambda t: t["x"].masked_fill(t["m"], 2.0)),
        "square": (dict(x=f(5, 4)), lambda a: a["x"] ** 2, lambda t: dtorch.square(t["x"])),
        "stack": (dict(a=f(3, 4), b=f(3, 4)), lambda a: np.stack([a["a"], a["b"]], 1),
                  lambda t: dtorch.stack([t["a"], t["b"]], 1)),
        "max_dim": (dict(x=f(5, 4)), lambda a: a["x"].max(1), lambda t: t["x"].max(1).values),
        "topk": (dict(x=f(5, 6)), lambda a: -np.sort(-a["x"], 1)[:, :3],
                 lambda t: dtorch.topk(t["x"], 3, 1).values),
    }


# Decompositions that have no gradient to check: integer results, randomness.
NOT_DIFFERENTIABLE = {"one_hot", "dropout"}


def test_every_decomposition_has_a_gradient_sample():
    have = set(decomposition_samples()) | NOT_DIFFERENTIABLE
    missing = [e["name"] for e in dtorch.op_registry()
               if not e["is_dialect_op"] and e["name"] not in have]
    assert not missing, missing


@pytest.mark.parametrize("name", sorted(decomposition_samples()))
@pytest.mark.parametrize("mesh_key", ["4", "2x2"])
def test_decomposition_gradient(dt, meshes, name, mesh_key):
    arrays, ref, build = decomposition_samples()[name]
    for k in range(2):
        check_gradients(dt, meshes[mesh_key], arrays, ref, build, k)
