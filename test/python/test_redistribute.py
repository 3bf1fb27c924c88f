"""Meshes of 1 to 3 dims end to end on the 4 local ranks: creation, ops,
redistribution (multi-axis changes included) and fetching, against numpy and
against the pieces torch.chunk gives in mesh-dim order."""
import itertools

import numpy as np
import pytest

from conftest import assert_close
from dtorch import Partial, Replicate, Shard

R, S0, S1 = Replicate(), Shard(0), Shard(1)

MESH_SHAPES = [(4,), (2, 2), (1, 4), (2, 1, 2), (1, 2, 2)]


def names(shape):
    return {1: None, 2: ("dp", "tp"), 3: ("dp", "cp", "tp")}[len(shape)]


@pytest.fixture(scope="module")
def mesh_of_shape(dt):
    made = {}

    def get(shape):
        if shape not in made:
            made[shape] = dt.init_device_mesh("cpu", shape, mesh_dim_names=names(shape))
        return made[shape]
    return get


def chunk_bounds(size, parts, index):
    """torch.chunk: pieces of ceil(size / parts), the trailing ones shorter."""
    full = -(-size // parts) if parts else size
    lo = min(size, full * index)
    return lo, min(size, full * (index + 1))


def expected_piece(full, mesh_shape, placements, coords):
    """The box of `full` a rank at `coords` holds: each Shard splits the
    piece left by the earlier mesh dims."""
    box = [[0, n] for n in full.shape]
    for axis, p in enumerate(placements):
        if isinstance(p, Shard):
            lo, hi = box[p.dim]
            a, b = chunk_bounds(hi - lo, mesh_shape[axis], coords[axis])
            box[p.dim] = [lo + a, lo + b]
    return full[tuple(slice(lo, hi) for lo, hi in box)]


def check_pieces(x, full, mesh):
    ranks = mesh.mesh
    pieces = x.local_shards()
    for coords in itertools.product(*[range(n) for n in mesh.shape]):
        want = expected_piece(full, mesh.shape, x.placements, coords)
        got = pieces[int(ranks[coords])]
        assert got.shape == want.shape, (x.placements, coords)
        np.testing.assert_array_equal(got, want)


def layouts(ndim):
    """A spread of placements per mesh dim for 2-D tensors (no Partial)."""
    per_axis = [R, S0, S1]
    return list(itertools.product(per_axis, repeat=ndim))


@pytest.mark.parametrize("shape", MESH_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_mesh_creation_and_pieces(dt, mesh_of_shape, shape):
    mesh = mesh_of_shape(shape)
    assert mesh.shape == shape and mesh.ndim == len(shape) and mesh.size() == 4
    full = np.arange(7 * 5, dtype=np.float32).reshape(7, 5)
    for placements in layouts(len(shape)):
        x = dt.tensor(full, device_mesh=mesh, placements=list(placements))
        assert x.placements == tuple(placements)
        check_pieces(x, full, mesh)
        np.testing.assert_array_equal(x.numpy(), full)


@pytest.mark.parametrize("shape", MESH_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_every_redistribution_between_shard_layouts(dt, mesh_of_shape, shape):
    mesh = mesh_of_shape(shape)
    full = (np.arange(7 * 5, dtype=np.float32).reshape(7, 5) % 11) - 4
    for src in layouts(len(shape)):
        x = dt.tensor(full, device_mesh=mesh, placements=list(src))
        outs = [(dst, x.redistribute(mesh, list(dst))) for dst in layouts(len(shape))]
        for dst, y in outs:
            assert y.placements == dst
            check_pieces(y, full, mesh)


@pytest.mark.parametrize("shape", MESH_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_ops_on_every_mesh(dt, mesh_of_shape, shape):
    mesh = mesh_of_shape(shape)
    n = len(shape)
    an = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) / 10
    bn = np.arange(6 * 4, dtype=np.float32).reshape(6, 4) / 7
    a = dt.tensor(an, device_mesh=mesh, placements=[S0] + [S1] * (n - 1))
    b = dt.tensor(bn, device_mesh=mesh, placements=[R] * (n - 1) + [S0])
    y = (a @ b).relu() + 1.0
    assert_close(y.numpy(), np.maximum(an @ bn, 0) + 1.0, tol=1e-4)
    s = (a * a).sum(1)
    assert_close(s.numpy(), (an * an).sum(1), tol=1e-4)
    # A partial result reduced by redistribution, on every mesh dim at once.
    p = a @ b
    r = p.redistribute(mesh, [R] * n)
    assert_close(r.numpy(), an @ bn, tol=1e-4)
    check_pieces(r, r.numpy(), mesh)


@pytest.mark.parametrize("shape", [(2, 2), (2, 1, 2), (1, 2, 2)],
                         ids=lambda s: "x".join(map(str, s)))
def test_partial_on_several_axes_to_shards(dt, mesh_of_shape, shape):
    mesh = mesh_of_shape(shape)
    n = len(shape)
    full = np.arange(6 * 5, dtype=np.float64).reshape(6, 5) - 7
    rep = dt.tensor(full, device_mesh=mesh, placements=[R] * n, dtype=dt.float64)
    for op, reduce in (("sum", None), ("max", None), ("avg", None)):
        p = rep.redistribute(mesh, [Partial(op)] * n)
        assert p.placements == (Partial(op),) * n
        for dst in ([S0] * n, [S0] + [S1] * (n - 1), [S1] + [R] * (n - 1), [R] * n):
            y = p.redistribute(mesh, dst)
            assert y.placements == tuple(dst)
            check_pieces(y, full, mesh)


def test_multi_axis_plans_use_the_cheap_collectives(dt, mesh_of_shape):
    mesh = mesh_of_shape((2, 2))
    full = np.arange(8 * 8, dtype=np.float32).reshape(8, 8)
    # Slice the replicated axis first, then gather half as much.
    x = dt.tensor(full, device_mesh=mesh, placements=[S0, R])
    y = x.redistribute(mesh, [R, S1])
    check_pieces(y, full, mesh)
    row = list(dt.explain())[0]
    assert row["collectives"] == ['all_gather on "dp"']
    assert [s["kind"] for s in row["steps"]] == ["local_slice", "all_gather"]
    # 8x8 f32 in pieces of 4x4 after the slice: each rank sends 16 elements.
    assert row["bytes_per_rank"] == [64, 64, 64, 64]
    # Partial -> nested shard is one reduce_scatter.
    p = dt.tensor(full, device_mesh=mesh, placements=[S0, R]).redistribute(mesh, [S0, Partial()])
    dt.synchronize()  # p is computed in a segment of its own
    z = p.redistribute(mesh, [S0, S0])
    check_pieces(z, full, mesh)
    assert list(dt.explain())[-1]["collectives"] == ['reduce_scatter(sum) on "tp"']
    # Shard(0) -> Shard(1) inside a nest is one all_to_all.
    w = dt.tensor(full, device_mesh=mesh, placements=[S0, S0]).redistribute(mesh, [S0, S1])
    check_pieces(w, full, mesh)
    assert list(dt.explain())[-1]["collectives"] == ['all_to_all on "tp"']
