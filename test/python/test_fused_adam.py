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

from optimizer_test_support import (check_generated_and_hand_written,
                                    check_state_dict_round_trip,
                                    expect_fused_is_bitwise_per_op, mixed_params,
                                    one_step_ops_and_kernels, round_to, run_steps,
                                    set_sixteen_bit_grads, sixteen_bit_params,
                                    sixteen_bit_tolerance, train_against_torch)

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
    fused = run_steps(dt, mesh, lambda ps: cls(ps, **kwargs), 4, dtype)
    per_op = run_steps(dt, mesh, lambda ps: cls(ps, foreach=False, **kwargs), 4, dtype)
    expect_fused_is_bitwise_per_op(fused, per_op, dtype)
    # The parameters of a mesh share one step count.
    opt = fused[2]
    steps = {id(opt.state[p]["step"]) for p in opt.param_groups[0]["params"]}
    assert len(steps) == 1
    assert float(opt.state[opt.param_groups[0]["params"][0]]["step"].item()) == 4.0


@pytest.mark.parametrize("generated", ["1", "0"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_generated_and_hand_written_kernels_are_bitwise_the_per_op_update(
        dt, meshes, monkeypatch, tmp_path, generated, dtype):
    """fused_adam with the generated kernel and with the hand-written one
    (DTORCH_GENERATED_ADAM=0): both bitwise the per-op update. Shapes of
    their own make the signature new, so the generated kernel is compiled
    (and dumped) here."""
    k = (2 if generated == "1" else 0) + (1 if dtype == np.float64 else 0)
    shapes = [(11, 3 + k), (21 + k,), (3, 17), (1,)]
    make_opts = [(lambda ps, cls=getattr(dt.optim, name), kw=kwargs: cls(ps, **kw),
                  lambda ps, cls=getattr(dt.optim, name), kw=kwargs: cls(ps, foreach=False,
                                                                          **kw))
                 for name, kwargs in CONFIGS[:3]]
    check_generated_and_hand_written(dt, meshes["4"], monkeypatch, tmp_path, generated, dtype,
                                     shapes, make_opts, "dtorch_adam_")


@pytest.mark.parametrize("layout", ["1", "dp2", "fsdp2"])
@pytest.mark.parametrize("name,kwargs", [
    ("AdamW", dict(lr=1e-2, weight_decay=0.1)),
    ("AdamW", dict(lr=1e-2, weight_decay=0.0)),
    ("Adam", dict(lr=1e-2, weight_decay=0.01, amsgrad=True)),
])
def test_matches_torch_on_gathered_tensors(dt, meshes, layout, name, kwargs):
    torch = pytest.importorskip("torch")
    train_against_torch(torch, dt, meshes, layout, name, kwargs)
    assert "dtensor.fused_adam" in dt.last_ir("input")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_parameters_against_a_float32_reference(dt, meshes, dtype):
    mesh = meshes["4"]
    lr, betas, eps, wd = 1e-2, (0.9, 0.999), 1e-8, 0.1
    params, ref = sixteen_bit_params(dt, mesh, dtype)
    opt = dt.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=wd)
    m = [np.zeros_like(v) for v in ref]
    v2 = [np.zeros_like(v) for v in ref]
    for step in range(1, 4):
        grads = set_sixteen_bit_grads(dt, mesh, params, step, dtype)
        opt.step()
        step_size = np.float32(lr / (1 - betas[0] ** step))
        bc2 = np.float32(np.sqrt(1 - betas[1] ** step))
        for i, g in enumerate(grads):
            p = ref[i] * np.float32(1 - lr * wd)
            mi = m[i] + (g - m[i]) * np.float32(1 - betas[0])
            vi = v2[i] * np.float32(betas[1]) + g * g * np.float32(1 - betas[1])
            p = p - step_size * (mi / (np.sqrt(vi) / bc2 + np.float32(eps)))
            ref[i] = round_to(p, dtype).astype(np.float32)
            m[i] = round_to(mi, dtype).astype(np.float32)
            v2[i] = round_to(vi, dtype).astype(np.float32)
    for i, p in enumerate(params):
        got = p.to(dt.float32).numpy()
        np.testing.assert_allclose(got, ref[i], rtol=sixteen_bit_tolerance(dtype), atol=1e-6)
        assert p.dtype == getattr(dt, dtype)
        got_m = opt.state[p]["exp_avg"].to(dt.float32).numpy()
        np.testing.assert_allclose(got_m, m[i], rtol=2 ** -7, atol=1e-6)


@pytest.mark.parametrize("count", [3, 12])
def test_one_step_records_a_constant_number_of_ops(dt, meshes, count):
    ops, kernels, local, per_op_ops = one_step_ops_and_kernels(
        dt, meshes["4"], count, lambda ps: dt.optim.AdamW(ps, lr=1e-2),
        lambda ps: dt.optim.AdamW(ps, lr=1e-2, foreach=False))
    # The step count's increment (and the full of its scalar operand) and
    # the update of every parameter.
    assert ops.count("fused_adam") == 1 and len(ops) <= 3, ops
    adam = [e for e in kernels if e["name"] == "fused_adam"]
    assert len(adam) == 1, [e["name"] for e in kernels]
    # Rank 0's pieces of every parameter, exp_avg and exp_avg_sq.
    assert adam[0]["args"]["bytes"] == 3 * local, adam[0]["args"]
    # The per-op path records about ten ops per parameter.
    assert len(per_op_ops) >= 8 * count


def test_mixed_meshes_and_dtypes_in_one_group(dt, meshes):
    """A group spanning two meshes records one op per mesh; parameters of
    different dtypes share one op."""
    a, b, c = mixed_params(dt, meshes)
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
    check_state_dict_round_trip(dt, meshes["4"],
                                lambda ps: dt.optim.AdamW(ps, lr=1e-2, weight_decay=0.1))
