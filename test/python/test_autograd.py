"""Autograd behaviour: the tape (grad_fn, is_leaf), accumulation across
backward calls, no_grad / enable_grad / set_grad_enabled, detach,
retain_graph and the freed graph, retain_grad, autograd.grad, the error
cases of torch, the placements of .grad, ties of max/maximum, and a training
loop whose steps after the first compile nothing."""
import math

import numpy as np
import pytest

import dtorch
import dtorch.nn.functional as F
from dtorch import Partial, Replicate, Shard

from conftest import assert_close

rng = np.random.default_rng(3)


@pytest.fixture(params=["4", "2x2"])
def mesh(request, meshes):
    return meshes[request.param]


def rep(mesh):
    return [Replicate()] * mesh.ndim


def leaf(dt, mesh, arr, placements=None):
    return dt.distribute_tensor(arr, mesh, placements or rep(mesh)).requires_grad_()


def test_tape_records_only_what_needs_grad(dt, mesh):
    a = rng.standard_normal((4, 3))
    x = leaf(dt, mesh, a)
    c = dt.distribute_tensor(a, mesh, rep(mesh))
    assert x.is_leaf and x.grad_fn is None and x.requires_grad
    y = x * c
    assert y.requires_grad and not y.is_leaf
    assert y.grad_fn.name() == "MulBackward" and repr(y.grad_fn) == "<MulBackward>"
    assert len(y.grad_fn.inputs) == 2 and y.grad_fn.scalar is None
    assert (c * 2.0).grad_fn is None and not (c * 2.0).requires_grad
    s = y.sum()
    assert s.grad_fn.attrs["dims"] == [0, 1]
    assert s.grad_fn.next_functions[0][0].name() == "MulBackward"
    # comparisons and integer results have no gradient
    assert not (x > 0).requires_grad and (x > 0).grad_fn is None
    assert not x.argmax(1).requires_grad
    z = x + 1.0
    assert z.grad_fn.scalar == (1, 1.0)


def test_backward_accumulates_across_calls(dt, mesh):
    a = rng.standard_normal((4, 3))
    x = leaf(dt, mesh, a)
    (x * x).sum().backward()
    assert_close(x.grad.numpy(), 2 * a, tol=1e-6)
    (x * 3.0).sum().backward()
    assert_close(x.grad.numpy(), 2 * a + 3, tol=1e-6)
    x.grad = None
    x.sum().backward()
    assert_close(x.grad.numpy(), np.ones_like(a))


def test_shared_input_and_diamond(dt, mesh):
    a = rng.standard_normal((3, 5))
    x = leaf(dt, mesh, a, [Shard(1)] + [Replicate()] * (mesh.ndim - 1))
    y = x.exp()
    z = (y * x + y.sin()).mean()
    z.backward()
    e = np.exp(a)
    want = (e * a + e + np.cos(e) * e) / a.size
    assert_close(x.grad.numpy(), want, tol=1e-6)


def test_no_grad_enable_grad_set_grad_enabled(dt, mesh):
    x = leaf(dt, mesh, rng.standard_normal((2, 2)))
    with dt.no_grad():
        assert not dt.is_grad_enabled()
        y = x * 2.0
        with dt.enable_grad():
            w = x * 2.0
        assert not dt.is_grad_enabled()
    assert dt.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert w.requires_grad

    @dt.no_grad()
    def f(t):
        return t * 3.0

    @dt.no_grad
    def f2(t):
        return t * 3.0

    assert not f(x).requires_grad and not f2(x).requires_grad
    assert dt.is_grad_enabled()
    dt.set_grad_enabled(False)
    try:
        assert not (x * 1.0).requires_grad
    finally:
        dt.set_grad_enabled(True)
    with dt.set_grad_enabled(False):
        assert not (x * 1.0).requires_grad
    assert (x * 1.0).requires_grad
    with pytest.raises(ValueError):
        with dt.no_grad():
            raise ValueError("inside")
    assert dt.is_grad_enabled()


def test_detach_is_the_same_value_without_history(dt, mesh):
    a = rng.standard_normal((4, 3))
    x = leaf(dt, mesh, a)
    y = x * 2.0
    d = y.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    assert d.shape == y.shape and d.placements == y.placements
    assert_close(d.numpy(), 2 * a)
    # the detached value is a constant of the graph
    (y * d).sum().backward()
    assert_close(x.grad.numpy(), 2 * (2 * a), tol=1e-6)
    del y
    assert_close((d + 1.0).numpy(), 2 * a + 1)
    dd = d.detach().requires_grad_()
    (dd * dd).sum().backward()
    assert_close(dd.grad.numpy(), 4 * a, tol=1e-6)


def test_retain_graph_and_freed_graph(dt, mesh):
    a = rng.standard_normal((3, 3))
    x = leaf(dt, mesh, a)
    loss = (x.exp() * x).sum()
    loss.backward(retain_graph=True)
    loss.backward()
    assert_close(x.grad.numpy(), 2 * (np.exp(a) * a + np.exp(a)), tol=1e-6)
    assert loss.grad_fn is not None and loss.grad_fn.released
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_error_cases_like_torch(dt, mesh):
    x = leaf(dt, mesh, rng.standard_normal((3, 2)))
    with pytest.raises(RuntimeError, match="implicitly created only for scalar outputs"):
        (x * 2.0).backward()
    c = dt.distribute_tensor(np.ones((2,)), mesh, rep(mesh))
    with pytest.raises(RuntimeError, match="does not require grad"):
        c.sum().backward()
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2.0).backward(dt.ones(2, device_mesh=mesh, dtype=dt.float64))
    with pytest.raises(RuntimeError, match="floating point"):
        dt.distribute_tensor(np.arange(3), mesh, rep(mesh)).requires_grad_()
    with pytest.raises(RuntimeError, match="leaf variables"):
        (x * 2.0).requires_grad_(False)
    # nothing was left half-done: the session still works
    (x * 2.0).sum().backward()
    assert_close(x.grad.numpy(), np.full((3, 2), 2.0))


def test_backward_with_gradient_argument(dt, mesh):
    a = rng.standard_normal((3, 4))
    g = rng.standard_normal((3, 4))
    x = leaf(dt, mesh, a)
    (x * x).backward(dt.distribute_tensor(g, mesh, rep(mesh)))
    assert_close(x.grad.numpy(), 2 * a * g, tol=1e-6)


def test_grad_has_the_parameters_placements(dt, meshes):
    mesh = meshes["2x2"]
    x = dt.distribute_tensor(rng.standard_normal((8, 6)), mesh, [Shard(0), Replicate()])
    cases = [[Replicate(), Shard(1)], [Replicate(), Replicate()], [Shard(0), Shard(1)],
             [Partial(), Shard(0)]]
    for p in cases:
        w_np = rng.standard_normal((6, 4))
        w = leaf(dt, mesh, w_np, p)
        loss = (x @ w).relu().sum()
        loss.backward()
        want = tuple(Replicate() if q.is_partial() else q for q in w.placements)
        assert w.grad.placements == want
        assert w.grad.shape == w.shape and w.grad.dtype == w.dtype
        xa = x.numpy()
        mask = (xa @ w_np) > 0
        assert_close(w.grad.numpy(), xa.T @ mask.astype(float), tol=1e-6)


def test_retain_grad_and_autograd_grad(dt, mesh):
    a = rng.standard_normal((3, 4))
    x = leaf(dt, mesh, a)
    y = x * 3.0
    y.retain_grad()
    assert y.retains_grad
    z = (y * y).sum()
    z.backward(retain_graph=True)
    assert_close(y.grad.numpy(), 2 * 3 * a, tol=1e-6)
    assert_close(x.grad.numpy(), 18 * a, tol=1e-6)
    gx, gy = dt.autograd.grad(z, [x, y])
    assert_close(gx.numpy(), 18 * a, tol=1e-6)
    assert_close(gy.numpy(), 6 * a, tol=1e-6)
    assert_close(x.grad.numpy(), 18 * a, tol=1e-6)  # grad() accumulates nothing
    other = leaf(dt, mesh, a)
    with pytest.raises(RuntimeError, match="not have been used"):
        dt.autograd.grad((x * 2.0).sum(), [other])
    (g,) = dt.autograd.grad((x * 2.0).sum(), [other], allow_unused=True)
    assert g is None


def test_backward_of_several_tensors_and_inputs(dt, mesh):
    a = rng.standard_normal((3, 2))
    x, w = leaf(dt, mesh, a), leaf(dt, mesh, a)
    y = x * w
    dt.autograd.backward([y.sum(), (x * 2.0).sum()])
    assert_close(x.grad.numpy(), a + 2, tol=1e-6)
    assert_close(w.grad.numpy(), a, tol=1e-6)
    x.grad = w.grad = None
    (x * w).sum().backward(inputs=[w])
    assert x.grad is None
    assert_close(w.grad.numpy(), a, tol=1e-6)


def test_create_graph_gives_second_derivatives(dt, mesh):
    a = rng.standard_normal((5,))
    x = leaf(dt, mesh, a)
    (g,) = dt.autograd.grad((x * x * x).sum(), [x], create_graph=True)
    assert g.requires_grad
    g.sum().backward()
    assert_close(x.grad.numpy(), 6 * a, tol=1e-6)


def test_max_and_maximum_split_ties_like_torch(dt, mesh):
    a = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0]])
    x = leaf(dt, mesh, a)
    x.amax(1).sum().backward()
    assert_close(x.grad.numpy(), [[0, 0.5, 0.5, 0], [0.25, 0.25, 0.25, 0.25]])
    y = leaf(dt, mesh, a)
    z = leaf(dt, mesh, np.full((2, 4), 2.0))
    dt.maximum(y, z).sum().backward()
    assert_close(y.grad.numpy(), [[0, 1, 1, 0], [0.5, 0.5, 0.5, 0.5]])
    assert_close(z.grad.numpy(), [[1, 0, 0, 1], [0.5, 0.5, 0.5, 0.5]])
    r = leaf(dt, mesh, np.array([-1.0, 0.0, 2.0]))
    (r.relu() + r.abs()).sum().backward()
    assert_close(r.grad.numpy(), [-1.0, 0.0, 2.0])


def test_long_chain_is_released_without_recursion(dt, meshes):
    mesh = meshes["4"]
    x = leaf(dt, mesh, np.ones(4))
    y = x
    for _ in range(30000):
        y = y * 1.0
    assert y.requires_grad
    del y  # dropping 30,000 records must not overflow the stack
    dt.synchronize()
    assert (x * 2.0).sum().item() == 8.0


def test_training_steps_after_the_first_compile_nothing(dt, meshes):
    mesh = meshes["2x2"]
    r = np.random.default_rng(0)
    x = dt.distribute_tensor(r.standard_normal((8, 6)).astype(np.float32), mesh,
                             [Shard(0), Replicate()])
    y = dt.distribute_tensor(r.standard_normal((8, 3)).astype(np.float32), mesh,
                             [Shard(0), Replicate()])
    w1 = leaf(dt, mesh, (r.standard_normal((6, 16)) * 0.3).astype(np.float32),
              [Replicate(), Shard(1)])
    w2 = leaf(dt, mesh, (r.standard_normal((16, 3)) * 0.3).astype(np.float32),
              [Replicate(), Shard(0)])
    losses, compiles = [], []
    for step in range(3):
        before = dt._C.compile_count()
        loss = F.mse_loss((x @ w1).relu() @ w2, y)
        forward_ops = dt._C.pending_ops()
        loss.backward()
        # the backward joined the forward's pending segment: nothing ran yet
        assert dt._C.pending_ops() > forward_ops
        with dt.no_grad():
            w1 = (w1 - 0.1 * w1.grad).requires_grad_()
            w2 = (w2 - 0.1 * w2.grad).requires_grad_()
        assert w1.placements == (Replicate(), Shard(1))
        losses.append(loss.item())
        compiles.append(dt._C.compile_count() - before)
    assert compiles[0] >= 1
    assert compiles[1:] == [0, 0], compiles
    assert losses[2] < losses[1] < losses[0]


def test_data_parallel_gradient_reduction_follows_from_the_rules(dt, meshes):
    """A replicated weight and a batch sharded on "dp": the backward's
    product is Partial(sum) on "dp", and bringing it to the weight's
    placements is the all-reduce of data parallelism."""
    mesh = meshes["2x2"]
    r = np.random.default_rng(1)
    xa, wa = r.standard_normal((8, 6)), r.standard_normal((6, 4))
    x = dt.distribute_tensor(xa, mesh, [Shard(0), Replicate()])
    w = leaf(dt, mesh, wa, [Replicate(), Replicate()])
    (x @ w).sum().backward()
    g = w.grad
    assert g.placements == (Replicate(), Replicate())
    assert_close(g.numpy(), xa.T @ np.ones((8, 4)), tol=1e-6)
    rows = [row for row in dt.explain() if row["op"] == "redistribute"]
    assert any("all_reduce" in c and '"dp"' in c for row in rows for c in row["collectives"])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gradients_keep_the_leaf_dtype(dt, meshes, dtype):
    mesh = meshes["4"]
    a = np.array([[0.5, -1.0, 2.0, 1.5]])
    x = dt.tensor(a, device_mesh=mesh, placements=[Shard(1)],
                  dtype=getattr(dt, dtype)).requires_grad_()
    y = (x * x).double()  # a cast in the graph: its gradient casts back
    dt.gelu(y).sum().backward()
    assert x.grad.dtype == x.dtype
    d = [0.5 * (1 + math.erf(v / math.sqrt(2))) + v * math.exp(-v * v / 2) / math.sqrt(2 * math.pi)
         for v in (a * a).ravel()]
    want = (np.array(d) * 2 * a.ravel()).reshape(a.shape)
    tol = 1e-5 if dtype == "float32" else 3e-2
    assert_close(x.grad.numpy().astype(np.float64), want, tol=tol)
