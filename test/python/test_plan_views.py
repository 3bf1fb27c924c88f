"""Reshape views in the arena (--rank-plan-buffers=views, DTORCH_PLAN_VIEWS):
a reshape of a planned temporary that is read after the reshape shares the
temporary's memory instead of copying it. Seen from Python:

- a segment whose reshape source is read again later gives the same
  values as numpy, and the compiled plan places the reshape at its source
  (dtorch-opt's report on the segment's rank IR);
- a GPT training step (examples/gpt, tiny) gives bit-identical losses with
  views and with DTORCH_PLAN_VIEWS=0, on 1 rank and data parallel on 2, in
  fresh interpreters (bench/memory_bench.py's child).
"""
import importlib.util
import os
import re
import subprocess

import numpy as np
import pytest

from dtorch import Shard

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dtorch_opt():
    for build in ("build", "build-asan"):
        path = os.path.join(ROOT, build, "bin", "dtorch-opt")
        if os.path.exists(path):
            return path
    pytest.skip("dtorch-opt is not built")


def load_memory_bench():
    spec = importlib.util.spec_from_file_location(
        "memory_bench", os.path.join(ROOT, "bench", "memory_bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plan_report(rank_ir, views):
    """dtorch-opt's --rank-plan-buffers report of each class function."""
    r = subprocess.run(
        [dtorch_opt(), "-", f"--rank-plan-buffers=report=true views={str(views).lower()}"],
        input=rank_ir, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [tuple(int(v) for v in m) for m in re.findall(
        r"arena (\d+) bytes for \d+ temporaries \(\d+ bytes without planning, "
        r"(\d+) in place, (\d+) views\)", r.stderr)]


def test_reshape_of_a_source_read_later_is_a_view(dt):
    mesh = dt.init_device_mesh("cpu", (4,))
    a = np.linspace(-1, 1, 8 * 16, dtype=np.float32).reshape(8, 16)
    x = dt.distribute_tensor(a, mesh, [Shard(0)])

    def segment(x):
        # t, a temporary, is reshaped, then read again by the product: the
        # reshape is a view.
        t = x.exp()
        return t.reshape(8, 4, 4).sum(2), (t * 2.0).sum(1)

    s, y = segment(x)
    got_s, got_y = s.numpy(), y.numpy()
    e = np.exp(a)
    np.testing.assert_allclose(got_s, e.reshape(8, 4, 4).sum(2), rtol=1e-6)
    np.testing.assert_allclose(got_y, (e * 2.0).sum(1), rtol=1e-6)
    rank_ir = dt.last_ir("rank")
    on = plan_report(rank_ir, views=True)
    off = plan_report(rank_ir, views=False)
    assert on and len(on) == len(off), (on, off)
    assert all(views >= 1 for _, _, views in on), on
    assert all(views == 0 for _, _, views in off), off


@pytest.mark.parametrize("setup", [("1 rank", 1, "single"), ("DP=2", 2, "dp")],
                         ids=["single", "dp2"])
def test_training_step_losses_identical_with_and_without_views(setup, monkeypatch):
    bench = load_memory_bench()
    cfg = dict(vocab_size=16, block_size=8, n_layer=1, n_head=2, d_model=16)
    _, ranks, mode = setup
    runs = {}
    for views in ("1", "0"):
        monkeypatch.setenv("DTORCH_PLAN_VIEWS", views)
        runs[views] = bench.run_child(cfg, ranks, mode, steps=3, batch=4, planning=True)
    assert all(np.isfinite(runs["1"]["losses"]))
    assert runs["1"]["losses"] == runs["0"]["losses"]
    # The views change no tensor the ranks hold between steps.
    held = {v: max(r["bytes"] for r in runs[v]["ranks"]) for v in runs}
    assert held["1"] == held["0"]
