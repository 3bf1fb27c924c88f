"""bench/pipeline_bench.py at a tiny size (no timing is checked): the bubble
is read from a real profiler trace of every stage's rank, and 1F1B holds
fewer activations than GPipe on the first stage (m > p), as the schedules
promise."""
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import pipeline_bench  # noqa: E402


def test_busy_union_merges_overlapping_intervals():
    assert pipeline_bench.busy_union([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == 4
    bubbles, span = pipeline_bench.bubbles_from_trace(
        [{"ph": "X", "cat": "kernel", "pid": 7, "ts": 0, "dur": 10},
         {"ph": "X", "cat": "kernel", "pid": 8, "ts": 5, "dur": 15},
         {"ph": "X", "cat": "comm", "pid": 8, "ts": 0, "dur": 20}], [7, 8])
    assert span == 20 and bubbles == [0.5, 0.25]


def test_gpipe_and_1f1b_bubble_and_memory(tmp_path):
    results = pipeline_bench.measure(stages=2, microbatches=6, rows=8, width=64, layers=2,
                                     warmup=1, workdir=str(tmp_path), chunks=2)
    by = {r["schedule"]: r for r in results}
    assert set(by) == {"GPipe", "1F1B", "Interleaved1F1B"}
    for r in results:
        assert len(r["bubbles"]) == 2 and all(0 <= b < 1 for b in r["bubbles"])
    assert by["1F1B"]["theoretical"] == pytest.approx(1 / 7)
    assert by["Interleaved1F1B"]["theoretical"] == pytest.approx(1 / 13)
    # Same model, same batch: the same loss (the layers are drawn alike).
    assert by["GPipe"]["loss"] == pytest.approx(by["1F1B"]["loss"], rel=1e-5)
    act = {s: by[s]["peak_bytes"][0] - by[s]["held_bytes"][0] for s in by}
    assert act["1F1B"] < act["GPipe"], act
    assert "| 1F1B | 2 | 6 |" in pipeline_bench.table(results)
