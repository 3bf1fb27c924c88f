"""dtorch.optim against numpy re-implementations of torch's update rules
(float64, several steps, gradients set by hand), on meshes (4,) and (2, 2)
with sharded and replicated parameters; state placements, param groups,
state_dict round trips, the program cache and bounded worker memory."""
import math

import numpy as np
import pytest

import dtorch
from dtorch import Replicate, Shard
from dtorch.optim.lr_scheduler import CosineAnnealingLR, CosineWithWarmupLR, LambdaLR
from conftest import assert_close

TOL = 1e-11


# ---- numpy references of torch's single-tensor rules ------------------------------
def ref_sgd(p, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
            maximize=False):
    p = p.copy()
    buf = None
    for g in grads:
        d = -g if maximize else g
        if weight_decay:
            d = d + weight_decay * p
        if momentum:
            buf = d.copy() if buf is None else momentum * buf + (1 - dampening) * d
            d = d + momentum * buf if nesterov else buf
        p = p - lr * d
    return p, buf


def lerp(a, b, w):
    return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1 - w)


def ref_adam(p, grads, lrs, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
             decoupled=False, maximize=False):
    p = p.copy()
    b1, b2 = betas
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    vmax = np.zeros_like(p)
    for step, (g, lr) in enumerate(zip(grads, lrs), start=1):
        g = -g if maximize else g
        if weight_decay:
            if decoupled:
                p = p * (1 - lr * weight_decay)
            else:
                g = g + weight_decay * p
        m = lerp(m, g, 1 - b1)
        v = v * b2 + (1 - b2) * g * g
        bc1 = 1 - b1 ** step
        bc2_sqrt = math.sqrt(1 - b2 ** step)
        if amsgrad:
            vmax = np.maximum(vmax, v)
            denom = np.sqrt(vmax) / bc2_sqrt + eps
        else:
            denom = np.sqrt(v) / bc2_sqrt + eps
        p = p - (lr / bc1) * (m / denom)
    return p, m, v, step


LAYOUTS = [
    ("4", [Shard(0)]),
    ("4", [Replicate()]),
    ("4", [Shard(1)]),
    ("2x2", [Shard(0), Shard(1)]),
    ("2x2", [Replicate(), Shard(0)]),
    ("2x2", [Replicate(), Replicate()]),
]


def make_param(dt, mesh, placements, value):
    return dt.nn.Parameter(dt.tensor(value, device_mesh=mesh, placements=placements))


def set_grad(dt, p, g):
    p.grad = dt.tensor(g, device_mesh=p.device_mesh, placements=p.placements)


def problem(seed, shape=(6, 5), steps=4):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape), [rng.standard_normal(shape) for _ in range(steps)]


@pytest.mark.parametrize("mesh_name,placements", LAYOUTS)
@pytest.mark.parametrize("config", [
    dict(),
    dict(momentum=0.9),
    dict(momentum=0.9, nesterov=True, weight_decay=0.1),
    dict(momentum=0.5, dampening=0.3, weight_decay=0.01, maximize=True),
])
def test_sgd_matches_torch_rule(dt, meshes, mesh_name, placements, config):
    mesh = meshes[mesh_name]
    p0, grads = problem(1)
    p = make_param(dt, mesh, placements, p0)
    opt = dt.optim.SGD([p], lr=0.05, **config)
    for g in grads:
        set_grad(dt, p, g)
        opt.step()
    want, buf = ref_sgd(p0, grads, 0.05, **config)
    assert p.placements == tuple(placements)
    assert_close(p.numpy(), want, TOL)
    if config.get("momentum"):
        state = opt.state[p]["momentum_buffer"]
        assert state.placements == tuple(placements)
        assert_close(state.numpy(), buf, TOL)


@pytest.mark.parametrize("mesh_name,placements", LAYOUTS)
@pytest.mark.parametrize("cls,config", [
    ("Adam", dict()),
    ("Adam", dict(weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict()),
    ("AdamW", dict(weight_decay=0.3, betas=(0.3, 0.9), eps=1e-6, maximize=True)),
])
def test_adam_family_matches_torch_rule(dt, meshes, mesh_name, placements, cls, config):
    mesh = meshes[mesh_name]
    p0, grads = problem(2, steps=5)
    p = make_param(dt, mesh, placements, p0)
    opt = getattr(dt.optim, cls)([p], lr=0.01, **config)
    for g in grads:
        set_grad(dt, p, g)
        opt.step()
    ref_config = dict(config)
    if cls == "AdamW":
        ref_config.setdefault("weight_decay", 0.01)
        ref_config["decoupled"] = True
    want, m, v, step = ref_adam(p0, grads, [0.01] * len(grads), **ref_config)
    assert_close(p.numpy(), want, TOL)
    state = opt.state[p]
    assert_close(state["exp_avg"].numpy(), m, TOL)
    assert_close(state["exp_avg_sq"].numpy(), v, TOL)
    assert state["step"].item() == step
    for key in ("exp_avg", "exp_avg_sq"):
        assert state[key].placements == tuple(placements)
        assert state[key].device_mesh == mesh


def test_float32_adam_is_close_to_the_float64_rule(dt, meshes):
    p0, grads = problem(3, steps=6)
    p = dt.nn.Parameter(dt.tensor(p0.astype(np.float32), device_mesh=meshes["4"],
                                  placements=[Shard(0)]))
    opt = dt.optim.AdamW([p], lr=1e-3)
    for g in grads:
        p.grad = dt.tensor(g.astype(np.float32), device_mesh=meshes["4"], placements=[Shard(0)])
        opt.step()
    want, *_ = ref_adam(p0, grads, [1e-3] * 6, weight_decay=0.01, decoupled=True)
    assert p.dtype == dt.float32
    assert_close(p.numpy(), want, 2e-6)


def test_param_groups_and_parameters_without_grad(dt, meshes):
    mesh = meshes["2x2"]
    a0, ga = problem(4)
    b0, gb = problem(5, shape=(4,))
    c0 = np.ones(3)
    a = make_param(dt, mesh, [Shard(0), Replicate()], a0)
    b = make_param(dt, mesh, [Replicate(), Shard(0)], b0)
    c = make_param(dt, mesh, [Replicate(), Replicate()], c0)
    opt = dt.optim.SGD([{"params": [a]}, {"params": [b, c], "lr": 0.2, "momentum": 0.9}],
                       lr=0.05)
    assert opt.param_groups[0]["momentum"] == 0 and opt.param_groups[1]["lr"] == 0.2
    for g1, g2 in zip(ga, gb):
        set_grad(dt, a, g1)
        set_grad(dt, b, g2)
        opt.step()
    assert_close(a.numpy(), ref_sgd(a0, ga, 0.05)[0], TOL)
    assert_close(b.numpy(), ref_sgd(b0, gb, 0.2, momentum=0.9)[0], TOL)
    assert_close(c.numpy(), c0, 0)   # no grad: untouched, no state
    assert c not in opt.state
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a]})
    with pytest.raises(ValueError, match="empty parameter list"):
        dt.optim.Adam([])
    with pytest.raises(TypeError, match="can only optimize Tensors"):
        dt.optim.Adam([np.zeros(3)])
    with pytest.raises(ValueError, match="Invalid learning rate"):
        dt.optim.Adam([a], lr=-1.0)


def test_zero_grad(dt, meshes):
    p = make_param(dt, meshes["4"], [Shard(0)], np.ones((4, 2)))
    opt = dt.optim.SGD([p], lr=0.1)
    set_grad(dt, p, np.ones((4, 2)))
    grad = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is grad
    assert_close(p.grad.numpy(), np.zeros((4, 2)), 0)
    assert p.grad.placements == (Shard(0),)
    opt.zero_grad()
    assert p.grad is None
    opt.step()  # no grads: nothing happens
    assert_close(p.numpy(), np.ones((4, 2)), 0)


def test_state_dict_round_trip_continues_the_same_trajectory(dt, meshes):
    mesh = meshes["2x2"]
    p0, grads = problem(6, steps=6)
    p = make_param(dt, mesh, [Shard(0), Shard(1)], p0)
    opt = dt.optim.AdamW([p], lr=0.02, weight_decay=0.1)
    for g in grads[:3]:
        set_grad(dt, p, g)
        opt.step()
    sd = opt.state_dict()
    assert sorted(sd["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
    assert sd["param_groups"][0]["params"] == [0]
    assert sd["param_groups"][0]["lr"] == 0.02
    # Save as numpy (as a checkpoint would), load into a fresh optimizer whose
    # parameter has another layout on another mesh.
    saved = {"state": {0: {k: v.numpy() for k, v in sd["state"][0].items()}},
             "param_groups": sd["param_groups"]}
    q = make_param(dt, meshes["4"], [Shard(1)], p.numpy())
    opt2 = dt.optim.AdamW([q], lr=0.5)
    opt2.load_state_dict(saved)
    assert opt2.param_groups[0]["lr"] == 0.02
    assert opt2.state[q]["exp_avg"].placements == (Shard(1),)
    for g in grads[3:]:
        set_grad(dt, p, g)
        opt.step()
        set_grad(dt, q, g)
        opt2.step()
    want, *_ = ref_adam(p0, grads, [0.02] * 6, weight_decay=0.1, decoupled=True)
    assert_close(p.numpy(), want, TOL)
    assert_close(q.numpy(), want, TOL)
    # DTensor values load too (redistributed to the parameter's placements).
    opt3 = dt.optim.AdamW([q], lr=0.5)
    opt3.load_state_dict(opt.state_dict())
    assert_close(opt3.state[q]["exp_avg"].numpy(), opt.state[p]["exp_avg"].numpy(), 0)


def test_load_state_dict_checks_before_changing_anything(dt, meshes):
    p = make_param(dt, meshes["4"], [Shard(0)], np.ones((4, 2)))
    opt = dt.optim.Adam([p], lr=0.1)
    set_grad(dt, p, np.ones((4, 2)))
    opt.step()
    good = opt.state_dict()
    bad = {"state": {0: {"step": 1.0, "exp_avg": np.zeros((3, 2)),
                         "exp_avg_sq": np.zeros((4, 2))}},
           "param_groups": [dict(good["param_groups"][0], lr=7.0)]}
    with pytest.raises(ValueError, match=r"'exp_avg' of parameter 0 has shape \(3, 2\)"):
        opt.load_state_dict(bad)
    assert opt.param_groups[0]["lr"] == 0.1
    assert opt.state[p]["step"].item() == 1.0
    with pytest.raises(ValueError, match="different number of parameter groups"):
        opt.load_state_dict({"state": {}, "param_groups": []})


def test_steady_state_steps_compile_nothing_and_keep_memory_bounded(dt, meshes):
    mesh = meshes["2x2"]
    rng = np.random.default_rng(7)
    params = [make_param(dt, mesh, pl, rng.standard_normal((8, 4)))
              for pl in ([Shard(0), Shard(1)], [Replicate(), Shard(0)], [Replicate()] * 2)]
    opt = dt.optim.AdamW(params, lr=1e-2)
    sched = CosineWithWarmupLR(opt, num_warmup_steps=2, num_training_steps=8)
    dt.synchronize()
    compiles, live = [], []
    for _ in range(7):
        for p in params:
            set_grad(dt, p, rng.standard_normal((8, 4)))
        opt.step()
        sched.step()
        opt.zero_grad()
        dt.synchronize()
        compiles.append(dt._C.compile_count())
        live.append(dt._C.live_tensors())
    # Step 1 also creates the state, step 2 compiles the steady program; from
    # step 3 on a step compiles nothing, although the lr changes every step.
    assert compiles[2:] == [compiles[1]] * 5, compiles
    assert len(set(live[1:])) == 1, live


def test_lr_schedulers(dt, meshes):
    p = make_param(dt, meshes["4"], [Replicate()], np.zeros(2))
    opt = dt.optim.SGD([p], lr=0.1)
    sched = LambdaLR(opt, lambda e: 0.5 ** e)
    lrs = []
    for _ in range(4):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
    assert lrs == pytest.approx([0.1, 0.05, 0.025, 0.0125])
    assert sched.get_last_lr() == pytest.approx([0.00625])

    opt = dt.optim.SGD([p], lr=1.0)
    sched = CosineWithWarmupLR(opt, num_warmup_steps=4, num_training_steps=12)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(14):
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs[:5] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    assert lrs[8] == pytest.approx(0.5)   # half way through the cosine
    assert lrs[12:] == pytest.approx([0.0, 0.0, 0.0])
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))

    opt = dt.optim.SGD([p], lr=1.0)
    sched = CosineAnnealingLR(opt, T_max=10, eta_min=0.1)
    for _ in range(5):
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.55)


def test_adam_under_a_schedule_matches_the_rule(dt, meshes):
    p0, grads = problem(8, steps=5)
    p = make_param(dt, meshes["2x2"], [Shard(1), Replicate()], p0)
    opt = dt.optim.Adam([p], lr=0.1)
    sched = LambdaLR(opt, lambda e: 1.0 / (e + 1))
    lrs = []
    for g in grads:
        lrs.append(opt.param_groups[0]["lr"])
        set_grad(dt, p, g)
        opt.step()
        sched.step()
    want, *_ = ref_adam(p0, grads, lrs)
    assert_close(p.numpy(), want, TOL)


def test_training_loop_with_hand_written_gradients(dt, meshes):
    """Data parallel linear regression on the (2, 2) mesh: forward, the
    gradient (written with dtorch ops, as autograd would record them) and
    the optimizer step form one segment per step; the loss falls, the result
    matches numpy, and steps after the second compile nothing."""
    mesh = meshes["2x2"]
    rng = np.random.default_rng(9)
    n, d = 16, 6
    x = rng.standard_normal((n, d))
    w_true = rng.standard_normal((1, d))
    y = x @ w_true.T + 0.3
    dt.manual_seed(0)
    model = dt.nn.Linear(d, 1, device_mesh=mesh, dtype=dt.float64,
                         placements={"weight": [Replicate(), Shard(1)]})
    w, b = model.weight.numpy().copy(), model.bias.numpy().copy()
    opt = dt.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    xt = dt.tensor(x, device_mesh=mesh, placements=[Shard(0), Replicate()])
    yt = dt.tensor(y, device_mesh=mesh, placements=[Shard(0), Replicate()])
    dt.synchronize()
    losses, compiles, live = [], [], []
    bw = bb = None
    for _ in range(8):
        err = model(xt) - yt
        loss = (err * err).mean()
        model.weight.grad = (err.t() @ xt) * (2.0 / n)
        model.bias.grad = err.sum(0) * (2.0 / n)
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())  # as in torch: a kept loss keeps its graph
        del err, loss
        dt.synchronize()
        compiles.append(dt._C.compile_count())
        live.append(dt._C.live_tensors() - len(losses))
        # numpy, the same rule
        e = x @ w.T + b - y
        gw, gb = (e.T @ x) * (2.0 / n), e.sum(0) * (2.0 / n)
        bw = gw if bw is None else 0.5 * bw + gw
        bb = gb if bb is None else 0.5 * bb + gb
        w, b = w - 0.1 * bw, b - 0.1 * bb
    values = [loss.item() for loss in losses]
    assert values[-1] < 0.2 * values[0]
    assert_close(model.weight.numpy(), w, 1e-10)
    assert_close(model.bias.numpy(), b, 1e-10)
    assert model.weight.placements == (Replicate(), Shard(1))
    assert opt.state[model.weight]["momentum_buffer"].placements == (Replicate(), Shard(1))
    assert compiles[2:] == [compiles[1]] * 6, compiles
    assert len(set(live[1:])) == 1, live


def test_parameters_on_sub_meshes_keep_their_view(dt, meshes):
    mesh = meshes["2x2"]
    tp = mesh["tp"]
    p0, grads = problem(10, steps=3)
    p = make_param(dt, tp, [Shard(0)], p0)
    q = make_param(dt, mesh["dp"], [Replicate()], p0)
    opt = dt.optim.Adam([p, q], lr=0.05, weight_decay=0.1)
    for g in grads:
        set_grad(dt, p, g)
        set_grad(dt, q, g)
        opt.step()
    want, *_ = ref_adam(p0, grads, [0.05] * 3, weight_decay=0.1)
    for t, sub in ((p, tp), (q, mesh["dp"])):
        assert t.device_mesh == sub
        assert opt.state[t]["exp_avg"].device_mesh == sub
        assert opt.state[t]["exp_avg"].placements == t.placements
        assert_close(t.numpy(), want, TOL)
