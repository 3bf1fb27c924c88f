"""Buffer planning (--rank-plan-buffers, the executor's arena) seen from
Python:

- memory_stats() reports the arena of the last run's planned temporaries,
  the arena each rank keeps, the last run's peak and the high-water mark;
  a cached segment run again does not grow the arena;
- a GPT training step (examples/gpt, tiny) gives the same losses with and
  without planning (DTORCH_BUFFER_PLANNING=0), and a smaller peak per rank
  with it, on 1 rank and data parallel on 2 (bench/memory_bench.py's
  measurement, in fresh interpreters).
"""
import gc
import importlib.util
import os

import numpy as np

from dtorch import Shard

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_memory_bench():
    spec = importlib.util.spec_from_file_location(
        "memory_bench", os.path.join(ROOT, "bench", "memory_bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_memory_stats_report_the_arena_of_a_chain(dt):
    if os.environ.get("DTORCH_BUFFER_PLANNING") == "0":
        return
    mesh = dt.init_device_mesh("cpu", (4,))
    x = dt.ones(64, 32, device_mesh=mesh, placements=[Shard(0)])

    def chain(v):
        # Temporaries of 16x32 float32 (2 KiB) per rank; only the sum escapes.
        return ((v * 2.0).exp() + v).relu().sin().sum(1)

    y = chain(x)
    expected = np.sin(np.maximum(np.exp(2.0) + 1.0, 0)) * 32
    np.testing.assert_allclose(y.numpy(), np.full(64, expected, np.float32), rtol=1e-5)
    gc.collect()
    first = dt.memory_stats()
    for r in first:
        # The 2 KiB temporaries share one slot (the elementwise ops run in
        # place; without that a chain needs two), plus small constants.
        assert 16 * 32 * 4 <= r["last_run_arena_bytes"] < 2 * 16 * 32 * 4, r
        assert r["arena_bytes"] >= r["last_run_arena_bytes"]
        assert r["last_run_peak_bytes"] >= r["last_run_arena_bytes"]
        assert r["peak_bytes"] >= r["last_run_peak_bytes"]
    z = chain(x)  # the same segment, cached
    np.testing.assert_allclose(z.numpy(), y.numpy())
    again = dt.memory_stats()
    assert [r["arena_bytes"] for r in again] == [r["arena_bytes"] for r in first]


def test_training_step_same_losses_smaller_peak_with_planning():
    bench = load_memory_bench()
    cfg = dict(vocab_size=16, block_size=8, n_layer=1, n_head=2, d_model=16)
    rows = bench.compare(cfg, steps=2, batch=4,
                         setups=[("1 rank", 1, "single"), ("DP=2", 2, "dp")])
    for row in rows:
        assert row["losses_equal"], row
        assert all(np.isfinite(row["losses"])), row
        assert row["arena_bytes"] > 0, row
        assert row["peak_bytes_on"] < row["peak_bytes_off"], row
        # Planning changes no tensor the ranks hold between steps.
        assert row["held_bytes_on"] == row["held_bytes_off"], row
    assert bench.table(rows, cfg, 2, 4).count("| yes |") == len(rows)
