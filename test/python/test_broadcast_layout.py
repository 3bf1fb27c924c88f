"""An elementwise op whose operand is broadcast (a bias, a LayerNorm weight,
a mask) runs in the layout of the operand that already has the result's
shape, when bringing the broadcast operand there needs no communication:
the result keeps the activation's placements and the segment moves no
data. (Found by the sequence-parallel GPT of test_gpt_parity.py: the
LayerNorm weight's multiply turned (Shard(0), Shard(1)) into (Shard(1),
Shard(0)) through three all_to_alls.)"""
import numpy as np
import pytest

from dtorch import Partial, Replicate, Shard

R, S0, S1, S2 = Replicate(), Shard(0), Shard(1), Shard(2)


@pytest.mark.parametrize("placements", [[S0, S1], [S0, R], [R, S1], [S0, S2], [S1, S0],
                                        [S1, S1], [R, R]])
@pytest.mark.parametrize("op", ["mul", "add", "sub_reversed", "maximum"])
def test_broadcast_operand_joins_the_full_operand_layout(dt, meshes, placements, op):
    mesh = meshes["2x2"]
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((4, 6, 8)).astype(np.float32)
    wn = rng.standard_normal(8).astype(np.float32)
    x = dt.tensor(xn, device_mesh=mesh, placements=placements)
    w = dt.tensor(wn, device_mesh=mesh)
    fns = {"mul": (lambda a, b: a * b, lambda a, b: a * b),
           "add": (lambda a, b: a + b, lambda a, b: a + b),
           "sub_reversed": (lambda a, b: b - a, lambda a, b: b - a),
           "maximum": (lambda a, b: a.maximum(b), np.maximum)}
    fn, ref = fns[op]
    y = fn(x, w)
    assert y.placements == tuple(placements)
    np.testing.assert_allclose(y.numpy(), ref(xn, wn), rtol=1e-6)
    # Nothing moves between ranks (a replicated operand may be sliced).
    assert "no communication" in str(dt.explain())
    assert all(not any(row["bytes_per_rank"]) for row in dt.explain())


def test_comparison_and_where_keep_the_layout(dt, meshes):
    mesh = meshes["2x2"]
    rng = np.random.default_rng(1)
    xn = rng.standard_normal((4, 6, 8)).astype(np.float32)
    tn = rng.standard_normal(8).astype(np.float32)
    x = dt.tensor(xn, device_mesh=mesh, placements=[S0, S1])
    t = dt.tensor(tn, device_mesh=mesh)
    mask = x > t
    assert mask.placements == (S0, S1)
    y = dt.where(mask, x, t)
    assert y.placements == (S0, S1)
    np.testing.assert_array_equal(y.numpy(), np.where(xn > tn, xn, tn))
    causal = dt.tensor(np.tril(np.ones((6, 8), dtype=bool)), device_mesh=mesh)
    z = dt.where(causal, x, 0.0)
    assert z.placements == (S0, S1)
    np.testing.assert_array_equal(z.numpy(), np.where(np.tril(np.ones((6, 8), bool)), xn, 0))


def test_partial_activation_and_sharded_bias(dt, meshes):
    mesh = meshes["2x2"]
    rng = np.random.default_rng(2)
    xn = rng.standard_normal((4, 8)).astype(np.float32)
    wn = rng.standard_normal((8, 6)).astype(np.float32)
    bn = rng.standard_normal(6).astype(np.float32)
    x = dt.tensor(xn, device_mesh=mesh, placements=[S0, S1])
    w = dt.tensor(wn, device_mesh=mesh, placements=[R, S0])
    h = x @ w  # a partial sum on "tp"
    assert h.placements == (S0, Partial("sum"))
    # A replicated scale joins it as Replicate; the multiply is linear in
    # the partial operand, so the partial passes through.
    y = h * dt.tensor(bn, device_mesh=mesh)
    assert y.placements == (S0, Partial("sum"))
    np.testing.assert_allclose(y.numpy(), (xn @ wn) * bn, rtol=1e-5, atol=1e-6)
    # A bias sharded where the activation is not: the op picks its own
    # layout (communication is needed either way) and is still right.
    b = dt.tensor(bn, device_mesh=mesh, placements=[R, S0])
    z = dt.tensor(xn @ wn, device_mesh=mesh, placements=[S0, R]) + b
    np.testing.assert_allclose(z.numpy(), xn @ wn + bn, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mesh_name, xp, wp", [("4", [S0], [S0]), ("4", [S0], [R]),
                                               ("2x2", [S0, R], [S0, R]),
                                               ("2x2", [S0, S1], [R, R])])
def test_the_remembered_broadcast_choice_matches_the_first(dt, meshes, mesh_name, xp, wp):
    """The client remembers whether a broadcast to the other operand's layout
    is free, by shapes, placements, mesh and element size: the third
    multiply takes the remembered choice and must lay out and compute what
    the first one did; a sharded bias must still be gathered, a replicated
    one never."""
    mesh = meshes[mesh_name]
    rng = np.random.default_rng(3)
    xn = rng.standard_normal((4, 6, 8)).astype(np.float32)
    wn = rng.standard_normal(8).astype(np.float32)
    seen = []
    for _ in range(3):
        x = dt.tensor(xn, device_mesh=mesh, placements=xp)
        w = dt.tensor(wn, device_mesh=mesh, placements=wp)
        y = x * w
        np.testing.assert_array_equal(y.numpy(), xn * wn)
        moved = any(any(row["bytes_per_rank"]) for row in dt.explain())
        seen.append((y.placements, moved))
    assert seen[1:] == seen[:1] * 2
    assert seen[0][1] == any(p.is_shard() for p in wp)
