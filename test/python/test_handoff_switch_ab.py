"""bench/handoff_switch_ab.py at a tiny size (no timing is checked): the
hand-off gaps read from a trace, and one round of both settings of a switch
giving every measure, each setting doing what it says, and the table."""
import json
import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import handoff_switch_ab  # noqa: E402


def span(name, ts, dur):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur}


def test_hand_off_gaps_pair_each_send_with_its_run_and_synchronize():
    events = [span("run send", 0, 5), span("synchronize", 10, 400),
              span("run segment_class0", 100, 250), span("matmul", 100, 250),
              span("run send", 1000, 5), span("run segment_class0", 1040, 300),
              span("synchronize", 1010, 400), {"ph": "M", "name": "thread_name"}]
    into, out_of = handoff_switch_ab.hand_off_gaps(events)
    assert into == [100, 40]
    assert out_of == [60, 70]
    # A send whose run never came counts nothing.
    assert handoff_switch_ab.hand_off_gaps([span("run send", 0, 5)]) == ([], [])


def one_round(tmp_path, *extra):
    handoff_switch_ab.main(["--rounds", "1", "--pairs", "2", "--n", "48", "--calls", "4",
                            "--tiny-calls", "10", "--peer-python", sys.executable,
                            "--out", str(tmp_path), *extra])
    results = json.loads((tmp_path / "results.json").read_text())
    (round_,) = results["rounds"]
    assert set(round_) == {"0", "1"}
    for row in round_.values():
        assert "error" not in row, row
        assert row["in_us"] > 0 and row["out_us"] > 0, row
        assert row["tiny_1rank_us"] > 0 and row["tiny_2rank_us"] > 0, row
        if row["gemm_error"] is None:  # torch is installed
            assert row["gemm_ratio"] > 0
    text = (tmp_path / "table.md").read_text()
    assert "| tiny op round trip, 2 ranks (us) |" in text
    assert sum(line.startswith("|") for line in text.splitlines()) == 7  # + header, rule
    return results, round_, text


def test_one_round_of_rank_pinning(tmp_path):
    results, round_, text = one_round(tmp_path)
    assert results["config"]["switch"] == "DTORCH_PIN_RANKS"
    assert text.startswith("# DTORCH_PIN_RANKS A/B")
    for setting, row in round_.items():
        if row["gemm_error"] is None:
            (line,) = row["blas"]
            pinned = "; rank 0 on CPU " in line
            assert pinned == (setting == "1"), line


def test_one_round_of_inline_synchronize(tmp_path):
    results, round_, text = one_round(tmp_path, "--switch", "DTORCH_INLINE_SYNC",
                                      "--tiny-gap-ms", "1")
    assert "tiny ops 1 ms apart" in text
    # On, each tiny op's synchronize also runs on the calling thread (its
    # run and the previous op's free may be inline either way, the free
    # merged with the run or not): about one more inline request per op.
    for world in (1, 2):
        on, off = (round_[s][f"tiny_{world}rank_inline_per_op"] for s in ("1", "0"))
        assert on >= off + 0.5, (world, on, off)


def test_an_unknown_switch_is_refused(capsys):
    with pytest.raises(SystemExit):
        handoff_switch_ab.main(["--switch", "DTORCH_NOT_A_SWITCH"])
    assert "invalid choice" in capsys.readouterr().err
