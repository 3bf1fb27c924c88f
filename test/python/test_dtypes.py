"""Every dialect op of the registry on every dtype it declares besides
float32 (float64, float16 and bfloat16 stored in 16 bits and computed in
float32, int32, int64, bool), from Python on a 2x2 mesh with sharded inputs,
against numpy on the full tensors at the dtype's own tolerance."""
import ml_dtypes
import numpy as np
import pytest

import dtorch
from dtorch import Replicate, Shard

from test_registry_ops import entries_under_test, reference, samples

NP = {"f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
      "i32": np.int32, "i64": np.int64, "i1": np.bool_}
TOL = {"f64": 1e-12, "f16": 4e-3, "bf16": 3e-2, "i32": 0, "i64": 0, "i1": 0}

# Families whose samples make sense for integer and bool inputs.
INTEGER_FAMILIES = {"binary", "compare", "where", "reduction", "argreduce", "topk", "matmul",
                    "shape", "slice", "concat", "index", "triangle"}
BOOL_FAMILIES = {"compare", "where", "shape", "slice", "concat", "triangle"}
NOT_FOR_INTEGERS = {"div", "mean", "pow"}  # integer div is float; mean needs floats


def convert(arrays, dt):
    out = {}
    for name, a in arrays.items():
        if name in ("index",) or a.dtype == np.bool_:
            out[name] = a
        elif dt == "i1":
            out[name] = a > 0
        elif dt in ("i32", "i64"):
            out[name] = np.round(a * 3).astype(NP[dt])
        else:
            out[name] = a.astype(NP[dt])
    return out


def cases():
    for e in entries_under_test():
        fam = e["family"]
        for dt in e["dtypes"]:
            if dt == "f32" or dt not in NP:
                continue
            if dt in ("i32", "i64") and (fam not in INTEGER_FAMILIES or e["name"] in NOT_FOR_INTEGERS):
                continue
            if dt == "i1" and fam not in BOOL_FAMILIES:
                continue
            if fam == "creation":
                continue
            if e["float_only"] and dt not in ("f64", "f16", "bf16"):
                continue
            yield e["name"], dt


@pytest.mark.parametrize("name,key", sorted(set(cases())))
def test_op_on_dtype(dt_module, meshes, name, key):
    dt = key
    mesh = meshes["2x2"]
    entry = next(e for e in entries_under_test() if e["name"] == name)
    for label, arrays, params, build in samples(entry):
        arrays = convert(arrays, dt)
        wide = {k: (v.astype(np.float64) if v.dtype.kind == "f" or v.dtype == NP["bf16"] else v)
                for k, v in arrays.items()}
        want = np.asarray(reference(entry, wide, params))
        ts = {}
        for i, (n, a) in enumerate(arrays.items()):
            p = [Shard(0), Replicate()] if i % 2 == 0 else [Replicate(), Shard(a.ndim - 1)]
            ts[n] = dt_module.distribute_tensor(a, mesh, p)
        got = build(ts, params)
        if entry["family"] not in ("compare", "argreduce", "topk"):
            assert got.dtype == getattr(dtorch, {"f64": "float64", "f16": "float16",
                                                 "bf16": "bfloat16", "i32": "int32",
                                                 "i64": "int64", "i1": "bool"}[dt]), label
        g = np.asarray(got.numpy())
        if g.dtype == NP["bf16"] or g.dtype == np.float16:
            g = g.astype(np.float64)
        assert g.shape == want.shape, label
        if TOL[dt]:
            np.testing.assert_allclose(g, want, rtol=TOL[dt], atol=TOL[dt] * 4, err_msg=label)
        else:
            np.testing.assert_array_equal(g, want.astype(g.dtype), err_msg=label)


@pytest.fixture
def dt_module(dt):
    return dt


def test_bfloat16_round_trip_and_rounding(dt, meshes):
    mesh = meshes["4"]
    a = np.array([1.0, 1.00390625, 3.14159, -2.5e-3, 65504.0], dtype=np.float32)
    t = dt.tensor(a, device_mesh=mesh, dtype=dt.bfloat16)
    assert t.dtype == dt.bfloat16
    got = t.numpy()
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(got, a.astype(ml_dtypes.bfloat16))
    back = t.float().numpy()
    np.testing.assert_array_equal(back, a.astype(ml_dtypes.bfloat16).astype(np.float32))
    h = dt.tensor(a, device_mesh=mesh, dtype=dt.float16, placements=[Shard(0)])
    np.testing.assert_array_equal(h.numpy(), a.astype(np.float16))


def test_promotion_between_dtypes(dt, meshes):
    mesh = meshes["4"]
    i = dt.tensor(np.arange(4, dtype=np.int32), device_mesh=mesh)
    h = dt.tensor(np.ones(4, dtype=np.float16), device_mesh=mesh)
    assert (i + 1).dtype == dt.int32
    assert (i + 1.5).dtype == dt.float32
    assert (i + h).dtype == dt.float16
    assert (h * 2.0).dtype == dt.float16
    assert (i / 2).dtype == dt.float32
    assert (i > 1).dtype == dt.bool
