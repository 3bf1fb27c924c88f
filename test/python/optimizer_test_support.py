"""What the tests of the multi-tensor optimizer updates share
(test_fused_adam.py, test_fused_sgd.py): parameters and gradients drawn
from fixed seeds, a few steps of an optimizer, the fused update against
the per-op one with the generated and the hand-written kernel, a small
model trained against torch's optimizer, 16-bit parameters, the ops one
step records and the kernels it runs, parameters on two meshes, and a
state dict saved and loaded mid-training."""
import re

import numpy as np

from dtorch import Replicate, Shard

SHAPES = [(6, 5), (5,), (5, 3), (3,), (7,)]

# The small model of `train_against_torch`: w1, b1, w2.
MODEL = [(8, 16), (16,), (16, 4)]


def sharded(shape):
    return [Shard(0)] if shape[0] % 2 == 1 else [Replicate()]


def make_params(dt, mesh, placements, dtype=np.float32, seed=0, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s).astype(dtype) for s in shapes]
    params = [dt.distribute_tensor(v, mesh, placements(s)).requires_grad_()
              for v, s in zip(values, shapes)]
    return params, values


def grads_for(step, dtype=np.float32, shapes=SHAPES):
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def set_grads(dt, params, step, placements=sharded, shapes=SHAPES):
    """Gives `params` (of `shapes`) the gradients `grads_for(step)`."""
    for p, g, s in zip(params, grads_for(step, shapes=shapes), shapes):
        p.grad = dt.distribute_tensor(g, p.device_mesh, placements(s))


def run_steps(dt, mesh, make_opt, steps, dtype=np.float32, shapes=SHAPES,
              placements=sharded):
    """`steps` steps of `make_opt(params)` on parameters of `shapes`; returns
    the parameters' values, the optimizer's state tensors (all but "step",
    by name) and the optimizer."""
    params, _ = make_params(dt, mesh, placements, dtype, shapes=shapes)
    opt = make_opt(params)
    for step in range(steps):
        for p, g, s in zip(params, grads_for(step, dtype, shapes), shapes):
            p.grad = dt.distribute_tensor(g, mesh, placements(s))
        opt.step()
    values = [p.numpy() for p in params]
    state = [opt.state[p][k].numpy() for p in params
             for k in sorted(opt.state.get(p, {})) if k != "step"]
    return values, state, opt


def expect_fused_is_bitwise_per_op(fused, per_op, dtype=None):
    """Two `run_steps` results: the same parameters and state, bit for bit."""
    assert len(fused[0] + fused[1]) == len(per_op[0] + per_op[1])
    for a, b in zip(fused[0] + fused[1], per_op[0] + per_op[1]):
        if dtype is not None:
            assert a.dtype == np.dtype(dtype)
        assert a.tobytes() == b.tobytes()


def check_generated_and_hand_written(dt, mesh, monkeypatch, tmp_path, generated, dtype,
                                     shapes, make_opts, library_prefix):
    """From the second step the segment runs its fused tier, whose call
    uses the kernel generated through MLIR for its signature
    (DTORCH_GENERATED_ADAM=1, the default) or the runtime's hand-written one
    (=0): for each pair of `make_opts` (fused, per op), both bitwise the
    per-op update. The generated kernels are dumped as
    `library_prefix`*.so exactly when they are on."""
    monkeypatch.setenv("DTORCH_GENERATED_ADAM", generated)
    monkeypatch.setenv("DTORCH_KERNEL_DUMP_DIR", str(tmp_path))
    for make_fused, make_per_op in make_opts:
        fused = run_steps(dt, mesh, make_fused, 4, dtype, shapes)
        per_op = run_steps(dt, mesh, make_per_op, 4, dtype, shapes)
        expect_fused_is_bitwise_per_op(fused, per_op)
    dumped = sorted(p.name for p in tmp_path.glob(library_prefix + "*.so"))
    assert bool(dumped) == (generated == "1"), dumped


def torch_reference(torch, name, kwargs, values, batches):
    """The losses and final parameters of torch.optim.`name` training the
    model of `train_against_torch` from `values` on `batches`."""
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


def train_against_torch(torch, dt, meshes, layout, name, kwargs):
    """Trains ((x @ w1 + b1).tanh() @ w2)^2 with dt.optim.`name` on 1 rank
    ("1"), data parallel on 2 ("dp2": Partial gradients, reduced before the
    update) or fully sharded on 2 ("fsdp2": parameters Shard(0)) and checks
    the losses and the gathered parameters against torch's; returns the
    parameters and the optimizer."""
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
    return params, opt


def round_to(values, dtype):
    if dtype == "float16":
        return values.astype(np.float16)
    import ml_dtypes
    return values.astype(ml_dtypes.bfloat16)


def sixteen_bit_tolerance(dtype):
    """One rounding per step on each side: at most one 16-bit ulp apart."""
    return 2 ** -7 if dtype == "bfloat16" else 2 ** -10


def sixteen_bit_params(dt, mesh, dtype):
    """Parameters of SHAPES in `dtype` ("float16" or "bfloat16"); returns
    them and their values as float32 (exactly representable in `dtype`)."""
    rng = np.random.default_rng(5)
    full = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    values = [round_to(v, dtype) for v in full]
    params = [dt.distribute_tensor(v.astype(np.float32), mesh, sharded(s)).to(
        getattr(dt, dtype)).requires_grad_() for v, s in zip(values, SHAPES)]
    return params, [v.astype(np.float32) for v in values]


def set_sixteen_bit_grads(dt, mesh, params, step, dtype):
    """Gives `params` the gradients `grads_for(step)` rounded to `dtype`;
    returns them as float32."""
    grads = [round_to(g, dtype) for g in grads_for(step)]
    for p, g, s in zip(params, grads, SHAPES):
        p.grad = dt.distribute_tensor(g.astype(np.float32), mesh, sharded(s)).to(
            getattr(dt, dtype))
    return [g.astype(np.float32) for g in grads]


def recorded_ops(ir):
    """The ops of a dtensor function's text (one per line `%x = dtensor.op`)."""
    return re.findall(r"= dtensor\.(\w+)", ir)


def one_step_ops_and_kernels(dt, mesh, count, make_opt, make_per_op):
    """`count` parameters (8+i x 4, Shard(0)) stepped 4 times by
    `make_opt(params)`: returns the ops the last step recorded, the kernels
    rank 0 ran in a fifth step (profiled), the bytes of rank 0's pieces of
    the parameters, and the ops 2 steps of `make_per_op(params)` record."""
    from dtorch import profiler
    shapes = [(8 + i, 4) for i in range(count)]
    params = [dt.distribute_tensor(np.ones(s, np.float32), mesh, [Shard(0)]).requires_grad_()
              for s in shapes]
    grads = [dt.distribute_tensor(np.full(s, 0.5, np.float32), mesh, [Shard(0)])
             for s in shapes]

    def step(opt):
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()

    opt = make_opt(params)
    for _ in range(4):
        step(opt)
    ops = recorded_ops(dt.last_ir("input"))
    dt.synchronize()
    with profiler.profile() as prof:
        step(opt)
        dt.synchronize()
    kernels = [e for e in profiler.spans(prof.trace, 0, "compute") if e.get("cat") == "kernel"]
    local = sum(((s[0] + 3) // 4) * s[1] * 4 for s in shapes)
    per_op = make_per_op(params)
    for _ in range(2):
        step(per_op)
    return ops, kernels, local, recorded_ops(dt.last_ir("input"))


def mixed_params(dt, meshes):
    """float32 on 4 ranks (Shard(0)), float64 on 4 ranks (Replicate) and
    float32 on 1 rank, all ones."""
    a = dt.distribute_tensor(np.ones((4, 4), np.float32), meshes["4"],
                             [Shard(0)]).requires_grad_()
    b = dt.distribute_tensor(np.ones((4,), np.float64), meshes["4"],
                             [Replicate()]).requires_grad_()
    c = dt.distribute_tensor(np.ones((2, 3), np.float32), meshes["1"],
                             [Replicate()]).requires_grad_()
    return [a, b, c]


def check_state_dict_round_trip(dt, mesh, make_opt):
    """A state dict saved after 2 steps of `make_opt(params)` and loaded
    into a new optimizer of copies of the parameters continues with the
    same bits as the original."""
    params, _ = make_params(dt, mesh, sharded)
    opt = make_opt(params)
    for step in range(2):
        set_grads(dt, params, step)
        opt.step()
    saved = {k: {i: {n: (v.numpy() if hasattr(v, "numpy") else v) for n, v in st.items()}
                 for i, st in opt.state_dict()["state"].items()} if k == "state" else v
             for k, v in opt.state_dict().items()}
    copies = [dt.distribute_tensor(p.numpy(), mesh, p.placements).requires_grad_()
              for p in params]
    loaded = make_opt(copies)
    loaded.load_state_dict(saved)
    for opt_, ps in ((opt, params), (loaded, copies)):
        set_grads(dt, ps, 7)
        opt_.step()
    for p, q in zip(params, copies):
        assert p.numpy().tobytes() == q.numpy().tobytes()
