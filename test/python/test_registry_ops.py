"""The generated end-to-end test: every dialect op of the registry (declared
once in ODS, with its numpy reference) runs from Python on meshes (4,) and
(2, 2) with several input placements, and through dtorch-run on 4 ranks in 2
processes, against numpy on the full tensors. Samples come per op family, so
a new op of a known family is tested without writing a test."""
import itertools
import math
import os
import subprocess

import numpy as np
import pytest

import dtorch
from dtorch import Partial, Replicate, Shard, _build_info

from conftest import assert_close

RUN = os.path.join(_build_info.BUILD_DIR, "bin", "dtorch-run")


# ---- numpy references named in ODS ---------------------------------------------
def ref_gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))


def ref_argreduce(fn, x, dim, keepdim):
    out = fn(x, axis=dim)
    return np.expand_dims(out, dim) if keepdim else out


def ref_scatter_add(x, dim, index, src):
    out = x.copy()
    for p in itertools.product(*[range(s) for s in index.shape]):
        q = list(p)
        q[dim] = index[p]
        out[tuple(q)] += src[p]
    return out


def ref_topk_indices(x, k, dim, largest):
    order = np.argsort(-x if largest else x, axis=dim, kind="stable")
    return np.take(order, np.arange(k), axis=dim)


def ref_iota(shape, dim, start, step):
    idx = np.indices(shape)[dim] if shape else np.zeros(())
    return start + step * idx


REFS = dict(np=np, ref_gelu=ref_gelu, ref_argreduce=ref_argreduce,
            ref_topk_indices=ref_topk_indices,
            ref_scatter_add=ref_scatter_add, ref_iota=ref_iota)


# ---- samples per family: (numpy inputs by name, params, build(dtorch inputs)) --------
def _rng(seed):
    return np.random.default_rng(seed)


def samples(entry):
    """Yields (label, arrays, params, build) for one registry entry."""
    name, fam = entry["name"], entry["family"]
    rng = _rng(abs(hash(name)) % 1000)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    if fam == "unary":
        x = f(5, 3)
        if name in ("log", "sqrt", "rsqrt"):
            x = np.abs(x) + 0.5
        yield "5x3", dict(x=x), {}, lambda t, p: getattr(dtorch, name)(t["x"])
    elif fam == "binary":
        a, b = f(5, 3), f(5, 3)
        if name == "pow":
            a = np.abs(a) + 0.5
        if name == "div":
            b = np.where(np.abs(b) < 0.2, 1.0, b).astype(np.float32)
        yield "5x3", dict(a=a, b=b), {}, lambda t, p: getattr(dtorch, name)(t["a"], t["b"])
    elif fam == "compare":
        a = rng.integers(0, 3, (5, 3)).astype(np.float32)
        b = rng.integers(0, 3, (5, 3)).astype(np.float32)
        yield "5x3", dict(a=a, b=b), {}, lambda t, p: getattr(dtorch, name)(t["a"], t["b"])
    elif fam == "where":
        yield "5x3", dict(c=rng.random((5, 3)) < 0.5, a=f(5, 3), b=f(5, 3)), {}, \
            lambda t, p: dtorch.where(t["c"], t["a"], t["b"])
    elif fam == "reduction":
        fn = entry["functions"][0]
        for dims, keepdim in (([1], False), ([0], True), ([0, 1], False)):
            yield f"dims{dims}{'k' if keepdim else ''}", dict(x=f(5, 3)), \
                dict(dims=tuple(dims), keepdim=keepdim), \
                lambda t, p: getattr(dtorch, fn)(t["x"], list(p["dims"]), p["keepdim"])
    elif fam == "argreduce":
        for dim, keepdim in ((1, False), (0, True)):
            yield f"dim{dim}", dict(x=f(5, 3)), dict(dim=dim, keepdim=keepdim), \
                lambda t, p: getattr(dtorch, name)(t["x"], p["dim"], p["keepdim"])
    elif fam == "topk":
        for dim, k, largest in ((1, 2, 1), (0, 3, 0)):
            yield f"dim{dim}k{k}", dict(x=f(5, 4)), dict(dim=dim, k=k, largest=largest), \
                lambda t, p: dtorch.topk(t["x"], p["k"], p["dim"], bool(p["largest"])).indices
    elif fam == "matmul":
        if name == "bmm":
            yield "2x5x3", dict(a=f(2, 5, 3), b=f(2, 3, 4)), {}, \
                lambda t, p: dtorch.bmm(t["a"], t["b"])
        else:
            yield "5x3", dict(a=f(5, 3), b=f(3, 4)), {}, lambda t, p: dtorch.matmul(t["a"], t["b"])
    elif fam == "shape":
        if name == "reshape":
            yield "6x4", dict(x=f(6, 4)), dict(shape=(3, 8)), \
                lambda t, p: dtorch.reshape(t["x"], list(p["shape"]))
        elif name == "transpose":
            yield "6x4", dict(x=f(6, 4)), dict(perm=(1, 0)), \
                lambda t, p: dtorch.permute(t["x"], list(p["perm"]))
        else:
            yield "4", dict(x=f(4)), dict(shape=(5, 4)), \
                lambda t, p: dtorch.broadcast_to(t["x"], list(p["shape"]))
    elif fam == "slice":
        yield "7x6", dict(x=f(7, 6)), dict(offsets=(1, 0), sizes=(3, 6), strides=(2, 1)), \
            lambda t, p: t["x"][1:7:2]
        yield "7x6-cols", dict(x=f(7, 6)), dict(offsets=(0, 1), sizes=(7, 2), strides=(1, 3)), \
            lambda t, p: t["x"][:, 1::3]
    elif fam == "concat":
        yield "dim1", dict(a=f(5, 2), b=f(5, 3)), dict(dim=1), \
            lambda t, p: dtorch.cat([t["a"], t["b"]], 1)
    elif fam == "index":
        if name == "gather":
            yield "dim1", dict(x=f(5, 4), index=rng.integers(0, 4, (5, 3))), dict(dim=1), \
                lambda t, p: dtorch.gather(t["x"], 1, t["index"])
        elif name == "index_select":
            yield "dim0", dict(x=f(6, 3), index=rng.integers(0, 6, (5,))), dict(dim=0), \
                lambda t, p: dtorch.index_select(t["x"], 0, t["index"])
        else:
            yield "dim0", dict(x=f(4, 3), index=rng.integers(0, 4, (3, 3)), src=f(3, 3)), \
                dict(dim=0), lambda t, p: dtorch.scatter_add(t["x"], 0, t["index"], t["src"])
    elif name == "iota":
        for start, end, step in ((0, 9, 1), (2, 13, 3)):
            yield f"arange{start}_{end}_{step}", {}, \
                dict(shape=(len(range(start, end, step)),), dim=0, start=start, step=step), \
                lambda t, p, r=(start, end, step): dtorch.arange(*r, device_mesh=t["mesh"],
                                                                  placements=t["placements"])
    elif fam == "triangle":
        for diagonal in (0, -1, 2):
            yield f"diag{diagonal}", dict(x=f(5, 6)), dict(diagonal=diagonal), \
                lambda t, p: getattr(dtorch, name)(t["x"], p["diagonal"])


def reference(entry, arrays, params):
    env = dict(REFS)
    env.update(arrays)
    env.update(params)
    if "a" in arrays and "b" in arrays and entry["family"] == "concat":
        env["xs"] = [arrays["a"], arrays["b"]]
    return eval(entry["reference"], env)  # noqa: S307 - ODS text of this project


def entries_under_test():
    return [e for e in dtorch.op_registry()
            if e["is_dialect_op"] and e["reference"] and e["name"] not in ("full",)]


def placements_for(arr, mesh, k):
    """A few input layouts per mesh: replicated, sharded on each dim in turn."""
    nd = arr.ndim
    choices = [Replicate()] + [Shard(d) for d in range(nd)]
    return [choices[(k + a) % len(choices)] for a in range(mesh.ndim)]


CASES = [(e["name"], label) for e in entries_under_test() for label, *_ in samples(e)]


@pytest.mark.parametrize("name,label", CASES)
@pytest.mark.parametrize("mesh_key", ["4", "2x2"])
def test_op_from_python(dt, meshes, name, label, mesh_key):
    entry = next(e for e in entries_under_test() if e["name"] == name)
    arrays, params, build = next((a, p, b) for lab, a, p, b in samples(entry) if lab == label)
    want = reference(entry, arrays, params)
    mesh = meshes[mesh_key]
    for k in range(3):
        ts = {n: dt.distribute_tensor(a, mesh, placements_for(a, mesh, k + i))
              for i, (n, a) in enumerate(arrays.items())}
        ts["mesh"] = mesh
        ts["placements"] = placements_for(want, mesh, k)
        got = build(ts, params)
        assert tuple(got.shape) == want.shape
        assert_close(got.numpy(), want, tol=1e-5)


@pytest.mark.parametrize("name", sorted({n for n, _ in CASES}))
def test_op_through_dtorch_run(dt, meshes, tmp_path, name):
    entry = next(e for e in entries_under_test() if e["name"] == name)
    label, arrays, params, build = next(iter(samples(entry)))
    want = reference(entry, arrays, params)
    mesh = meshes["4"]
    ts = [dt.distribute_tensor(a, mesh, placements_for(a, mesh, i))
          for i, a in enumerate(arrays.values())]
    path = str(tmp_path / f"{name}.mlir")
    extra = dict(mesh=mesh, placements=placements_for(want, mesh, 1))
    dt.save_graph(lambda *xs: build(dict(zip(arrays, xs), **extra), params), ts, path)
    assert f"dtensor.{name}" in open(path).read()
    args = [RUN, path, "--world-size", "4", "--procs", "2", "--output-dir", str(tmp_path)]
    for n, a in arrays.items():
        np.save(tmp_path / f"{n}.npy", a)
        args += ["--input", str(tmp_path / f"{n}.npy")]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_close(np.load(tmp_path / "out0.npy"), want, tol=1e-5)


def test_partial_inputs_pass_only_through_linear_ops(dt, meshes):
    """A Partial(sum) operand of a non-linear op is reduced first; of a
    linear one it stays Partial."""
    mesh = meshes["4"]
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    p = dt.distribute_tensor(x, mesh, [Replicate()]).redistribute(mesh, [Partial("sum")])
    assert dt.tril(p).placements[0].is_partial()
    assert not (p > 3.0).placements[0].is_partial()
    assert_close((p > 3.0).numpy(), x > 3.0)
    assert_close(dt.tril(p).numpy(), np.tril(x))
