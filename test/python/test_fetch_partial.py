"""Fetching a Partial tensor reduces its pieces with the runtime's reduction
(the one the collectives use): Partial(max)/Partial(min) propagate NaN like
numpy and torch, Partial(sum) follows IEEE addition."""
import numpy as np

from dtorch import Partial, Replicate, Shard

NAN, INF = np.nan, np.inf


def with_nans(shape, spots, seed):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    for spot in spots:
        a[spot] = NAN
    return a


def test_partial_max_from_a_sharded_reduction_propagates_nan(dt, meshes):
    # 3x8 over 4 ranks by columns: rank 0 holds columns 0-1, rank 2 columns 4-5.
    a = with_nans((3, 8), [(0, 5), (2, 0)], 1)
    y = dt.tensor(a, device_mesh=meshes["4"], placements=[Shard(1)]).amax(1)
    assert y.placements == (Partial("max"),)
    pieces = y.local_shards()
    assert not np.isnan(pieces[0][0]) and np.isnan(pieces[2][0])
    np.testing.assert_array_equal(y.numpy(), a.max(1))
    assert np.isnan(y.numpy()[[0, 2]]).all() and not np.isnan(y.numpy()[1])


def test_partial_max_on_a_2d_mesh_and_through_maximum(dt, meshes):
    a = with_nans((4, 6), [(1, 5), (3, 2)], 2)
    b = with_nans((4, 6), [(2, 4)], 3)
    m = meshes["2x2"]
    x = dt.tensor(a, device_mesh=m, placements=[Shard(0), Shard(1)]).amax(1)
    z = dt.tensor(b, device_mesh=m, placements=[Shard(0), Shard(1)]).amax(1)
    assert x.placements == (Shard(0), Partial("max"))
    np.testing.assert_array_equal(x.numpy(), a.max(1))
    both = dt.maximum(x, z)
    assert both.placements == (Shard(0), Partial("max"))  # max of partial maxima
    np.testing.assert_array_equal(both.numpy(), np.maximum(a.max(1), b.max(1)))


def test_partial_min_keeps_nan(dt, meshes):
    a = np.array([[1, NAN, -INF], [INF, 2, NAN]], dtype=np.float32)
    b = np.array([[0, 5, 3], [NAN, -1, 4]], dtype=np.float32)
    for mesh, placements in [("4", [Partial("min")]),
                             ("2x2", [Shard(0), Partial("min")]),
                             ("2x2", [Partial("min"), Replicate()])]:
        x = dt.tensor(a, device_mesh=meshes[mesh], placements=placements)
        y = dt.tensor(b, device_mesh=meshes[mesh], placements=placements)
        np.testing.assert_array_equal(x.numpy(), a)
        m = dt.minimum(x, y)
        assert m.placements == tuple(placements)
        np.testing.assert_array_equal(m.numpy(), np.minimum(a, b))


def test_partial_sum_follows_ieee_addition(dt, meshes):
    a = np.array([[1, 2, 3, 4, 5, 6, 7, 8],
                  [1, NAN, 3, 4, 5, 6, 7, 8],
                  [INF, 0, 0, 0, -INF, 0, 0, 0],
                  [INF, 0, 0, 0, 0, 0, INF, 0]], dtype=np.float32)
    y = dt.tensor(a, device_mesh=meshes["4"], placements=[Shard(1)]).sum(1)
    assert y.placements == (Partial("sum"),)
    with np.errstate(invalid="ignore"):
        want = a.sum(1)  # 36, nan, nan (inf - inf), inf
    np.testing.assert_array_equal(y.numpy(), want)
