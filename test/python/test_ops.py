"""Every op against numpy on meshes (1,), (4,) and (2,2), with Shard on each
dim, Replicate and Partial inputs, on uneven shapes."""
import itertools

import numpy as np
import pytest

from conftest import assert_close
from dtorch import Partial, Replicate, Shard

R, S0, S1 = Replicate(), Shard(0), Shard(1)
PS, PM = Partial("sum"), Partial("max")

# Placements per mesh, for a 2-D tensor; the partial ones make every op
# meet partial inputs too.
LAYOUTS = {
    "1": [[R], [S0], [S1], [PS]],
    "4": [[R], [S0], [S1], [PS], [PM]],
    "2x2": [[R, R], [S0, R], [R, S1], [S0, S1], [S1, S0], [S0, S0], [S0, PS], [PM, S1]],
}

SHAPE = (7, 5)  # uneven on every mesh


def data(shape, seed, positive=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    return np.abs(x) + 0.5 if positive else x


def cases():
    for mesh in LAYOUTS:
        for pa in LAYOUTS[mesh]:
            yield mesh, pa


UNARY = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "relu": lambda x: np.maximum(x, 0),
    "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "sin": np.sin, "cos": np.cos,
    "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
}


@pytest.mark.parametrize("mesh,pa", list(cases()))
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(dt, meshes, mesh, pa, op):
    a = data(SHAPE, 1, positive=op in ("log", "sqrt", "rsqrt"))
    x = dt.tensor(a, device_mesh=meshes[mesh], placements=pa)
    y = getattr(x, op)()
    assert y.shape == SHAPE
    assert_close(y.numpy(), UNARY[op](a))


BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
}


@pytest.mark.parametrize("mesh", list(LAYOUTS))
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_all_layout_pairs(dt, meshes, mesh, op):
    a, b = data(SHAPE, 2), data(SHAPE, 3, positive=True)
    for pa, pb in itertools.product(LAYOUTS[mesh], repeat=2):
        x = dt.tensor(a, device_mesh=meshes[mesh], placements=pa)
        y = dt.tensor(b, device_mesh=meshes[mesh], placements=pb)
        z = getattr(dt, op)(x, y)
        assert_close(z.numpy(), BINARY[op](a, b))


@pytest.mark.parametrize("mesh,pa", list(cases()))
def test_operators_scalars_and_broadcasting(dt, meshes, mesh, pa):
    a = data(SHAPE, 4, positive=True)
    bias = data((SHAPE[1],), 5)
    x = dt.tensor(a, device_mesh=meshes[mesh], placements=pa)
    b = dt.tensor(bias, device_mesh=meshes[mesh])
    assert_close((x + b).numpy(), a + bias)
    assert_close((2.0 * x - 1).numpy(), 2.0 * a - 1)
    assert_close((1 / x).numpy(), 1 / a)
    assert_close((x ** 2).numpy(), a ** 2, tol=1e-4)
    assert_close((-x).numpy(), -a)
    col = dt.tensor(a[:, :1], device_mesh=meshes[mesh])
    assert_close((x * col).numpy(), a * a[:, :1])


@pytest.mark.parametrize("mesh", list(LAYOUTS))
def test_matmul_layout_pairs(dt, meshes, mesh):
    a, b = data((7, 6), 6), data((6, 5), 7)
    for pa, pb in itertools.product(LAYOUTS[mesh], repeat=2):
        x = dt.tensor(a, device_mesh=meshes[mesh], placements=pa)
        w = dt.tensor(b, device_mesh=meshes[mesh], placements=pb)
        y = x @ w
        assert_close(y.numpy(), a @ b, tol=1e-4)


def test_matmul_contracting_sharded_dim_is_partial(dt, meshes):
    a, b = data((8, 6), 8), data((6, 4), 9)
    x = dt.tensor(a, device_mesh=meshes["4"], placements=[Shard(1)])
    w = dt.tensor(b, device_mesh=meshes["4"], placements=[Shard(0)])
    y = x @ w
    assert y.placements == (Partial("sum"),)
    assert_close(y.numpy(), a @ b, tol=1e-4)
    # Each rank holds a partial product; they add up to the result.
    shards = y.local_shards()
    assert_close(sum(shards.values()), a @ b, tol=1e-4)


def test_bmm(dt, meshes):
    a, b = data((3, 5, 4), 10), data((3, 4, 6), 11)
    for pa in ([Shard(0), Replicate()], [Replicate(), Shard(2)], [Shard(1), Shard(0)]):
        x = dt.tensor(a, device_mesh=meshes["2x2"], placements=pa)
        w = dt.tensor(b, device_mesh=meshes["2x2"], placements=[Shard(0), Replicate()])
        assert_close(dt.bmm(x, w).numpy(), a @ b, tol=1e-4)


@pytest.mark.parametrize("mesh,pa", list(cases()))
@pytest.mark.parametrize("op", ["sum", "mean", "amax"])
def test_reductions(dt, meshes, mesh, pa, op):
    a = data(SHAPE, 12)
    x = dt.tensor(a, device_mesh=meshes[mesh], placements=pa)
    ref = {"sum": np.sum, "mean": np.mean, "amax": np.max}[op]
    for dim, keep in [(None, False), (0, False), (1, True), ((0, 1), False), (-1, False)]:
        y = getattr(x, op)(dim, keepdim=keep)
        want = ref(a, axis=dim, keepdims=keep) if dim is not None else ref(a)
        assert_close(y.numpy(), want, tol=1e-4)


def test_reduction_over_sharded_dim_is_partial(dt, meshes):
    a = data(SHAPE, 13)
    x = dt.tensor(a, device_mesh=meshes["4"], placements=[Shard(1)])
    assert x.sum(1).placements == (Partial("sum"),)
    assert x.amax(1).placements == (Partial("max"),)
    assert_close(x.amax(1).numpy(), a.max(1))


def test_partial_inputs(dt, meshes):
    a, b = data((8, 6), 14), data((6, 4), 15)
    x = dt.tensor(a, device_mesh=meshes["2x2"], placements=[Replicate(), Shard(1)])
    w = dt.tensor(b, device_mesh=meshes["2x2"], placements=[Replicate(), Shard(0)])
    p = x @ w  # [R, P(sum)]
    assert p.placements == (Replicate(), Partial("sum"))
    c = data((8, 4), 16)
    y = dt.tensor(c, device_mesh=meshes["2x2"])
    assert_close((p + y).numpy(), a @ b + c, tol=1e-4)
    assert_close((p * 3.0).numpy(), (a @ b) * 3, tol=1e-4)
    assert_close(p.relu().numpy(), np.maximum(a @ b, 0), tol=1e-4)
    assert_close(p.sum(0).numpy(), (a @ b).sum(0), tol=1e-4)
    assert_close((p - p).numpy(), np.zeros((8, 4)), tol=1e-4)


@pytest.mark.parametrize("mesh,pa", list(cases()))
def test_shape_ops(dt, meshes, mesh, pa):
    a = data((6, 4), 17)
    x = dt.tensor(a, device_mesh=meshes[mesh], placements=pa)
    assert_close(x.reshape(4, 6).numpy(), a.reshape(4, 6))
    assert_close(x.reshape(-1).numpy(), a.reshape(-1))
    assert_close(x.view(6, 2, 2).numpy(), a.reshape(6, 2, 2))
    assert_close(x.t().numpy(), a.T)
    assert_close(x.transpose(0, 1).numpy(), a.T)
    assert_close(x.unsqueeze(0).numpy(), a[None])
    assert_close(x.unsqueeze(-1).squeeze(-1).numpy(), a)
    assert_close(x.flatten().numpy(), a.flatten())
    assert_close(x.permute(1, 0).numpy(), a.T)


def test_creation(dt, meshes):
    m = meshes["2x2"]
    z = dt.zeros(5, 3, device_mesh=m, placements=[Shard(0), Replicate()])
    assert z.shape == (5, 3) and z.dtype == dt.float32
    assert_close(z.numpy(), np.zeros((5, 3)))
    assert_close(dt.ones(4, device_mesh=m, placements=[Shard(0), Shard(0)]).numpy(), np.ones(4))
    assert_close(dt.full((2, 3), 7.5, device_mesh=m).numpy(), np.full((2, 3), 7.5))
    r = dt.arange(10, device_mesh=meshes["4"], placements=[Shard(0)])
    assert r.dtype == dt.int64
    assert r.numpy().tolist() == list(range(10))
    assert dt.tensor([[1, 2], [3, 4]], device_mesh=m).tolist() == [[1, 2], [3, 4]]
    assert dt.tensor(3.5).item() == 3.5
    d = dt.distribute_tensor(np.arange(12.0).reshape(3, 4), m, [Shard(1), Shard(0)])
    assert d.placements == (Shard(1), Shard(0))
    assert_close(d.numpy(), np.arange(12.0).reshape(3, 4))
    e = dt.eye(3, device_mesh=meshes["4"], placements=[Shard(1)])
    assert_close(e.numpy(), np.eye(3))


def test_random_is_reproducible_and_placement_independent(dt, meshes):
    vals = []
    for mesh, p in [("1", [Replicate()]), ("4", [Shard(0)]), ("4", [Shard(1)]),
                    ("2x2", [Shard(1), Shard(0)])]:
        dt.manual_seed(123)
        a = dt.randn(9, 7, device_mesh=meshes[mesh], placements=p)
        b = dt.rand(9, 7, device_mesh=meshes[mesh], placements=p)
        vals.append((a.numpy(), b.numpy()))
    for a, b in vals[1:]:
        assert_close(a, vals[0][0], tol=0)
        assert_close(b, vals[0][1], tol=0)
    a, b = vals[0]
    assert 0 <= b.min() and b.max() < 1
    assert abs(a.mean()) < 0.5 and 0.5 < a.std() < 1.5


def test_local_shards_are_uneven_torch_chunks(dt, meshes):
    x = dt.tensor(np.arange(10.0), device_mesh=meshes["4"], placements=[Shard(0)])
    shards = x.local_shards()
    assert [s.tolist() for _, s in sorted(shards.items())] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_submesh_mixes_with_parent(dt, meshes):
    m = meshes["2x2"]
    tp = m["tp"]
    assert tp.shape == (2,) and tp.ndim == 1
    a, b = data((4, 6), 18), data((4, 6), 19)
    x = dt.tensor(a, device_mesh=tp, placements=[Shard(1)])
    assert x.placements == (Shard(1),)
    assert x.device_mesh == tp
    y = dt.tensor(b, device_mesh=m, placements=[Shard(0), Replicate()])
    assert_close((x + y).numpy(), a + b)
    assert (x * 2).device_mesh == tp


def test_redistribute_all_pairs(dt, meshes):
    a = data(SHAPE, 20)
    opts = [R, S0, S1, Partial("sum"), Partial("avg"), Partial("max"), Partial("min")]
    for mesh in ("4", "2x2"):
        m = meshes[mesh]
        layouts = [list(p) for p in itertools.product(opts, repeat=m.ndim)]
        for src in layouts:
            x = dt.tensor(a, device_mesh=m, placements=src)
            ys = [x.redistribute(m, dst) for dst in layouts]  # one segment per source
            for dst, y in zip(layouts, ys):
                assert list(y.placements) == dst
                assert_close(y.numpy(), a)


def test_casts_and_type_promotion(dt, meshes):
    m = meshes["2x2"]
    fa = np.array([[-2.7, -0.5], [1.9, 3.0]], dtype=np.float32)
    ia = np.array([[1, 2], [3, 4]], dtype=np.int64)
    f = dt.tensor(fa, device_mesh=m, placements=[Shard(0), Shard(1)])
    i = dt.tensor(ia, device_mesh=m, placements=[Replicate(), Shard(0)])
    assert f.long().dtype == dt.int64
    assert f.long().tolist() == [[-2, 0], [1, 3]]          # truncation toward zero
    assert f.bool().tolist() == [[True, True], [True, True]]
    assert f.to(dt.float64).dtype == dt.float64
    assert f.to(i).dtype == dt.int64
    assert i.float().dtype == dt.float32
    # Promotion as torch: int op float -> float; int / int -> float32.
    assert (i + f).dtype == dt.float32
    assert_close((i + f).numpy(), ia + fa)
    assert (i / i).dtype == dt.float32
    assert_close((i / dt.tensor(np.array([[2, 4], [5, 8]]), device_mesh=m)).numpy(),
                 ia / np.array([[2, 4], [5, 8]]))
    assert (i * 2).dtype == dt.int64 and (i * 2).tolist() == [[2, 4], [6, 8]]
    assert (i * 2.5).dtype == dt.float32
    assert_close((i * 2.5).numpy(), ia * 2.5)
    assert i.exp().dtype == dt.float32
    assert_close(i.exp().numpy(), np.exp(ia), tol=1e-4)
    d = f.double()
    assert (d + f).dtype == dt.float64
    assert ((i @ i).tolist() == (ia @ ia).tolist())


def test_cast_of_partial_values(dt, meshes):
    a, b = data((8, 6), 30), data((6, 4), 31)
    x = dt.tensor(a, device_mesh=meshes["4"], placements=[Shard(1)])
    w = dt.tensor(b, device_mesh=meshes["4"], placements=[Shard(0)])
    p = x @ w  # P(sum): a cast needs the value first
    assert_close(p.double().numpy(), (a @ b).astype(np.float64), tol=1e-4)
    mx = x.amax(1)  # P(max) passes through the monotone cast
    assert mx.double().placements == (Partial("max"),)
    assert_close(mx.double().numpy(), a.max(1))
