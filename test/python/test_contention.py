"""Fewer thread hand-offs per step: the calling thread handles a controller
request itself when nothing is queued (DTORCH_INLINE_CONTROLLER), and posts
its messages on the cluster's socket itself when the I/O thread is not using
it (DTORCH_DIRECT_SEND), and small puts and frees wait to leave back to back
with the next other message (DTORCH_HOLD_SENDS). Either way the results must be the same bits, an
error must raise the same exception, and a dead worker must still be named.

Each setting runs in a child process of its own (the switches are read once
per process, and the dead-worker case kills its cluster's worker)."""
import json
import os
import re
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ON = {"DTORCH_INLINE_CONTROLLER": "1", "DTORCH_DIRECT_SEND": "1", "DTORCH_HOLD_SENDS": "1"}
OFF = {"DTORCH_INLINE_CONTROLLER": "0", "DTORCH_DIRECT_SEND": "0", "DTORCH_HOLD_SENDS": "0"}

CHILD = textwrap.dedent(r"""
    import hashlib, json, os, signal, subprocess, sys, time
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import dtorch
    from dtorch import Shard, _C, nn
    import model as gpt_model

    scenario, world = sys.argv[2], int(sys.argv[3])
    dtorch.init(world_size=world, num_processes=world)
    mesh = dtorch.init_device_mesh("cpu", (world,))
    rng = np.random.default_rng(0)
    dtorch.manual_seed(3)
    cfg = gpt_model.GPTConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, d_model=16)
    with nn.default_device_mesh(mesh):
        model = gpt_model.GPT(cfg)
    opt = dtorch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)

    def digest():
        h = hashlib.sha256()
        for name, p in sorted(model.named_parameters()):
            h.update(name.encode())
            h.update(np.ascontiguousarray(p.detach().numpy()).tobytes())
        return h.hexdigest()

    def batch(bad=False):
        b = 4 * world
        idx = rng.integers(0, cfg.vocab_size, (b, cfg.block_size))
        tgt = rng.integers(0, cfg.vocab_size, (b, cfg.block_size))
        if bad:
            idx[1, 3] = cfg.vocab_size + 5  # out of the embedding's range
        return (dtorch.tensor(idx, device_mesh=mesh, placements=[Shard(0)]),
                dtorch.tensor(tgt, device_mesh=mesh, placements=[Shard(0)]))

    def step(bad=False):
        opt.zero_grad(set_to_none=True)
        x, y = batch(bad)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        return float(loss.item()).hex()

    def outcome(fn):
        try:
            return ["ok", fn()]
        except Exception as e:
            return [type(e).__name__, getattr(e, "rank", None), str(e)]

    out = {}
    if scenario == "train":
        out["losses"] = [step() for _ in range(8)]
        out["params"] = digest()
    elif scenario == "error":
        out["losses"] = [step() for _ in range(4)]
        # The same structure: a cached step whose run fails on the worker.
        out["bad"] = outcome(lambda: step(bad=True))
        # The next steps read the failed update's parameters.
        out["after"] = outcome(step)
        out["after2"] = outcome(step)
    elif scenario == "puts":
        # Held puts and frees leave with the next request: every value put
        # is there for a fetch, a memory_stats and a synchronize after it.
        vals = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(5)]
        ts = [dtorch.tensor(v, device_mesh=mesh) for v in vals]
        out["fetched"] = [bool((t.numpy() == v).all()) for t, v in zip(ts, vals)]
        more = dtorch.tensor(vals[0], device_mesh=mesh)
        del ts[1:]
        out["tensors"] = sum(r["tensors"] for r in dtorch.memory_stats())
        dtorch.synchronize()
        out["more"] = more.numpy().tolist() == vals[0].tolist()
    elif scenario == "dead":
        out["losses"] = [step() for _ in range(4)]
        pids = sorted(int(p) for p in subprocess.run(
            ["pgrep", "-P", str(os.getpid()), "-f", "dtorch-worker"],
            capture_output=True, text=True).stdout.split())
        out["pid"] = pids[-1]
        os.kill(pids[-1], signal.SIGKILL)
        t = time.monotonic()
        out["dead"] = outcome(step)
        out["detect_s"] = time.monotonic() - t
        out["again"] = outcome(step)
    ctl = _C.controller_stats()
    out["inline_requests"] = ctl["inline_requests"]
    out["memory_hits"] = ctl["memory_hits"]
    print("RESULT " + json.dumps(out), flush=True)
    dtorch.shutdown()
""")


def run_child(tmp_path, scenario, world, env):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    full = dict(os.environ, DTORCH_CACHE_DIR="", **env,
                PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep +
                os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, str(script), os.path.join(ROOT, "examples", "gpt"),
                          scenario, str(world)],
                         env=full, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_training_is_bitwise_the_same_with_and_without_hand_offs(tmp_path):
    for world in (1, 2):
        on = run_child(tmp_path, "train", world, ON)
        off = run_child(tmp_path, "train", world, OFF)
        assert on["losses"] == off["losses"], (world, on, off)
        assert on["params"] == off["params"], world
        # The cached steps ran on the calling thread (submit, speculation,
        # frees, the fetch request), and none did with the switch off.
        assert on["inline_requests"] >= 6 * 3, on
        assert off["inline_requests"] == 0, off
        assert on["memory_hits"] == off["memory_hits"] >= 6


def test_each_switch_alone_gives_the_same_bits(tmp_path):
    results = [run_child(tmp_path, "train", 1, ON)]
    for name in ON:
        results.append(run_child(tmp_path, "train", 1, dict(ON, **{name: "0"})))
    for r in results[1:]:
        assert r["losses"] == results[0]["losses"]
        assert r["params"] == results[0]["params"]


def test_an_error_in_an_inline_step_raises_the_same_exception(tmp_path):
    on = run_child(tmp_path, "error", 1, ON)
    off = run_child(tmp_path, "error", 1, OFF)
    assert on["losses"] == off["losses"]
    assert on["bad"][0] == "WorkerError" and "out of range" in on["bad"][2], on
    assert on["bad"] == off["bad"]
    assert on["after"] == off["after"]
    assert on["after2"] == off["after2"]
    assert on["inline_requests"] > 0 and off["inline_requests"] == 0


def test_held_puts_and_frees_reach_the_worker_before_the_next_request(tmp_path):
    on = run_child(tmp_path, "puts", 1, ON)
    off = run_child(tmp_path, "puts", 1, OFF)
    assert on["fetched"] == [True] * 5 and on["more"], on
    assert on["tensors"] == off["tensors"], (on, off)


def test_a_dead_worker_is_still_named(tmp_path):
    for env in (ON, OFF):
        r = run_child(tmp_path, "dead", 1, env)
        kind, rank, message = r["dead"]
        assert kind == "WorkerError" and rank == 0, r
        assert f"worker pid {r['pid']}" in message, r
        assert r["detect_s"] < 10, r
        # A later step fails the same way (its values need the lost rank).
        kind, rank, message = r["again"]
        assert kind == "WorkerError" and rank == 0, r
        assert re.search(r"worker pid \d+", message), r
