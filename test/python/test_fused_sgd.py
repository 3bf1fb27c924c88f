"""The multi-tensor SGD update (dtensor.fused_sgd, the default of
dtorch.optim.SGD; ``foreach=False`` or DTORCH_FUSED_SGD=0 records it op by
op).

- float32 and float64: bitwise the per-op update over several steps (the
  first step, which starts the momentum buffers, and later ones), on
  sharded and replicated parameters, for every mode (no momentum, momentum,
  dampening, Nesterov, weight decay, maximize), with the generated kernel
  and the runtime's hand-written one;
- numerics against torch.optim.SGD on the gathered tensors of a small MLP
  trained on 1 rank, data parallel on 2 (Partial gradients, reduced before
  the update) and fully sharded on 2 (parameters Shard(0));
- float16 and bfloat16 parameters against a float32 reference rounded once
  per step;
- one step of any number of parameters records one op and runs one kernel
  per rank; a changing learning rate does not recompile; bad
  hyperparameters raise at construction.
"""
import numpy as np
import pytest

from dtorch import Replicate, Shard
from optimizer_test_support import (SHAPES, check_generated_and_hand_written,
                                    check_state_dict_round_trip,
                                    expect_fused_is_bitwise_per_op, mixed_params,
                                    one_step_ops_and_kernels, recorded_ops, round_to,
                                    run_steps, set_sixteen_bit_grads, sharded,
                                    sixteen_bit_params, sixteen_bit_tolerance,
                                    train_against_torch)

CONFIGS = [
    dict(lr=0.05),
    dict(lr=0.05, weight_decay=0.1, maximize=True),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.02, momentum=0.5, dampening=0.3, weight_decay=0.01),
    dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.1),
    dict(lr=0.01, momentum=0.7, nesterov=True, maximize=True),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kwargs", CONFIGS)
def test_fused_is_bitwise_the_per_op_update(dt, meshes, kwargs, dtype):
    mesh = meshes["4"]
    fused = run_steps(dt, mesh, lambda ps: dt.optim.SGD(ps, **kwargs), 4, dtype)
    assert "dtensor.fused_sgd" in dt.last_ir("input")
    per_op = run_steps(dt, mesh, lambda ps: dt.optim.SGD(ps, foreach=False, **kwargs), 4,
                       dtype)
    assert "fused_sgd" not in dt.last_ir("input")
    assert len(fused[1]) == len(per_op[1]) == (len(SHAPES) if kwargs.get("momentum") else 0)
    expect_fused_is_bitwise_per_op(fused, per_op, dtype)
    opt = fused[2]
    for p in opt.param_groups[0]["params"]:
        if kwargs.get("momentum"):
            buf = opt.state[p]["momentum_buffer"]
            assert buf.placements == p.placements and buf.dtype == p.dtype
        else:
            assert p not in opt.state or not opt.state[p]


@pytest.mark.parametrize("generated", ["1", "0"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_generated_and_hand_written_kernels_are_bitwise_the_per_op_update(
        dt, meshes, monkeypatch, tmp_path, generated, dtype):
    """fused_sgd with the generated kernel and with the hand-written one
    (DTORCH_GENERATED_ADAM=0): both bitwise the per-op update. Shapes of
    their own make the signature new, so the generated kernel is compiled
    (and dumped) here."""
    k = (2 if generated == "1" else 0) + (1 if dtype == np.float64 else 0)
    shapes = [(13, 3 + k), (23 + k,), (3, 19), (1,)]
    make_opts = [(lambda ps, kw=kwargs: dt.optim.SGD(ps, **kw),
                  lambda ps, kw=kwargs: dt.optim.SGD(ps, foreach=False, **kw))
                 for kwargs in (CONFIGS[1], CONFIGS[3], CONFIGS[4])]
    check_generated_and_hand_written(dt, meshes["4"], monkeypatch, tmp_path, generated, dtype,
                                     shapes, make_opts, "dtorch_sgd_")


def test_the_environment_switch_restores_the_per_op_update(dt, meshes, monkeypatch):
    mesh = meshes["4"]
    monkeypatch.setenv("DTORCH_FUSED_SGD", "0")
    off = run_steps(dt, mesh, lambda ps: dt.optim.SGD(ps, lr=0.1, momentum=0.9), 3)
    assert "fused_sgd" not in dt.last_ir("input")
    assert len(recorded_ops(dt.last_ir("input"))) >= 3 * len(SHAPES)
    monkeypatch.setenv("DTORCH_FUSED_SGD", "1")
    on = run_steps(dt, mesh, lambda ps: dt.optim.SGD(ps, lr=0.1, momentum=0.9), 3)
    assert "dtensor.fused_sgd" in dt.last_ir("input")
    expect_fused_is_bitwise_per_op(on, off)
    # fused=True wins over the environment; foreach=False always records op by op.
    monkeypatch.setenv("DTORCH_FUSED_SGD", "0")
    run_steps(dt, mesh, lambda ps: dt.optim.SGD(ps, lr=0.1, fused=True), 1)
    assert "dtensor.fused_sgd" in dt.last_ir("input")


@pytest.mark.parametrize("layout", ["1", "dp2", "fsdp2"])
@pytest.mark.parametrize("kwargs", [
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    dict(lr=0.05, momentum=0.5, dampening=0.2, maximize=False, weight_decay=0.1),
    dict(lr=0.1),
])
def test_matches_torch_on_gathered_tensors(dt, meshes, layout, kwargs):
    torch = pytest.importorskip("torch")
    params, opt = train_against_torch(torch, dt, meshes, layout, "SGD", kwargs)
    assert "dtensor.fused_sgd" in dt.last_ir("input")
    if kwargs.get("momentum"):
        for p in params:
            assert opt.state[p]["momentum_buffer"].placements == p.placements


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_parameters_against_a_float32_reference(dt, meshes, dtype):
    mesh = meshes["4"]
    lr, momentum, dampening, wd = 0.05, 0.9, 0.1, 0.01
    params, ref = sixteen_bit_params(dt, mesh, dtype)
    opt = dt.optim.SGD(params, lr=lr, momentum=momentum, dampening=dampening,
                       weight_decay=wd)
    bufs = [None] * len(ref)
    for step in range(1, 4):
        grads = set_sixteen_bit_grads(dt, mesh, params, step, dtype)
        opt.step()
        for i, g in enumerate(grads):
            d = g + ref[i] * np.float32(wd)
            b = d if bufs[i] is None else (bufs[i] * np.float32(momentum) +
                                           d * np.float32(1 - dampening))
            p = ref[i] - np.float32(lr) * b
            ref[i] = round_to(p, dtype).astype(np.float32)
            bufs[i] = round_to(b, dtype).astype(np.float32)
    tol = sixteen_bit_tolerance(dtype)
    for i, p in enumerate(params):
        got = p.to(dt.float32).numpy()
        np.testing.assert_allclose(got, ref[i], rtol=tol, atol=1e-6)
        assert p.dtype == getattr(dt, dtype)
        buf = opt.state[p]["momentum_buffer"]
        assert buf.dtype == getattr(dt, dtype)
        np.testing.assert_allclose(buf.to(dt.float32).numpy(), bufs[i], rtol=tol, atol=1e-6)


@pytest.mark.parametrize("count", [3, 12])
def test_one_step_records_one_op_and_runs_one_kernel(dt, meshes, count):
    ops, kernels, local, per_op_ops = one_step_ops_and_kernels(
        dt, meshes["4"], count, lambda ps: dt.optim.SGD(ps, lr=1e-2, momentum=0.9),
        lambda ps: dt.optim.SGD(ps, lr=1e-2, momentum=0.9, foreach=False))
    assert ops == ["fused_sgd"], ops
    sgd = [e for e in kernels if e["name"] == "fused_sgd"]
    assert len(sgd) == 1, [e["name"] for e in kernels]
    # Rank 0's pieces of every parameter and momentum buffer.
    assert sgd[0]["args"]["bytes"] == 2 * local, sgd[0]["args"]
    # The per-op path records several ops per parameter.
    assert len(per_op_ops) >= 3 * count


def test_a_changing_learning_rate_does_not_recompile(dt, meshes):
    from dtorch.optim.lr_scheduler import LambdaLR
    mesh = meshes["4"]
    rng = np.random.default_rng(11)
    params = [dt.distribute_tensor(rng.standard_normal(s).astype(np.float32), mesh,
                                   sharded(s)).requires_grad_()
              for s in [(9, 2), (4,), (17,)]]
    opt = dt.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True)
    sched = LambdaLR(opt, lambda e: 0.9 ** e)
    compiles = []
    for _ in range(6):
        for p in params:
            p.grad = dt.distribute_tensor(rng.standard_normal(p.shape).astype(np.float32),
                                          mesh, p.placements)
        opt.step()
        sched.step()
        dt.synchronize()
        compiles.append(dt._C.compile_count())
    assert "dtensor.fused_sgd" in dt.last_ir("input")
    # Step 1 starts the buffers, step 2 compiles the steady program; from step
    # 3 on nothing compiles although the lr changes every step.
    assert compiles[2:] == [compiles[1]] * 4, compiles


@pytest.mark.parametrize("kwargs,match", [
    (dict(lr=-0.1), "Invalid learning rate"),
    (dict(lr=0.1, momentum=-0.5), "Invalid momentum value"),
    (dict(lr=0.1, weight_decay=-1.0), "Invalid weight_decay value"),
    (dict(lr=0.1, nesterov=True), "Nesterov momentum requires"),
    (dict(lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), "Nesterov momentum requires"),
])
def test_bad_hyperparameters_raise_at_construction(dt, meshes, kwargs, match):
    p = dt.distribute_tensor(np.ones(4, np.float32), meshes["4"], [Shard(0)]).requires_grad_()
    with pytest.raises(ValueError, match=match):
        dt.optim.SGD([p], **kwargs)


def test_mixed_meshes_dtypes_and_late_gradients(dt, meshes):
    """A group spanning two meshes records one op per mesh; parameters of
    different dtypes share one op; a parameter whose first gradient comes
    later starts its buffer in an op of its own (first step) while the
    others take their later step: the bits stay the per-op update's."""
    fused_params, ref_params = mixed_params(dt, meshes), mixed_params(dt, meshes)
    opt = dt.optim.SGD(fused_params, lr=0.1, momentum=0.9, weight_decay=0.01)
    ref = dt.optim.SGD(ref_params, lr=0.1, momentum=0.9, weight_decay=0.01, foreach=False)
    for step in range(4):
        for p, q in zip(fused_params, ref_params):
            if step == 0 and p is fused_params[1]:
                p.grad = q.grad = None   # b's first gradient comes at step 1
                continue
            g = np.full(p.shape, 0.25 * (step + 1),
                        np.float64 if p.dtype == dt.float64 else np.float32)
            p.grad = dt.distribute_tensor(g, p.device_mesh, p.placements)
            q.grad = dt.distribute_tensor(g, q.device_mesh, q.placements)
        opt.step()
        ref.step()
    for p, q in zip(fused_params, ref_params):
        assert p.numpy().tobytes() == q.numpy().tobytes()
        assert (opt.state[p]["momentum_buffer"].numpy().tobytes() ==
                ref.state[q]["momentum_buffer"].numpy().tobytes())


def test_state_dict_round_trip_keeps_training_the_same(dt, meshes):
    check_state_dict_round_trip(dt, meshes["4"],
                                lambda ps: dt.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True))


DONATION_SHAPES = [(512, 1024), (1024,), (1024, 256)]


def train_donating(dt, mesh, steps, donate, foreach=None):
    """SGD with momentum on a two-layer MLP of about 3 MiB of parameters,
    with donation on or off (DTORCH_DONATION); returns losses, parameters,
    buffers and the memory stats after the last step."""
    import gc
    import os
    previous = os.environ.get("DTORCH_DONATION")
    os.environ["DTORCH_DONATION"] = "1" if donate else "0"
    try:
        rng = np.random.default_rng(0)
        params = [dt.distribute_tensor((rng.standard_normal(s) * 0.03).astype(np.float32),
                                       mesh, [Replicate()]).requires_grad_()
                  for s in DONATION_SHAPES]
        w1, b1, w2 = params
        opt = dt.optim.SGD(params, lr=1e-2, momentum=0.9, weight_decay=1e-4, foreach=foreach)
        losses = []
        for _ in range(steps):
            x = dt.distribute_tensor(rng.standard_normal((4, 512)).astype(np.float32), mesh,
                                     [Shard(0)])
            opt.zero_grad()
            y = (x @ w1 + b1).tanh() @ w2
            loss = (y * y).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            del x, y, loss
        gc.collect()
        stats = dt.memory_stats()
        return (losses, [p.numpy() for p in params],
                [opt.state[p]["momentum_buffer"].numpy() for p in params], stats)
    finally:
        if previous is None:
            os.environ.pop("DTORCH_DONATION", None)
        else:
            os.environ["DTORCH_DONATION"] = previous


@pytest.mark.parametrize("foreach", [None, False])
def test_donation_writes_parameters_and_buffers_in_place(dt, meshes, foreach):
    """Step 1 starts the buffers, step 2 runs the step's program unfused,
    steps 3 and 4 its fused form (the default: one fused_sgd call; with
    foreach=False generated kernels per parameter), written over the
    donated parameters and buffers: the same bits, and the last step's
    peak drops by about the parameters' and buffers' bytes."""
    mesh = meshes["1"]
    off = train_donating(dt, mesh, 4, donate=False, foreach=foreach)
    on = train_donating(dt, mesh, 4, donate=True, foreach=foreach)
    assert on[0] == off[0]
    for a, b in zip(on[1] + on[2], off[1] + off[2]):
        assert a.tobytes() == b.tobytes()
    state = 2 * sum(int(np.prod(s)) * 4 for s in DONATION_SHAPES)
    peak_off, peak_on = off[3][0]["last_run_peak_bytes"], on[3][0]["last_run_peak_bytes"]
    assert peak_off - peak_on >= 0.8 * state, (peak_off, peak_on, state)
    assert on[3][0]["bytes"] == off[3][0]["bytes"]
