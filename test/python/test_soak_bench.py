"""bench/soak.py in a short run: the driver trains in a child interpreter on
worker processes, samples every process from /proc and writes its table,
JSON and plot; over a short run no process gains descriptors or threads."""
import json
import os
import subprocess
import sys

import pytest

from conftest import backend_name, subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(backend_name() != "cluster", reason="needs worker processes")


def test_short_soak_writes_its_report_and_leaks_no_descriptor_or_thread(tmp_path):
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "soak.py"), "--steps", "120",
                        "--every", "20", "--from", "40", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env=subprocess_env())
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.load(open(tmp_path / "results.json"))
    assert result["names"] == ["client", "worker 0", "worker 1"]
    assert [s["step"] for s in result["samples"]] == [1, 20, 40, 60, 80, 100, 120]
    assert result["last_loss"] < result["first_loss"]
    for row in result["rows"]:
        assert (row["from_step"], row["to_step"]) == (40, 120)
        assert row["fds_to"] <= row["fds_from"], row
        assert row["threads_to"] <= row["threads_from"], row
        assert row["rss_mib_from"] > 1 and abs(row["rss_growth_pct"]) < 25, row
    assert (tmp_path / "table.md").read_text().count("| worker") == 2
    assert (tmp_path / "soak.png").stat().st_size > 1000
