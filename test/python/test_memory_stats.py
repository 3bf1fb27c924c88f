"""dtorch.memory_stats(): each rank's buffer table, read from the runtime
(RankState on the workers or in-process threads), not from the client.

- It changes by exactly the bytes of the tensors a test creates and frees,
  on the session's backend (the cluster when dtorch-worker is built) and on
  the in-process backend (a fresh interpreter); the simulated backend
  answers "unknown".
- Issue 8's memory check: a small GPT (examples/gpt/model.py) trained a few
  AdamW steps with fully_shard on 4 ranks holds, per rank and between steps,
  about a quarter of what data parallelism on 4 ranks holds per rank
  (parameters, gradients and the two Adam moments; the small scalars of the
  optimizer, step counts and the learning rate, are on every rank).
"""
import doctest
import gc
import os
import subprocess
import sys
import textwrap

import numpy as np

import dtorch
from dtorch import Replicate, Shard

from conftest import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))

import model as gpt_model  # noqa: E402

# FSDP bytes per rank over DP bytes per rank: a quarter of the parameter,
# gradient and moment bytes, plus what every rank holds whole (per parameter
# a 0-d float64 step count, and the optimizer's 0-d learning rate), which is
# a few percent for this small model.
FSDP_OVER_DP = (0.25, 0.32)
# Bytes every rank may hold besides the quarter: per parameter tensor a 0-d
# float64 step count, plus the optimizer's few 0-d scalars (lr, ...).
SCALAR_BYTES_PER_PARAM = 8
SCALAR_BYTES_FIXED = 256


def table(with_handles=False):
    """The buffer tables after the client dropped what it no longer holds."""
    gc.collect()
    return dtorch.memory_stats(with_handles=with_handles)


def held_since(base, now):
    return [n["bytes"] - b["bytes"] for b, n in zip(base, now)]


def test_tracks_created_and_freed_tensors_exactly(dt):
    mesh = dt.init_device_mesh("cpu", (4,))
    base = table(with_handles=True)
    assert [r["rank"] for r in base] == [0, 1, 2, 3]
    assert all(isinstance(r["host"], str) and r["host"] for r in base)
    # Uneven torch.chunk pieces: 10 rows of 6 float32 -> 3, 3, 3, 1 rows.
    x = dt.zeros(10, 6, device_mesh=mesh, placements=[Shard(0)])
    y = dt.ones(5, 4, dtype=dt.float64, device_mesh=mesh, placements=[Replicate()])
    # Only w is kept: the intermediate x * 2 is dropped before it exists.
    w = x * 2.0 + 1.0
    now = table(with_handles=True)
    x_bytes = [72, 72, 72, 24]
    assert held_since(base, now) == [2 * xb + 160 for xb in x_bytes]
    for r in range(4):
        assert now[r]["tensors"] - base[r]["tensors"] == 3
        assert now[r]["handles"][x._handle] == x_bytes[r]
        assert now[r]["handles"][w._handle] == x_bytes[r]
        assert now[r]["handles"][y._handle] == 160
        grew = {k: v - base[r]["bytes_by_dtype"].get(k, 0)
                for k, v in now[r]["bytes_by_dtype"].items()}
        assert grew.get("float32") == 2 * x_bytes[r] and grew.get("float64") == 160, grew
        assert sum(now[r]["bytes_by_dtype"].values()) == now[r]["bytes"]
        assert sum(now[r]["handles"].values()) >= now[r]["bytes"]  # shared storage counts once
    assert np.array_equal(w.numpy(), np.ones((10, 6), np.float32))
    del x
    now = table(with_handles=True)
    assert held_since(base, now) == [xb + 160 for xb in x_bytes]
    assert all(w._handle in r["handles"] and len(r["handles"]) == len(b["handles"]) + 2
               for r, b in zip(now, base))
    del y, w
    now = table()
    assert held_since(base, now) == [0, 0, 0, 0]
    assert [r["tensors"] for r in now] == [r["tensors"] for r in base]


def test_reflects_work_queued_before_it_without_synchronize(dt):
    """No synchronize: the request waits behind the runs and frees before it."""
    mesh = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))
    base = table()
    kept = [dt.randn(64, 64, device_mesh=mesh, placements=[Shard(0), Shard(1)])
            for _ in range(8)]
    assert held_since(base, dtorch.memory_stats()) == [8 * 32 * 32 * 4] * 4
    del kept[4:]
    gc.collect()
    assert held_since(base, dtorch.memory_stats()) == [4 * 32 * 32 * 4] * 4
    kept.clear()
    assert held_since(base, table()) == [0] * 4


def test_docstring_example(dt):
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner()
    for test in finder.find(dtorch.memory_stats, "memory_stats", globs={}):
        runner.run(test)
    assert runner.failures == 0 and runner.tries >= 5, runner.summarize()


OTHER_BACKEND = textwrap.dedent("""
    import gc, sys
    import dtorch
    from dtorch import Shard
    backend = sys.argv[1]
    dtorch.init(world_size=4, backend=backend)
    mesh = dtorch.init_device_mesh("cpu", (4,))
    base = dtorch.memory_stats(with_handles=True)
    x = dtorch.zeros(10, 6, device_mesh=mesh, placements=[Shard(0)])
    y = (x + 1.0).sum(0)
    now = dtorch.memory_stats(with_handles=True)
    print("hosts", sorted({r["host"] for r in now}))
    if backend == "simulated":
        print("unknown", all(r["tensors"] is None and r["bytes"] is None for r in now))
    else:
        print("base", [r["bytes"] for r in base])
        print("grew", [n["bytes"] - b["bytes"] for n, b in zip(now, base)])
        print("x", [r["handles"][x._handle] for r in now])
        del x, y
        gc.collect()
        print("freed", [r["bytes"] for r in dtorch.memory_stats()])
    dtorch.shutdown()
""")


def run_other_backend(backend):
    r = subprocess.run([sys.executable, "-c", OTHER_BACKEND, backend], capture_output=True,
                       text=True, timeout=180, env=subprocess_env())
    assert r.returncode == 0, r.stdout + r.stderr
    return {line.split(" ", 1)[0]: eval(line.split(" ", 1)[1])  # noqa: S307 - our own output
            for line in r.stdout.splitlines() if " " in line}


def test_in_process_backend_reads_its_rank_states():
    out = run_other_backend("inprocess")
    assert out["hosts"] == ["in-process"]
    assert out["base"] == [0, 0, 0, 0]
    # x: 3, 3, 3, 1 rows of float32; y = sum over the sharded dim: a 6-float
    # partial sum on every rank (placements Partial until fetched).
    assert out["x"] == [72, 72, 72, 24]
    assert out["grew"] == [72 + 24, 72 + 24, 72 + 24, 24 + 24], out
    assert out["freed"] == [0, 0, 0, 0]


def test_simulated_backend_answers_unknown():
    out = run_other_backend("simulated")
    assert out["hosts"] == ["simulated"] and out["unknown"] is True


# ---- issue 8: fully_shard holds a quarter per rank ------------------------------

CFG = gpt_model.GPTConfig(vocab_size=32, block_size=8, n_layer=2, n_head=2, d_model=32)
STEPS = 3


def train_and_measure(dt, fsdp):
    """Trains the GPT for STEPS AdamW steps on 4 ranks (data parallel, or
    fully_shard per block and at the root) and returns (bytes each rank
    holds for it between steps, the parameter bytes of the model)."""
    from dtorch.distributed.fsdp import fully_shard
    mesh = dt.init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
    rng = np.random.default_rng(0)
    base = table()
    dt.manual_seed(0)
    with dt.nn.default_device_mesh(mesh):
        model = gpt_model.GPT(CFG)
    if fsdp:
        for i in range(len(model.blocks)):  # no loop variable left holding a block
            fully_shard(model.blocks[i], mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = dt.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    losses = []
    for _ in range(STEPS):
        idx = rng.integers(0, CFG.vocab_size, size=(8, CFG.block_size + 1))
        x = dt.distribute_tensor(idx[:, :-1], mesh, [Shard(0)])
        y = dt.distribute_tensor(idx[:, 1:], mesh, [Shard(0)])
        opt.zero_grad()
        logits, loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        del x, y, logits, loss  # between steps: no batch, logits or loss
    dt.synchronize()
    held = held_since(base, table())
    params = list(model.parameters())
    assert all(p.grad is not None for p in params)
    assert all(len(opt.state[p]) >= 3 for p in params)
    param_bytes = sum(int(np.prod(p.shape)) * 4 for p in params)  # float32
    n_params = len(params)
    del model, opt, params
    assert held_since(base, table()) == [0, 0, 0, 0]  # all of it was the model's
    return held, param_bytes, n_params, losses


def test_fully_shard_holds_a_quarter_per_rank(dt):
    dp, param_bytes, n_params, dp_losses = train_and_measure(dt, fsdp=False)
    fsdp, _, _, fsdp_losses = train_and_measure(dt, fsdp=True)
    np.testing.assert_allclose(fsdp_losses, dp_losses, rtol=1e-4)
    state_bytes = 4 * param_bytes  # parameter, gradient, exp_avg, exp_avg_sq
    scalars = SCALAR_BYTES_PER_PARAM * n_params + SCALAR_BYTES_FIXED
    print(f"\nGPT {param_bytes} parameter bytes ({n_params} tensors); held per rank "
          f"between steps: DP {dp}, FSDP {fsdp}; FSDP / DP "
          f"{[round(f / d, 4) for f, d in zip(fsdp, dp)]}; expected FSDP "
          f"{state_bytes // 4} + at most {scalars} of scalars")
    # Data parallel: every rank holds everything.
    for held in dp:
        assert state_bytes <= held <= state_bytes + scalars, (held, state_bytes)
    # Fully sharded: a quarter of it (every dim 0 divides by 4), the same on
    # every rank, plus the scalars every rank holds whole.
    for held in fsdp:
        assert state_bytes // 4 <= held <= state_bytes // 4 + scalars, (held, state_bytes)
        assert FSDP_OVER_DP[0] <= held / dp[0] <= FSDP_OVER_DP[1], (held, dp)
    assert max(fsdp) - min(fsdp) <= scalars // 4, fsdp
