"""bench/collective_bench.py at two sizes and one repeat (no speed is
checked): the three transports (shared memory, the same staged, Gloo) run
between 2 processes, 256 KiB through peer access, the binary checks the
all_reduce result, and the table, JSON and plot are written."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BENCH = os.path.join(ROOT, "bench", "collective_bench.py")
BINARY = os.path.join(ROOT, "build", "bin", "collective_bench")


@pytest.mark.skipif(not os.path.exists(BINARY), reason="collective_bench is not built")
def test_quick_run_writes_the_report(tmp_path):
    out = subprocess.run([sys.executable, BENCH, "--quick", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    with open(tmp_path / "results.json") as f:
        results = json.load(f)
    assert [r["bytes"] for r in results["rows"]] == [4096, 262144]
    for row in results["rows"]:
        assert row["shared_memory_us"] > 0 and row["gloo_us"] > 0
        assert row["staged_us"] > 0 and row["shared_memory_cpu_us"] > 0
        assert row["ratio"] > 0 and row["best_ratio"] > 0
    assert "| 256 KiB |" in (tmp_path / "table.md").read_text()
