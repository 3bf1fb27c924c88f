"""bench/train_bench.py --gpt-step at a tiny size (no timing is checked):
dtorch and torch train the same GPT from the same initial weights on the
same batches, so their losses agree step by step on 1 rank and on DP=2 next
to DDP, also when dtorch reads each loss one step later (item_async), and the
report (table, JSON, plot) is written."""
import json
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import train_bench  # noqa: E402

torch = pytest.importorskip("torch", reason="the torch side of --gpt-step needs torch")


def test_gpt_step_bench_trains_the_same_model_on_both_sides(tmp_path):
    result = train_bench.main(["--gpt-step", "--rounds", "1", "--steps", "2", "--warmup", "1",
                               "--torch-python", sys.executable, "--out", str(tmp_path)])
    assert result["torch_missing"] is None
    # Each setting twice: the loss read at the end of its step (sync) and one
    # step later (item_async, the client recording the next step meanwhile).
    assert [(r["ranks"], r["loss_fetch"]) for r in result["rows"]] == [
        (1, "sync"), (1, "async"), (2, "sync"), (2, "async")]
    for row in result["rows"]:
        d, t = row["dtorch"], row["torch"]
        assert len(d["losses"]) == len(t["losses"]) == 3
        # Same weights and batches: the losses agree far below what one
        # training step changes them by.
        assert row["max_loss_diff"] < 1e-4, row
        assert abs(d["losses"][0] - d["losses"][-1]) > 10 * row["max_loss_diff"]
        assert row["ratio_best"] > 0 and row["cpu_ratio"] > 0
    out = tmp_path / "gpt_step"
    table = (out / "table.md").read_text()
    assert "1 rank vs torch eager" in table and "DP=2 vs torch DDP" in table
    assert "1 rank, loss read next step (item_async) vs torch eager" in table
    assert json.loads((out / "results.json").read_text())["rows"][0]["setting"]
    assert (out / "gpt_step.png").stat().st_size > 0
