"""Bugs the property tests (test_properties.py) found, each pinned by a
plain example."""
import numpy as np
import pytest

from dtorch import Partial, Replicate, Shard

from conftest import assert_close


def test_zero_dim_value_keeps_its_shape(dt, meshes):
    """distribute_tensor/tensor of a 0-d value gave shape (1,): numpy's
    ascontiguousarray makes 0-d arrays 1-d."""
    for value in (np.array(2.5, dtype=np.float32), np.float32(-1.5), 3.0):
        t = dt.distribute_tensor(value, meshes["4"], [Replicate()])
        assert tuple(t.shape) == ()
        assert np.asarray(t.numpy()).shape == ()
        x = dt.distribute_tensor(np.arange(3, dtype=np.float32), meshes["4"], [Shard(0)])
        assert tuple((x + t).shape) == (3,)
        assert_close((x + t).numpy(), np.arange(3, dtype=np.float32) + np.float32(value))
    assert tuple(dt.tensor(7.0).shape) == ()


def test_bfloat16_fetch_is_a_numpy_array(dt, meshes):
    """numpy() of a bfloat16 tensor returned an opaque nanobind object; it is
    an ml_dtypes.bfloat16 array, as torch gives numpy."""
    import ml_dtypes
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)
    mesh = meshes["2x2"]
    t = dt.distribute_tensor(x, mesh, [Shard(0), Replicate()]).bfloat16()
    p = t.redistribute(mesh, [Shard(1), Partial("max")])
    for y in (t, p, t * 2.0):
        got = y.numpy()
        assert got.dtype == ml_dtypes.bfloat16
        assert got.shape == (4, 3)
    want = x.astype(ml_dtypes.bfloat16)
    assert np.array_equal(t.numpy().astype(np.float32), want.astype(np.float32))
    assert np.array_equal(p.numpy().astype(np.float32), want.astype(np.float32))
    pieces = t.local_shards()
    assert all(piece.dtype == ml_dtypes.bfloat16 for piece in pieces.values())


def test_program_cache_tells_meshes_of_one_shape_apart(dt):
    """The program cache was keyed by the segment text, which names the
    mesh's shape but not its ranks: a mesh of the same shape over other
    ranks reused programs remapped to (and uploaded on) the first mesh's
    ranks ("unknown program id" on a rank of the second), and a mesh over
    the same ranks in another order ran each rank's program for another
    position."""
    x = np.arange(35, dtype=np.float32).reshape(7, 5)
    meshes = [dt.DeviceMesh("cpu", r) for r in ([0, 1, 2], [1, 2, 3], [3, 1, 0])]
    for mesh in meshes:
        t = dt.distribute_tensor(x, mesh, [Shard(0)])
        assert_close((t * 2.0).tril(1).numpy(), np.tril(x * 2.0, 1))
        assert_close(t.sum(0).numpy(), x.sum(0))
    # 8 rows: every piece has the same shape, so the wrong position's
    # program ran without complaint (tril's global offsets came out wrong).
    even = np.arange(40, dtype=np.float32).reshape(8, 5)
    full = [dt.DeviceMesh("cpu", r) for r in ([0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2])]
    for mesh in full:
        for a in (x, even):
            t = dt.distribute_tensor(a, mesh, [Shard(0)])
            assert_close((t * 2.0).tril(1).numpy(), np.tril(a * 2.0, 1))
            assert_close(t.sum(0).numpy(), a.sum(0))


def test_reductions_of_a_zero_dim_tensor(dt, meshes):
    """sum()/amax(0)/softmax(0)/... of a 0-d tensor (torch returns the value)
    were accepted by the client but the emitter wrote no 'dims' list for an
    empty one (lib/Compiler/ProgramEmitter.cpp), so workers rejected the
    program."""
    for placement in (Replicate(), Partial("sum"), Partial("max")):
        t = dt.distribute_tensor(np.array(1.5, np.float32), meshes["4"], [Replicate()])
        t = t.redistribute(meshes["4"], [placement])
        assert float(t.sum().numpy()) == 1.5
        assert float(t.sum(0).numpy()) == 1.5
        assert float(t.mean(-1, keepdim=True).numpy()) == 1.5
        assert float(t.amax(0).numpy()) == 1.5
        assert float(t.amin().numpy()) == 1.5
        assert float(t.softmax(0).numpy()) == 1.0
        assert float(t.logsumexp(0).numpy()) == 1.5
        assert int(t.argmax(0).numpy()) == 0
        loss = ((t - 0.5) * (t - 0.5)).mean()
        assert float(loss.sum().numpy()) == 1.0


# ---- bugs found by the properties, fixed in lib/Layout/OpRules.cpp --------------
# Was:  gather rule (lib/Layout/OpRules.cpp, rules::gather): where the index is  shorter than the input on a dim other than `dim`, the input gets no factor  (replicated) but the index and result stay sharded, and the kernel reads  the input at the local row, not the piece's global row
def test_gather_with_a_shorter_sharded_index(dt, meshes):
    x = np.arange(3, dtype=np.float32).reshape(3, 1)
    index = np.zeros((2, 1), dtype=np.int64)
    t = dt.distribute_tensor(x, meshes["4"], [Replicate()])
    i = dt.distribute_tensor(index, meshes["4"], [Shard(0)])
    assert_close(t.gather(1, i).numpy(), np.take_along_axis(x[:2], index, 1))


# Was:  scatter_add rule (lib/Layout/OpRules.cpp, rules::scatterAdd): where index  and src are shorter than the input on a dim other than `dim`, the input  and result stay sharded there while index and src are replicated, and  each rank adds the updates of the first rows into its own piece; a piece  smaller than the index fails validation instead
def test_scatter_add_into_an_input_sharded_on_a_longer_dim(dt):
    mesh = dt.DeviceMesh("cpu", [0, 1])
    x = np.zeros((4, 2), dtype=np.float32)
    index = np.array([[1], [0]], dtype=np.int64)
    src = np.array([[10.0], [20.0]], dtype=np.float32)
    want = x.copy()
    want[0, 1] += 10.0
    want[1, 0] += 20.0
    t = dt.distribute_tensor(x, mesh, [Shard(0)])
    out = dt.scatter_add(t, 1, dt.distribute_tensor(index, mesh, [Replicate()]),
                         dt.distribute_tensor(src, mesh, [Replicate()]))
    assert_close(out.numpy(), want)
