"""bench/rank_pinning_ab.py at a tiny size (no timing is checked): the
hand-off gaps read from a trace, and one round of both settings giving every
measure, each setting's workers pinned as it says, and the table."""
import json
import os
import sys

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import rank_pinning_ab  # noqa: E402


def span(name, ts, dur):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur}


def test_hand_off_gaps_pair_each_send_with_its_run_and_synchronize():
    events = [span("run send", 0, 5), span("synchronize", 10, 400),
              span("run segment_class0", 100, 250), span("matmul", 100, 250),
              span("run send", 1000, 5), span("run segment_class0", 1040, 300),
              span("synchronize", 1010, 400), {"ph": "M", "name": "thread_name"}]
    into, out_of = rank_pinning_ab.hand_off_gaps(events)
    assert into == [100, 40]
    assert out_of == [60, 70]
    # A send whose run never came counts nothing.
    assert rank_pinning_ab.hand_off_gaps([span("run send", 0, 5)]) == ([], [])


def test_one_round_measures_both_settings(tmp_path):
    rank_pinning_ab.main(["--rounds", "1", "--pairs", "2", "--n", "48", "--calls", "4",
                          "--tiny-calls", "10", "--peer-python", sys.executable,
                          "--out", str(tmp_path)])
    results = json.loads((tmp_path / "results.json").read_text())
    (round_,) = results["rounds"]
    assert set(round_) == {"0", "1"}
    for pin, row in round_.items():
        assert "error" not in row, row
        assert row["in_us"] > 0 and row["out_us"] > 0, row
        assert row["tiny_1rank_us"] > 0 and row["tiny_2rank_us"] > 0, row
        if row["gemm_error"] is None:  # torch is installed
            assert row["gemm_ratio"] > 0
            (line,) = row["blas"]
            pinned = "; rank 0 on CPU " in line
            assert pinned == (pin == "1"), line
    text = (tmp_path / "table.md").read_text()
    assert "| tiny op round trip, 2 ranks (us) |" in text
    assert sum(line.startswith("|") for line in text.splitlines()) == 7  # + header, rule
