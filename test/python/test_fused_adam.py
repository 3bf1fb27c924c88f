"""The multi-tensor Adam/AdamW update (dtensor.fused_adam, the default of
dtorch.optim.Adam and AdamW; ``foreach=False`` records it op by op).

- float32 and float64: bitwise the per-op update, over several steps, on
  sharded and replicated parameters (weight decay on and off, Adam and
  AdamW, amsgrad, maximize);
- numerics against torch.optim.Adam/AdamW on the gathered tensors of a
  small model trained on 1 rank, data parallel on 2 (Partial gradients,
  reduced before the update) and fully sharded on 2 (parameters Shard(0));
- float16 and bfloat16 parameters against a float32 reference rounded once
  per step;
- one step of any number of parameters records O(1) ops (one fused_adam
  and the step count's add) and runs one kernel per rank.
"""
import numpy as np
import pytest

from dtorch import Replicate, Shard

SHAPES = [(6, 5), (5,), (5, 3), (3,), (7,)]


def make_params(dt, mesh, placements, dtype=np.float32, seed=0, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s).astype(dtype) for s in shapes]
    params = [dt.distribute_tensor(v, mesh, placements(s)).requires_grad_()
              for v, s in zip(values, shapes)]
    return params, values


def grads_for(step, dtype=np.float32, shapes=SHAPES):
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def run_steps(dt, mesh, placements, make_opt, steps, dtype=np.float32, shapes=SHAPES):
    params, _ = make_params(dt, mesh, placements, dtype, shapes=shapes)
    opt = make_opt(params)
    for step in range(steps):
        for p, g, s in zip(params, grads_for(step, dtype, shapes), shapes):
            p.grad = dt.distribute_tensor(g, mesh, placements(s))
        opt.step()
    values = [p.numpy() for p in params]
    state = [opt.state[p][k].numpy() for p in params
             for k in sorted(opt.state[p]) if k != "step"]
    return values, state, opt


def sharded(shape):
    return [Shard(0)] if shape[0] % 2 == 1 else [Replicate()]


CONFIGS = [
    ("AdamW", dict(lr=1e-2, weight_decay=0.1)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.0, betas=(0.3, 0.9))),
    ("Adam", dict(lr=1e-2, weight_decay=0.05)),
    ("Adam", dict(lr=3e-3, amsgrad=True, maximize=True)),
    ("AdamW", dict(lr=1e-2, amsgrad=True, weight_decay=0.02)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,kwargs", CONFIGS)
def test_fused_is_bitwise_the_per_op_update(dt, meshes, name, kwargs, dtype):
    mesh = meshes["4"]
    cls = getattr(dt.optim, name)
    fused = run_steps(dt, mesh, sharded, lambda ps: cls(ps, **kwargs), 4, dtype)
    per_op = run_steps(dt, mesh, sharded, lambda ps: cls(ps, foreach=False, **kwargs), 4,
                       dtype)
    for a, b in zip(fused[0] + fused[1], per_op[0] + per_op[1]):
        assert a.dtype == np.dtype(dtype)
        assert a.tobytes() == b.tobytes()
    # The parameters of a mesh share one step count.
    opt = fused[2]
    steps = {id(opt.state[p]["step"]) for p in opt.param_groups[0]["params"]}
    assert len(steps) == 1
    assert float(opt.state[opt.param_groups[0]["params"][0]]["step"].item()) == 4.0


@pytest.mark.parametrize("generated", ["1", "0"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_generated_and_hand_written_kernels_are_bitwise_the_per_op_update(
        dt, meshes, monkeypatch, tmp_path, generated, dtype):
    """From the second step the segment runs its fused tier, whose
    fused_adam calls the kernel generated through MLIR for its signature
    (DTORCH_GENERATED_ADAM=1, the default) or the runtime's hand-written one
    (=0): both are bitwise the per-op update. Shapes of their own make the
    signature new, so the generated kernel is compiled (and dumped) here."""
    monkeypatch.setenv("DTORCH_GENERATED_ADAM", generated)
    monkeypatch.setenv("DTORCH_KERNEL_DUMP_DIR", str(tmp_path))
    k = (2 if generated == "1" else 0) + (1 if dtype == np.float64 else 0)
    shapes = [(11, 3 + k), (21 + k,), (3, 17), (1,)]
    mesh = meshes["4"]
    for name, kwargs in CONFIGS[:3]:
        cls = getattr(dt.optim, name)
        fused = run_steps(dt, mesh, sharded, lambda ps: cls(ps, **kwargs), 4, dtype,
                          shapes)
        per_op = run_steps(dt, mesh, sharded,
                           lambda ps: cls(ps, foreach=False, **kwargs), 4, dtype, shapes)
        for a, b in zip(fused[0] + fused[1], per_op[0] + per_op[1]):
            assert a.tobytes() == b.tobytes()
    dumped = sorted(p.name for p in tmp_path.glob("dtorch_adam_*.so"))
    assert bool(dumped) == (generated == "1"), dumped


def torch_reference(torch, name, kwargs, values, batches):
    params = [torch.tensor(v, requires_grad=True) for v in values]
    opt = getattr(torch.optim, name)(params, foreach=False, **kwargs)
    losses = []
    for x in batches:
        opt.zero_grad()
        w1, b1, w2 = params
        loss = ((torch.tanh(torch.tensor(x) @ w1 + b1) @ w2) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().numpy() for p in params]


MODEL = [(8, 16), (16,), (16, 4)]


@pytest.mark.parametrize("layout", ["1", "dp2", "fsdp2"])
@pytest.mark.parametrize("name,kwargs", [
    ("AdamW", dict(lr=1e-2, weight_decay=0.1)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.0)),
    ("Adam", dict(lr=1e-2, weight_decay=0.01, amsgrad=True)),
])
def test_matches_torch_on_gathered_tensors(dt, meshes, layout, name, kwargs):
    torch = pytest.importorskip("torch")
    mesh = meshes["1"] if layout == "1" else dt.init_device_mesh("cpu", (2,))
    rng = np.random.default_rng(3)
    values = [(rng.standard_normal(s) * 0.3).astype(np.float32) for s in MODEL]
    batches = [rng.standard_normal((8, 8)).astype(np.float32) for _ in range(5)]
    param_placement = [Shard(0)] if layout == "fsdp2" else [Replicate()]
    params = [dt.distribute_tensor(v, mesh, param_placement).requires_grad_() for v in values]
    opt = getattr(dt.optim, name)(params, **kwargs)
    losses = []
    for x in batches:
        opt.zero_grad()
        w1, b1, w2 = params
        xs = dt.distribute_tensor(x, mesh, [Shard(0)])
        loss = (((xs @ w1 + b1).tanh() @ w2) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    ref_losses, ref_params = torch_reference(torch, name, kwargs, values, batches)
    # The products differ from torch's in the last bits (another GEMM).
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-4, atol=1e-6)
    for p, want in zip(params, ref_params):
        np.testing.assert_allclose(p.numpy(), want, rtol=1e-4, atol=1e-5)
    assert "dtensor.fused_adam" in dt.last_ir("input")


def round_to(values, dtype):
    if dtype == "float16":
        return values.astype(np.float16)
    import ml_dtypes
    return values.astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_parameters_against_a_float32_reference(dt, meshes, dtype):
    mesh = meshes["4"]
    rng = np.random.default_rng(5)
    lr, betas, eps, wd = 1e-2, (0.9, 0.999), 1e-8, 0.1
    full = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    values = [round_to(v, dtype) for v in full]
    params = [dt.distribute_tensor(v.astype(np.float32), mesh, sharded(s)).to(
        getattr(dt, dtype)).requires_grad_() for v, s in zip(values, SHAPES)]
    opt = dt.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    ref = [v.astype(np.float32) for v in values]
    m = [np.zeros_like(v) for v in ref]
    v2 = [np.zeros_like(v) for v in ref]
    for step in range(1, 4):
        grads = [round_to(g, dtype) for g in grads_for(step)]
        for p, g, s in zip(params, grads, SHAPES):
            p.grad = dt.distribute_tensor(g.astype(np.float32), mesh, sharded(s)).to(
                getattr(dt, dtype))
        opt.step()
        step_size = np.float32(lr / (1 - betas[0] ** step))
        bc2 = np.float32(np.sqrt(1 - betas[1] ** step))
        for i, g in enumerate(grads):
            g = g.astype(np.float32)
            p = ref[i] * np.float32(1 - lr * wd)
            mi = m[i] + (g - m[i]) * np.float32(1 - betas[0])
            vi = v2[i] * np.float32(betas[1]) + g * g * np.float32(1 - betas[1])
            p = p - step_size * (mi / (np.sqrt(vi) / bc2 + np.float32(eps)))
            ref[i] = round_to(p, dtype).astype(np.float32)
            m[i] = round_to(mi, dtype).astype(np.float32)
            v2[i] = round_to(vi, dtype).astype(np.float32)
    for i, p in enumerate(params):
        got = p.to(dt.float32).numpy()
        # One rounding per step on each side: at most one 16-bit ulp apart.
        np.testing.assert_allclose(got, ref[i], rtol=2 ** -7 if dtype == "bfloat16" else 2 ** -10,
                                   atol=1e-6)
        assert p.dtype == getattr(dt, dtype)
        got_m = opt.state[p]["exp_avg"].to(dt.float32).numpy()
        np.testing.assert_allclose(got_m, m[i], rtol=2 ** -7, atol=1e-6)


def recorded_ops(ir):
    """The ops of a dtensor function's text (one per line `%x = dtensor.op`)."""
    import re
    return re.findall(r"= dtensor\.(\w+)", ir)


@pytest.mark.parametrize("count", [3, 12])
def test_one_step_records_a_constant_number_of_ops(dt, meshes, count):
    from dtorch import profiler
    mesh = meshes["4"]
    shapes = [(8 + i, 4) for i in range(count)]
    params = [dt.distribute_tensor(np.ones(s, np.float32), mesh, [Shard(0)]).requires_grad_()
              for s in shapes]
    grads = [dt.distribute_tensor(np.full(s, 0.5, np.float32), mesh, [Shard(0)])
             for s in shapes]
    opt = dt.optim.AdamW(params, lr=1e-2)

    def step():
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()

    for _ in range(4):
        step()
    ops = recorded_ops(dt.last_ir("input"))
    # The step count's increment (and the full of its scalar operand) and
    # the update of every parameter.
    assert ops.count("fused_adam") == 1 and len(ops) <= 3, ops
    dt.synchronize()
    with profiler.profile() as prof:
        step()
        dt.synchronize()
    kernels = [e for e in profiler.spans(prof.trace, 0, "compute") if e.get("cat") == "kernel"]
    adam = [e for e in kernels if e["name"] == "fused_adam"]
    assert len(adam) == 1, [e["name"] for e in kernels]
    # Rank 0's pieces of every parameter, exp_avg and exp_avg_sq.
    local = sum(((s[0] + 3) // 4) * s[1] * 4 for s in shapes)
    assert adam[0]["args"]["bytes"] == 3 * local, adam[0]["args"]
    # The per-op path records about ten ops per parameter.
    per_op = dt.optim.AdamW(params, lr=1e-2, foreach=False)
    for _ in range(2):
        for p, g in zip(params, grads):
            p.grad = g
        per_op.step()
    assert len(recorded_ops(dt.last_ir("input"))) >= 8 * count


def test_mixed_meshes_and_dtypes_in_one_group(dt, meshes):
    """A group spanning two meshes records one op per mesh; parameters of
    different dtypes share one op."""
    a = dt.distribute_tensor(np.ones((4, 4), np.float32), meshes["4"],
                             [Shard(0)]).requires_grad_()
    b = dt.distribute_tensor(np.ones((4,), np.float64), meshes["4"],
                             [Replicate()]).requires_grad_()
    c = dt.distribute_tensor(np.ones((2, 3), np.float32), meshes["1"],
                             [Replicate()]).requires_grad_()
    opt = dt.optim.AdamW([a, b, c], lr=0.1)
    ref = dt.optim.AdamW([x.detach().requires_grad_() for x in (a, b, c)], lr=0.1,
                         foreach=False)
    for _ in range(3):
        for p, q in zip(opt.param_groups[0]["params"], ref.param_groups[0]["params"]):
            g = np.full(p.shape, 0.25, np.float64 if p.dtype == dt.float64 else np.float32)
            p.grad = dt.distribute_tensor(g, p.device_mesh, p.placements)
            q.grad = dt.distribute_tensor(g, q.device_mesh, q.placements)
        opt.step()
        ref.step()
    for p, q in zip(opt.param_groups[0]["params"], ref.param_groups[0]["params"]):
        assert p.numpy().tobytes() == q.numpy().tobytes()
    assert opt.state[a]["step"] is opt.state[b]["step"]
    assert opt.state[c]["step"] is not opt.state[a]["step"]


def test_state_dict_round_trip_keeps_training_the_same(dt, meshes):
    """A state dict saved from the fused path and loaded into a new
    optimizer continues with the same bits as the original."""
    mesh = meshes["4"]
    params, _ = make_params(dt, mesh, sharded)
    opt = dt.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    for step in range(2):
        for p, g, s in zip(params, grads_for(step), SHAPES):
            p.grad = dt.distribute_tensor(g, mesh, sharded(s))
        opt.step()
    saved = {k: {i: {n: (v.numpy() if hasattr(v, "numpy") else v) for n, v in st.items()}
                 for i, st in opt.state_dict()["state"].items()} if k == "state" else v
             for k, v in opt.state_dict().items()}
    copies = [dt.distribute_tensor(p.numpy(), mesh, p.placements).requires_grad_()
              for p in params]
    loaded = dt.optim.AdamW(copies, lr=1e-2, weight_decay=0.1)
    loaded.load_state_dict(saved)
    for opt_, ps in ((opt, params), (loaded, copies)):
        for p, g, s in zip(ps, grads_for(7), SHAPES):
            p.grad = dt.distribute_tensor(g, mesh, sharded(s))
        opt_.step()
    for p, q in zip(params, copies):
        assert p.numpy().tobytes() == q.numpy().tobytes()
