"""Backward replay (lib/Client/BackwardReplay.cpp): the first backward of a
graph structure is walked in Python while the client captures the ops it
records; a later backward of the same structure records them again from C++
without evaluating a formula. The replayed backward must record exactly
what the Python walk records (same ops in the same order: the same
segment, hence the same cached program) and give the same gradients bit
for bit; anything it cannot replay is walked in Python.

Each comparison records the same forward three times, on the same values:
walked with DTORCH_BACKWARD_REPLAY=0, captured, replayed."""
import os
import sys

import numpy as np
import pytest

import dtorch
from dtorch import Replicate, Shard, _C, nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))

import model as gpt_model  # noqa: E402


@pytest.fixture(autouse=True)
def replay_on(dt, monkeypatch):
    monkeypatch.setenv("DTORCH_BACKWARD_REPLAY", "1")


def stats():
    return _C._backward_replay_stats()


def delta(after, before):
    return {k: after[k] - before[k] for k in ("replays", "captures", "not_replayable", "walks")}


def bits(t):
    """A gradient's bytes (bitwise comparison, NaN included)."""
    return None if t is None else (t.numpy().dtype.str, t.numpy().tobytes())


def one_backward(mode, make_loss, leaves, monkeypatch, reset=True, **kw):
    """Records make_loss()'s forward and its backward in mode `mode`; returns
    (ops the backward recorded, the pending segment's structural hash after
    it, the leaves' gradients, the replay counters' change)."""
    monkeypatch.setenv("DTORCH_BACKWARD_REPLAY", mode)
    if reset:
        for p in leaves:
            p.grad = None
    _C.cut_segment()
    loss = make_loss()
    n0, _ = _C._pending_structure()
    before = stats()
    loss.backward(**kw)
    n1, h1 = _C._pending_structure()
    changed = delta(stats(), before)
    return n1 - n0, h1, [bits(p.grad) for p in leaves], changed


def check_replay(make_loss, leaves, monkeypatch):
    """Walked, captured and replayed backwards of the same forward record the
    same segment and give the same bits; returns the number of ops."""
    one_backward("0", make_loss, leaves, monkeypatch)  # values and layouts settle
    walked = one_backward("0", make_loss, leaves, monkeypatch)
    captured = one_backward("1", make_loss, leaves, monkeypatch)
    replayed = one_backward("1", make_loss, leaves, monkeypatch)
    assert walked[3] == {"replays": 0, "captures": 0, "not_replayable": 0, "walks": 0}
    assert captured[3]["captures"] == 1, (captured[3], stats()["last_reason"])
    assert replayed[3]["replays"] == 1, (replayed[3], stats()["last_reason"])
    assert walked[0] == captured[0] == replayed[0] > 0
    assert walked[1] == captured[1] == replayed[1]
    assert walked[2] == captured[2] == replayed[2]
    assert all(g is not None for g in walked[2])
    return walked[0]


class MLP(nn.Module):
    def __init__(self, mesh, dtype=dtorch.float32):
        super().__init__()
        with nn.default_device_mesh(mesh):
            self.fc1 = nn.Linear(8, 16, dtype=dtype)
            self.fc2 = nn.Linear(16, 4, dtype=dtype)

    def forward(self, x):
        return self.fc2(nn.functional.gelu(self.fc1(x)))


def test_mlp(meshes, monkeypatch):
    mesh = meshes["1"]
    dtorch.manual_seed(1)
    model = MLP(mesh)
    x = dtorch.randn(5, 8, device_mesh=mesh)
    y = dtorch.randn(5, 4, device_mesh=mesh)
    params = list(model.parameters())
    ops = check_replay(lambda: ((model(x) - y) ** 2).mean(), params, monkeypatch)
    assert ops >= 10


def test_segment_text_is_the_same(meshes, monkeypatch):
    """The segment run after a replayed backward is the walked one, as text
    (dtorch.last_ir), and the program cache hits."""
    mesh = meshes["1"]
    dtorch.manual_seed(2)
    model = MLP(mesh)
    x = dtorch.randn(3, 8, device_mesh=mesh)
    params = list(model.parameters())

    def step(mode):
        monkeypatch.setenv("DTORCH_BACKWARD_REPLAY", mode)
        for p in params:
            p.grad = None
        _C.cut_segment()
        model(x).relu().sum().backward()
        grads = [p.grad.numpy() for p in params]  # runs the step's segment
        return dtorch.last_ir("input"), grads

    step("0")
    walked_text, walked = step("0")
    step("1")
    compiles = dtorch._C.compile_count()
    replayed_text, replayed = step("1")
    assert replayed_text == walked_text
    assert dtorch._C.compile_count() == compiles  # the cached program ran
    assert all(np.array_equal(a, b) for a, b in zip(walked, replayed))


def gpt(mesh, tp=False):
    dtorch.manual_seed(3)
    cfg = gpt_model.GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, d_model=16)
    with nn.default_device_mesh(mesh):
        model = gpt_model.GPT(cfg)
    if tp:
        gpt_model.parallelize(model, mesh)
    return model, cfg


def test_gpt(meshes, monkeypatch):
    mesh = meshes["1"]
    model, cfg = gpt(mesh)
    rng = np.random.default_rng(0)
    idx = dtorch.tensor(rng.integers(0, cfg.vocab_size, (4, cfg.block_size)), device_mesh=mesh)
    tgt = dtorch.tensor(rng.integers(0, cfg.vocab_size, (4, cfg.block_size)), device_mesh=mesh)
    ops = check_replay(lambda: model(idx, tgt)[1], list(model.parameters()), monkeypatch)
    assert ops > 100


def test_gpt_dp_tp(meshes, monkeypatch):
    """DP x TP on a 2x2 mesh: sharded and partial placements, redistributions
    in the backward (the gradient all-reduce)."""
    mesh = meshes["2x2"]
    model, cfg = gpt(mesh, tp=True)
    rng = np.random.default_rng(1)
    place = [Shard(0), Replicate()]
    idx = dtorch.tensor(rng.integers(0, cfg.vocab_size, (4, cfg.block_size)), device_mesh=mesh,
                        placements=place)
    tgt = dtorch.tensor(rng.integers(0, cfg.vocab_size, (4, cfg.block_size)), device_mesh=mesh,
                        placements=place)
    check_replay(lambda: model(idx, tgt)[1], list(model.parameters()), monkeypatch)


def test_data_parallel_two_ranks(dt, monkeypatch):
    mesh = dt.init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
    dtorch.manual_seed(4)
    model = MLP(mesh, dtype=dtorch.float64)
    x = dtorch.randn(6, 8, dtype=dtorch.float64, device_mesh=mesh, placements=[Shard(0)])
    check_replay(lambda: model(x).tanh().sum(), list(model.parameters()), monkeypatch)


def test_shared_weights_and_repeated_operands(meshes, monkeypatch):
    """A weight used twice and a tensor multiplied by itself: the walk must
    tell the same tensor from two equal ones (the key numbers each tensor
    once)."""
    mesh = meshes["4"]
    dtorch.manual_seed(5)
    with nn.default_device_mesh(mesh):
        lin = nn.Linear(6, 6)
    x = dtorch.randn(4, 6, device_mesh=mesh, placements=[Shard(0)])
    check_replay(lambda: (lin(lin(x)) * lin(x)).sum(), list(lin.parameters()), monkeypatch)
    w = dtorch.randn(4, 6, device_mesh=mesh, requires_grad=True)
    v = dtorch.randn(4, 6, device_mesh=mesh, requires_grad=True)
    check_replay(lambda: (w * w + w * v).sum(), [w, v], monkeypatch)


def test_same_structure_other_tensors_replays(meshes, monkeypatch):
    """The key is the structure, not the tensors: a second model of the same
    shapes replays what the first captured, into its own leaves."""
    mesh = meshes["1"]
    dtorch.manual_seed(6)
    a, b = MLP(mesh), MLP(mesh)
    x = dtorch.randn(7, 8, device_mesh=mesh)
    one_backward("1", lambda: a(x).sum(), list(a.parameters()), monkeypatch)
    walked = one_backward("0", lambda: b(x).sum(), list(b.parameters()), monkeypatch)
    replayed = one_backward("1", lambda: b(x).sum(), list(b.parameters()), monkeypatch)
    assert replayed[3]["replays"] == 1
    assert walked[:3] == replayed[:3]


def test_existing_grad_accumulates(meshes, monkeypatch):
    """Leaves whose .grad exists (no zero_grad between backwards): the
    gradient is added to it, as the walk does, under a key of its own."""
    mesh = meshes["4"]
    dtorch.manual_seed(7)
    model = MLP(mesh)
    x = dtorch.randn(8, 8, device_mesh=mesh, placements=[Shard(0)])
    params = list(model.parameters())

    def twice(mode):
        first = one_backward(mode, lambda: model(x).sum(), params, monkeypatch)
        second = one_backward(mode, lambda: model(x).sum(), params, monkeypatch, reset=False)
        return first, second

    twice("0")
    walked = twice("0")
    captured = twice("1")
    replayed = twice("1")
    assert captured[1][3]["captures"] == 1
    assert replayed[0][3]["replays"] == 1 and replayed[1][3]["replays"] == 1
    for k in range(2):
        assert walked[k][:3] == captured[k][:3] == replayed[k][:3]
    # Accumulated: twice the single gradient.
    g1 = np.frombuffer(walked[0][2][0][1], dtype=np.float32)
    g2 = np.frombuffer(walked[1][2][0][1], dtype=np.float32)
    np.testing.assert_allclose(g2, 2 * g1, rtol=1e-6)


def test_retain_grad_and_multiple_roots(meshes, monkeypatch):
    mesh = meshes["1"]
    w = dtorch.randn(3, 3, device_mesh=mesh, requires_grad=True)
    x = dtorch.randn(3, 3, device_mesh=mesh)
    kept = {}

    def make_loss():
        h = (x @ w).exp()
        h.retain_grad()
        kept["h"] = h
        return h.sum()

    def with_h(mode):
        out = one_backward(mode, make_loss, [w], monkeypatch)
        return out[:3], bits(kept["h"].grad)

    with_h("0")
    walked = with_h("0")
    with_h("1")
    replayed = with_h("1")
    assert walked == replayed and walked[1] is not None

    def two_roots():
        a = (w * 2.0).sum()
        b = (w * w).mean()
        return a, b

    def roots(mode):
        monkeypatch.setenv("DTORCH_BACKWARD_REPLAY", mode)
        w.grad = None
        a, b = two_roots()
        dtorch.autograd.backward([a, b, a], [None, dtorch.ones((), device_mesh=mesh), 3.0])
        return bits(w.grad)

    roots("0")
    expect = roots("0")
    roots("1")
    before = stats()
    assert roots("1") == expect
    assert delta(stats(), before)["replays"] == 1


def test_retain_graph(meshes, monkeypatch):
    mesh = meshes["1"]
    w = dtorch.randn(4, device_mesh=mesh, requires_grad=True)

    def run(mode):
        monkeypatch.setenv("DTORCH_BACKWARD_REPLAY", mode)
        w.grad = None
        y = (w.sin() * w).sum()
        y.backward(retain_graph=True)
        y.backward(retain_graph=True)
        y.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            y.backward()
        return bits(w.grad)

    run("0")
    expect = run("0")
    run("1")
    run("1")
    before = stats()
    assert run("1") == expect
    assert delta(stats(), before)["replays"] == 3


def test_changed_shape_takes_a_new_key(meshes, monkeypatch):
    mesh = meshes["1"]
    dtorch.manual_seed(8)
    model = MLP(mesh)
    params = list(model.parameters())
    for rows in (3, 5):
        x = dtorch.randn(rows, 8, device_mesh=mesh)
        check_replay(lambda: model(x).sum(), params, monkeypatch)
    x = dtorch.randn(9, 8, device_mesh=mesh)
    first = one_backward("1", lambda: model(x).sum(), params, monkeypatch)
    assert first[3]["captures"] == 1 and first[3]["replays"] == 0


def test_fallbacks_walk_in_python(meshes, monkeypatch):
    """create_graph, inputs=, autograd.grad and DTORCH_BACKWARD_REPLAY=0
    never replay nor capture; they still compute the right gradients."""
    mesh = meshes["1"]
    w = dtorch.tensor(np.array([1.0, 2.0, 3.0], dtype=np.float32), device_mesh=mesh,
                      requires_grad=True)
    v = dtorch.tensor(np.array([0.5, 0.5, 0.5], dtype=np.float32), device_mesh=mesh,
                      requires_grad=True)

    def loss():
        return (w * w * v).sum()

    for _ in range(2):  # twice: a capture would replay the second time
        before = stats()
        w.grad = v.grad = None
        loss().backward(create_graph=True)
        assert delta(stats(), before) == {"replays": 0, "captures": 0, "not_replayable": 0,
                                          "walks": 0}
        np.testing.assert_allclose(w.grad.numpy(), [1.0, 2.0, 3.0])
        w.grad = v.grad = None
        before = stats()
        loss().backward(inputs=[v])
        assert w.grad is None
        np.testing.assert_allclose(v.grad.numpy(), [1.0, 4.0, 9.0])
        (g,) = dtorch.autograd.grad(loss(), [w])
        np.testing.assert_allclose(g.numpy(), [1.0, 2.0, 3.0])
        monkeypatch.setenv("DTORCH_BACKWARD_REPLAY", "0")
        loss().backward()
        monkeypatch.setenv("DTORCH_BACKWARD_REPLAY", "1")
        assert delta(stats(), before) == {"replays": 0, "captures": 0, "not_replayable": 0,
                                          "walks": 0}


def test_released_values_walk_in_python(dt, monkeypatch):
    """fully_shard(reshard_after_forward=True) releases the forward's
    gathered weights: the walk regathers them, so such a graph is never
    replayed (a meta tensor in the graph); training matches the Python walk."""
    from dtorch.distributed.fsdp import fully_shard
    mesh = dt.init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))

    def train(mode):
        monkeypatch.setenv("DTORCH_BACKWARD_REPLAY", mode)
        dtorch.manual_seed(9)
        with nn.default_device_mesh(mesh):
            model = MLP(mesh, dtype=dtorch.float64)
        fully_shard(model.fc1, mesh=mesh, reshard_after_forward=True)
        fully_shard(model, mesh=mesh, reshard_after_forward=True)
        opt = dtorch.optim.AdamW(model.parameters(), lr=0.05)
        rng = np.random.default_rng(0)
        for _ in range(3):
            x = dtorch.distribute_tensor(rng.standard_normal((8, 8)), mesh, [Shard(0)])
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
        return [p.numpy().tobytes() for p in model.parameters()]

    walked = train("0")
    before = stats()
    replayed = train("1")
    changed = delta(stats(), before)
    assert changed["replays"] == 0 and changed["walks"] == 3
    assert "meta" in stats()["last_reason"]
    assert walked == replayed


def test_training_matches_the_python_walk(meshes, monkeypatch):
    """Several AdamW steps of the GPT with replay on and off: the same losses
    and parameters, bit for bit."""
    mesh = meshes["1"]

    def train(mode):
        monkeypatch.setenv("DTORCH_BACKWARD_REPLAY", mode)
        model, cfg = gpt(mesh)
        opt = dtorch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        rng = np.random.default_rng(5)
        losses = []
        for _ in range(4):
            idx = dtorch.tensor(rng.integers(0, cfg.vocab_size, (2, cfg.block_size)),
                                device_mesh=mesh)
            tgt = dtorch.tensor(rng.integers(0, cfg.vocab_size, (2, cfg.block_size)),
                                device_mesh=mesh)
            _, loss = model(idx, tgt)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.numpy().tobytes())
        return losses, [p.numpy().tobytes() for p in model.parameters()]

    walked = train("0")
    before = stats()
    replayed = train("1")
    assert delta(stats(), before)["replays"] >= 3
    assert walked == replayed
