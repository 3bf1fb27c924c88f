"""bench/eager_graph_bench.py's pieces at a tiny size (no timing is
checked): each repetition of the chain is a cache miss and the cached runs
compile nothing, a cached training step compiles nothing, and the report
renders with missing measurements."""
import json
import os
import subprocess
import sys

import pytest

from conftest import subprocess_env

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)


def run_child(kind, spec):
    r = subprocess.run([sys.executable, os.path.join(BENCH, "eager_graph_children.py"), kind,
                        json.dumps(spec)], capture_output=True, text=True, timeout=240,
                       env=subprocess_env())
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_every_chain_repetition_compiles_once_and_the_cached_runs_never():
    out = run_child("chain", {"world": 4, "ops": 40, "reps": 2, "backend": "inprocess"})
    assert out["compiles_per_miss"] == [1, 1]
    assert out["compiles_on_hits"] == 0
    assert out["miss_us_per_op"] > 0 and out["cached_us_per_op"] > 0


def test_a_cached_training_step_compiles_nothing():
    mlp = {"d_in": 8, "hidden": 16, "layers": 1, "classes": 3, "batch": 16}
    out = run_child("step", {"world": 4, "steps": 3, "backend": "inprocess", "mlp": mlp})
    assert out["compiles_in_timed_steps"] == 0
    assert out["step_ms"] >= out["client_ms"] > 0
    out = run_child("client", {"world": 4, "steps": 3, "backend": "inprocess", "mlp": mlp})
    assert out["ops_per_step"] > 20  # forward, backward and AdamW of two layers


def test_the_report_renders_missing_measurements():
    bench = pytest.importorskip("eager_graph_bench")
    missing = {"error": "not installed"}
    results = {
        "date": "now", "git": "rev", "host": "here",
        "config": {"ops": 40, "reps": 2, "simulated_backend": False},
        "chain": {"dtorch": {"miss_us_per_op": 8.0, "miss_record_us_per_op": 1.0,
                             "cached_us_per_op": 2.0, "cached_record_us_per_op": 0.5,
                             "compiles_per_miss": [1, 1], "compiles_on_hits": 0},
                  "torch_dtensor": missing, "jax": missing},
        "compile": [{"world": 4, "backend": "inprocess", "compile_s": 0.5,
                     "compile_us_per_op": 12.5},
                    {"world": 4096, "error": "needs backend='simulated' (not in this build)"}],
        "step": [{"world": 8, "error": "timed out after 60 s"}],
        "client": {"dtorch": missing, "torch_eager": missing},
        "loop": {"world": 4, "backend": "cluster", "steps": 2, "compiles_in_timed_steps": 0,
                 "step_ms": {"never fetches": 10.0, "numpy_async() every step": 10.5,
                             ".item() every step": 14.0}},
    }
    text = bench.table(results)
    assert "not installed" in text and "needs backend='simulated'" in text
    verdicts = [v for _, _, v in bench.goals(results)]
    assert verdicts == ["met",
                        "not measured (needs backend='simulated' (not in this build))",
                        "not measured (4096 ranks not in the sweep)",
                        "not measured (not installed)", "met"]
