"""bench/fusion_bench.py at a tiny size (no timing is checked): the cached
chain runs through one fused instruction and compiles nothing more, the
fused gelu chain computes the right values (the child checks them), and the
whole report renders, JAX peers absent."""
import json
import os
import subprocess
import sys

from conftest import subprocess_env

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")


def test_fusion_bench_runs_at_a_tiny_size(tmp_path):
    out = tmp_path / "fusion"
    r = subprocess.run([sys.executable, os.path.join(BENCH, "fusion_bench.py"), "--out", str(out),
                        "--ops", "40", "--n", "65536", "--reps", "2", "--runs", "1",
                        "--peer-python", ""], capture_output=True, text=True, timeout=600,
                       env=subprocess_env())
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    fused, plain = res["chain"]["dtorch_fused"], res["chain"]["dtorch_unfused"]
    assert fused["fused_instructions"] >= 1, fused
    assert plain["fused_instructions"] == 0, plain
    assert fused["cached_us_per_op"] > 0 and plain["cached_us_per_op"] > 0
    assert res["chain"]["jax_jit"] == {"error": "not installed"}
    for key in ("stream_triad_all_threads", "dtorch_fused", "dtorch_fused_1_thread",
                "dtorch_unfused"):
        assert res["gelu"][key]["gb_per_s"] > 0, res["gelu"][key]
    table = (out / "table.md").read_text()
    assert "DTorch fused" in table and "STREAM triad" in table
    assert "1 kernel thread" in table and len(res["gelu"]["fused_over_triad_per_run"]) == 1
