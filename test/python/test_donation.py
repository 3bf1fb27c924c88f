"""Donated parameter and optimizer updates (--rank-mark-donations,
RunProgram.donated).

An AdamW step replaces every parameter and both moments; the old values
are held by nothing but the segment, so the step donates them and the new
values are written into their storage. Checked here on a model with about
3 MiB of parameters, on 1 rank and data parallel on 4:

- the values (losses, parameters, moments) are bitwise those of the same
  training with donation off (DTORCH_DONATION=0);
- the last step's peak bytes per rank (dtorch.memory_stats()) drop by at
  least 80% of the parameter and state bytes (exactly them, less noise);
- a tensor the user still holds is never written over: an alias of a
  parameter or a moment taken before the step keeps its values;
- the AdamW update of every parameter (p, exp_avg, exp_avg_sq) is one
  `fused_adam` kernel call (dtensor.fused_adam, the default), and with
  ``foreach=False`` one generated kernel per parameter.

Both update paths are checked for the same bits and the lower peak.
"""
import gc
import os

import numpy as np
import pytest

from dtorch import Replicate, Shard

SHAPES = [(512, 1024), (1024,), (1024, 256)]


def param_bytes():
    return sum(int(np.prod(s)) * 4 for s in SHAPES)


def train(dt, mesh, steps, donate, hold_step=None, foreach=None):
    """AdamW on a two-layer MLP; returns losses, final parameters, moments,
    the memory stats after the last step and, with `hold_step`, the values
    of aliases taken before that step (and after it)."""
    previous = os.environ.get("DTORCH_DONATION")
    os.environ["DTORCH_DONATION"] = "1" if donate else "0"
    try:
        rng = np.random.default_rng(0)
        params = [dt.distribute_tensor((rng.standard_normal(s) * 0.03).astype(np.float32),
                                       mesh, [Replicate()]).requires_grad_()
                  for s in SHAPES]
        w1, b1, w2 = params
        opt = dt.optim.AdamW(params, lr=1e-2, weight_decay=0.01, foreach=foreach)
        losses, held = [], None
        for step in range(steps):
            x = dt.distribute_tensor(
                rng.standard_normal((4 * mesh.size(), 512)).astype(np.float32),
                mesh, [Shard(0)])
            opt.zero_grad()
            y = (x @ w1 + b1).tanh() @ w2
            loss = (y * y).mean()
            loss.backward()
            if step == hold_step:
                aliases = [w1.detach(), opt.state[w2]["exp_avg"].detach()]
                held = [a.numpy() for a in aliases]
            opt.step()
            losses.append(loss.item())
            del x, y, loss
        if held is not None:
            held = (held, [a.numpy() for a in aliases])
            del aliases
        gc.collect()
        stats = dt.memory_stats()
        values = [p.numpy() for p in params]
        moments = [opt.state[p][k].numpy() for p in params
                   for k in ("exp_avg", "exp_avg_sq")]
        return losses, values, moments, stats, held
    finally:
        if previous is None:
            os.environ.pop("DTORCH_DONATION", None)
        else:
            os.environ["DTORCH_DONATION"] = previous


@pytest.mark.parametrize("foreach", [None, False])
@pytest.mark.parametrize("mesh_name", ["1", "4"])
def test_donation_same_bits_lower_peak(dt, meshes, mesh_name, foreach):
    mesh = meshes[mesh_name]
    # Step 1 creates the state, step 2 runs the step's program unfused,
    # steps 3 and 4 its fused form (foreach=False: one generated kernel per
    # parameter; the default: one fused_adam call for all), written in
    # place when donated.
    off = train(dt, mesh, 4, donate=False, foreach=foreach)
    on = train(dt, mesh, 4, donate=True, foreach=foreach)
    assert on[0] == off[0]
    for a, b in zip(on[1] + on[2], off[1] + off[2]):
        assert a.tobytes() == b.tobytes()
    ranks = range(mesh.size()) if mesh_name == "4" else [0]
    peak_off = max(off[3][r]["last_run_peak_bytes"] for r in ranks)
    peak_on = max(on[3][r]["last_run_peak_bytes"] for r in ranks)
    # Parameters, exp_avg and exp_avg_sq, replicated: whole on every rank.
    state = 3 * param_bytes()
    assert peak_off - peak_on >= 0.8 * state, (peak_off, peak_on, state)
    # Donation changes what a run allocates, not what the ranks hold.
    for r in ranks:
        assert on[3][r]["bytes"] == off[3][r]["bytes"]


def test_a_held_tensor_is_never_written_over(dt, meshes):
    mesh = meshes["4"]
    losses, values, _, _, held = train(dt, mesh, 3, donate=True, hold_step=2)
    before, after = held
    for b, a in zip(before, after):
        assert b.tobytes() == a.tobytes()
    # The parameter itself did change (the alias kept the old value alive).
    assert not np.array_equal(before[0], values[0])
    ref = train(dt, mesh, 3, donate=False)
    assert losses == ref[0]
    for a, b in zip(values, ref[1]):
        assert a.tobytes() == b.tobytes()



@pytest.mark.parametrize("foreach", [None, False])
def test_adamw_update_kernels(dt, meshes, foreach):
    from dtorch import profiler
    mesh = meshes["1"]
    shapes = [(64, 32), (32,)]
    params = [dt.distribute_tensor(np.ones(s, np.float32), mesh, [Replicate()]).requires_grad_()
              for s in shapes]
    grads = [dt.distribute_tensor(np.full(s, 0.5, np.float32), mesh, [Replicate()])
             for s in shapes]
    opt = dt.optim.AdamW(params, lr=1e-2, foreach=foreach)

    def step():
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()

    for _ in range(4):
        step()
    dt.synchronize()
    with profiler.profile() as prof:
        step()
        dt.synchronize()
    kernels = [e for e in profiler.spans(prof.trace, 0, "compute") if e.get("cat") == "kernel"]
    big = [e for e in kernels if e["args"].get("bytes", 0) >= 32 * 4]
    if foreach is None:
        # One call writes every parameter, exp_avg and exp_avg_sq.
        assert [(e["name"], e["args"]["bytes"]) for e in big] == [
            ("fused_adam", sum(3 * int(np.prod(s)) * 4 for s in shapes))], \
            [(e["name"], e["args"]) for e in kernels]
        return
    # Only 0-d scalars besides: every kernel writing a parameter's size
    # writes p, exp_avg and exp_avg_sq at once (3 x its bytes).
    assert sorted(e["args"]["bytes"] for e in big) == sorted(
        3 * int(np.prod(s)) * 4 for s in shapes), [(e["name"], e["args"]) for e in kernels]
    assert all(e["name"] == "fused" for e in big)
