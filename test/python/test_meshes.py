"""Flattened sub-meshes (DeviceMesh._flatten) and reshapes that keep a shard,
against numpy."""
import numpy as np
import pytest

from conftest import assert_close
from dtorch import Partial, Replicate, Shard
from dtorch.placement_types import from_raw

R, S0, S1, S2 = Replicate(), Shard(0), Shard(1), Shard(2)


@pytest.fixture(scope="module")
def mesh3(dt):
    return dt.init_device_mesh("cpu", (2, 1, 2), mesh_dim_names=("dp", "cp", "tp"))


@pytest.fixture(scope="module")
def mesh2(dt):
    return dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))


def root_placements(x, root):
    """The placements of `x` on its root mesh (what the compiler sees)."""
    assert x.device_mesh._root == root
    return tuple(from_raw(r) for r in x._placements_raw)


# ---- flattened views ----------------------------------------------------------

def test_flatten_gives_a_1d_view_known_to_the_parent(dt, mesh3):
    flat = mesh3["dp", "tp"]._flatten()
    assert flat.shape == (4,) and flat.ndim == 1 and flat.size() == 4
    assert flat.mesh_dim_names == ("dp_tp",)
    assert flat.mesh.reshape(-1).tolist() == [0, 1, 2, 3]
    assert mesh3["dp_tp"] == flat
    named = mesh3["dp", "tp"]._flatten("batch")
    assert named.mesh_dim_names == ("batch",) and mesh3["batch"] == named
    # A sub-mesh with several names is still a multi-dim view, as in torch.
    assert mesh3["dp", "tp"].shape == (2, 2)
    with pytest.raises(ValueError):
        mesh3["tp", "dp"]._flatten()
    with pytest.raises(ValueError):
        mesh3["dp", "cp"]._flatten("tp")


def test_flatten_an_unnamed_mesh(dt):
    mesh = dt.DeviceMesh("cpu", [[3, 2], [1, 0]])
    flat = mesh._flatten("all")
    assert flat.shape == (4,) and flat.mesh.tolist() == [3, 2, 1, 0]
    assert mesh["all"] == flat
    full = np.arange(8, dtype=np.float32)
    x = dt.tensor(full, device_mesh=flat, placements=[S0])
    pieces = x.local_shards()
    assert [pieces[r].tolist() for r in (3, 2, 1, 0)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    with pytest.raises(KeyError):
        mesh["nope"]


def test_shard_on_a_flattened_view_is_nested_on_its_parent_dims(dt, mesh3):
    flat = mesh3["dp", "tp"]._flatten()
    for rows in (8, 7, 5):  # even, and two uneven splits
        full = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        x = dt.tensor(full, device_mesh=flat, placements=[S0])
        assert x.placements == (S0,) and x.device_mesh == flat
        np.testing.assert_array_equal(x.numpy(), full)
        # dp splits the rows first, then tp splits each piece (torch.chunk).
        pieces = x.local_shards()
        offset = 0
        dp_parts = np.array_split(np.arange(rows), [-(-rows // 2)])
        for i, dp_rows in enumerate(dp_parts):
            n = len(dp_rows)
            cut = min(n, -(-n // 2))
            for j, tp_rows in enumerate((dp_rows[:cut], dp_rows[cut:])):
                rank = int(mesh3.mesh[i, 0, j])
                np.testing.assert_array_equal(pieces[rank], full[tp_rows])
                offset += len(tp_rows)
        assert offset == rows
        assert root_placements(x, mesh3) == (S0, R, S0)
        # Mixing with a replicated tensor of the parent keeps that layout.
        y = x + dt.zeros(rows, 3, device_mesh=mesh3)
        assert y.device_mesh == mesh3 and y.placements == (S0, R, S0)
        np.testing.assert_array_equal(y.numpy(), full)


def test_replicate_and_partial_on_a_flattened_view(dt, mesh3):
    flat = mesh3["dp", "tp"]._flatten()
    full = np.arange(12, dtype=np.float64).reshape(4, 3) - 5
    x = dt.tensor(full, device_mesh=flat, placements=[R], dtype=dt.float64)
    assert x.placements == (R,)
    assert root_placements(x, mesh3) == (R, R, R)
    for op in ("sum", "avg", "max", "min"):
        p = x.redistribute(flat, [Partial(op)])
        assert p.placements == (Partial(op),) and p.device_mesh == flat
        assert_close(p.numpy(), full)
        assert root_placements(p, mesh3) == (Partial(op), R, Partial(op))
        pieces = list(p.local_shards().values())
        if op == "sum":
            assert_close(sum(pieces), full)
        back = p.redistribute(flat, [S1])
        assert back.placements == (S1,)
        assert_close(back.numpy(), full)


def test_flattened_view_of_a_2d_mesh_mixes_with_the_parent(dt, mesh2):
    flat = mesh2["dp", "tp"]._flatten()
    assert flat.shape == (4,) and flat.mesh_dim_names == ("dp_tp",)
    an = np.arange(8 * 6, dtype=np.float32).reshape(8, 6) / 10
    bn = np.arange(6 * 5, dtype=np.float32).reshape(6, 5) / 7
    a = dt.tensor(an, device_mesh=flat, placements=[S0])
    b = dt.tensor(bn, device_mesh=flat, placements=[R])
    y = a @ b
    assert y.device_mesh == flat and y.placements == (S0,)
    assert_close(y.numpy(), an @ bn, tol=1e-4)
    # One op with a tensor of the parent: the result lives on the parent.
    c = dt.tensor(np.ones((8, 5), np.float32), device_mesh=mesh2, placements=[S0, R])
    z = y + c
    assert z.device_mesh == mesh2
    assert z.placements == (S0, S0)
    assert_close(z.numpy(), an @ bn + 1, tol=1e-4)
    # Redistribute from the parent onto the flattened view and back.
    w = c.redistribute(flat, [S1])
    assert w.device_mesh == flat and w.placements == (S1,)
    assert root_placements(w, mesh2) == (S1, S1)
    assert_close(w.numpy(), np.ones((8, 5)))


def test_layout_the_flattened_view_cannot_express_reads_as_the_parent(dt, mesh2):
    flat = mesh2["dp", "tp"]._flatten()
    x = dt.tensor(np.arange(24, dtype=np.float32).reshape(6, 4), device_mesh=flat,
                  placements=[S0])
    # 6 rows split over dp (2) evenly, not over dp x tp (4): the merge keeps
    # the shard on dp only, a layout of the parent mesh.
    y = x.reshape(24)
    assert y.device_mesh == mesh2 and y.placements == (S0, R)
    assert_close(y.numpy(), np.arange(24, dtype=np.float32))


# ---- reshape keeps a shard on the outer dim of an even split or merge -------

def local_shapes(x):
    return sorted(set(p.shape for p in x.local_shards().values()))


def test_merge_keeps_an_even_shard_on_mesh_4(dt, meshes):
    m = meshes["4"]
    full = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    x = dt.tensor(full, device_mesh=m, placements=[S0])
    y = x.reshape(48)
    assert y.placements == (S0,)
    np.testing.assert_array_equal(y.numpy(), full.reshape(48))
    assert local_shapes(y) == [(12,)]
    assert not dt.explain().communicates
    z = y.view(8, 6)  # and the split back
    assert z.placements == (S0,)
    assert local_shapes(z) == [(2, 6)]
    np.testing.assert_array_equal(z.numpy(), full)
    f = x.flatten()
    assert f.placements == (S0,)
    np.testing.assert_array_equal(f.numpy(), full.reshape(-1))


def test_uneven_merge_does_not_keep_the_shard(dt, meshes):
    m = meshes["4"]
    full = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    x = dt.tensor(full, device_mesh=m, placements=[S0])
    y = x.reshape(24)
    assert y.placements == (R,)
    np.testing.assert_array_equal(y.numpy(), full.reshape(24))
    rows = list(dt.explain())
    assert len(rows) == 1
    assert rows[0]["op"] == "reshape" and rows[0]["operand"] == 0
    assert rows[0]["change"] == "S(0) -> R"
    assert rows[0]["collectives"] == ["all_gather on mesh dim 0"]


def test_uneven_split_does_not_keep_the_shard(dt, meshes):
    m = meshes["4"]
    full = np.arange(24, dtype=np.float32)
    x = dt.tensor(full, device_mesh=m, placements=[S0])
    y = x.reshape(6, 4)
    assert y.placements != (S0,)
    np.testing.assert_array_equal(y.numpy(), full.reshape(6, 4))
    # The outer dim of [2, 4, 6] does not split over 4 ranks: the shard moves
    # to the untouched last dim instead of staying on dim 0.
    x2 = dt.tensor(np.arange(48, dtype=np.float32).reshape(8, 6), device_mesh=m,
                   placements=[S0])
    y2 = x2.reshape(2, 4, 6)
    assert y2.placements == (S2,)
    np.testing.assert_array_equal(y2.numpy(), np.arange(48, dtype=np.float32).reshape(2, 4, 6))


def test_reshape_on_mesh_2x2(dt, meshes):
    m = meshes["2x2"]
    full = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    # Nested over both axes: 8 rows split into 4 evenly.
    x = dt.tensor(full, device_mesh=m, placements=[S0, S0])
    y = x.reshape(48)
    assert y.placements == (S0, S0)
    assert local_shapes(y) == [(12,)]
    np.testing.assert_array_equal(y.numpy(), full.reshape(48))
    # Splitting the sharded last dim 6 -> (2, 3) keeps S(1) on 2 ranks.
    x = dt.tensor(full, device_mesh=m, placements=[S0, S1])
    y = x.view(8, 2, 3)
    assert y.placements == (S0, S1)
    assert local_shapes(y) == [(4, 1, 3)]
    np.testing.assert_array_equal(y.numpy(), full.reshape(8, 2, 3))
    # 6 rows nested over 2 x 2 are uneven: the inner shard is undone.
    u = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    x = dt.tensor(u, device_mesh=m, placements=[S0, S0])
    y = x.reshape(24)
    assert y.placements == (S0, R)
    np.testing.assert_array_equal(y.numpy(), u.reshape(24))
    # 6 -> (2, 3) on dp keeps S(0) with 1 x 3 x 4 pieces.
    x = dt.tensor(u, device_mesh=m, placements=[S0, R])
    y = x.reshape(2, 3, 4)
    assert y.placements == (S0, R)
    assert local_shapes(y) == [(1, 3, 4)]
    np.testing.assert_array_equal(y.numpy(), u.reshape(2, 3, 4))
    # 3 rows do not split over dp: Replicate there.
    x = dt.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device_mesh=m,
                  placements=[S0, R])
    y = x.reshape(12)
    assert y.placements == (R, R)
    np.testing.assert_array_equal(y.numpy(), np.arange(12, dtype=np.float32))
