"""The runtime's BLAS seen from Python and bench/gemm_bench.py at a tiny size
(no timing is checked): every DTORCH_BLAS option computes the worker's GEMM
correctly and runs the library it names, a worker's BLAS threads are its
rank's share of the cores, and the report renders with missing peers."""
import os
import sys

import pytest

import dtorch

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import gemm_bench  # noqa: E402
from bench_support import LockStepChild  # noqa: E402


def test_blas_info_of_this_process():
    info = dtorch._C.blas_info()
    assert info["threads"] >= 1
    assert "thread" in info["description"]
    if not os.environ.get("DTORCH_BLAS"):
        assert info["sgemm"].startswith("oneDNN"), info
        assert info["dgemm"].startswith("OpenBLAS"), info
        assert info["onednn_isa"], info
        if info["openblas_chosen"] and not info["openblas_preloaded"]:
            assert info["openblas_core"].lower() == info["openblas_chosen"].lower(), info


@pytest.mark.parametrize("label,env,library", [
    ("default", {}, "sgemm: oneDNN"),
    ("openblas", {"DTORCH_BLAS": "openblas"}, "sgemm: OpenBLAS"),
    ("blis", {"DTORCH_BLAS": "blis"}, "sgemm: BLIS"),
    ("prescott", {"DTORCH_BLAS": "openblas", "OPENBLAS_CORETYPE": "Prescott"},
     "sgemm: OpenBLAS 0.3.21 (Prescott)"),
])
def test_every_blas_option_runs_the_gemm_on_a_worker(label, env, library):
    out = gemm_bench.dtorch_run({"n": 37, "reps": 2, "world": 1, "op": "matmul"},
                                dict(env, DTORCH_BLAS_THREADS="1"), timeout=240)
    assert "error" not in out, out
    assert out["max_rel_err"] < 1e-5
    assert out["gflops"] > 0
    assert len(out["blas"]) == 1, out
    line = out["blas"][0]
    if label == "prescott" and "0.3.21" not in line:
        library = "sgemm: OpenBLAS"  # another OpenBLAS version: only the name
    assert line.startswith(library) or library in line, line
    # The BLAS part; after "; " the line says how the ranks are pinned.
    assert line.split("; ")[0].endswith(", 1 thread"), line


def test_two_ranks_on_one_host_share_the_cores():
    out = gemm_bench.dtorch_run({"n": 33, "reps": 2, "world": 2, "op": "bmm"}, {}, timeout=240)
    assert "error" not in out, out
    assert out["max_rel_err"] < 1e-5
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    want = f"{share} thread" + ("s" if share > 1 else "")
    assert len(out["blas"]) == 2, out  # one line per worker process
    for line in out["blas"]:
        assert line.split("; ")[0].endswith(want), (line, want)


def test_the_report_renders_missing_peers():
    missing = {"torch_error": "not installed"}
    dt = {"gflops": 100.0, "gflops_fetch": 80.0, "sync_s": 0.02, "fetch_s": 0.03,
          "max_rel_err": 1e-7, "blas": ["sgemm: oneDNN 2.6.3 (avx2), dgemm: x, 1 thread"]}
    raw = {"dtorch_1rank": [dt], "torch_1thread": [missing], "dtorch_2ranks": [dt],
           "torch_2threads": [missing]}
    for label, _ in gemm_bench.BLAS_OPTIONS:
        raw["option:" + label] = [dt if "BLIS" not in label else {"error": "timed out"}]
    results = {"date": "now", "git": "rev", "host": "here",
               "config": {"n": 64, "rounds": 1, "reps": 2, "pairs": 3, "turn_calls": 2,
                          "gap_ms": 1.0},
               "paired": {"1rank": {"error": "torch not installed"},
                          "1rank_any_cpu": {"ratio": 0.875, "ratio_quartiles": [0.8, 0.9]},
                          "1rank_pinned_rank": {"ratio": 0.9649, "ratio_quartiles": [0.9, 1.0]},
                          "2ranks": {"error": "torch not installed"}},
               "raw": raw, "summary": gemm_bench.summarize(raw)}
    text = gemm_bench.table(results)
    assert "timed out" in text and "100.0" in text and "torch not installed" in text
    assert ("| 1 rank >= 0.95x torch 1 thread, 64^3 float32, each side on any CPU | 0.88 "
            "| 0.80-0.90 |") in text
    assert ("| (reference) 1 rank, any CPU, dtorch's rank pinned (`DTORCH_PIN_RANKS=1`) | 0.96 "
            "| 0.90-1.00 |") in text
    assert [ok for _, _, ok in gemm_bench.goals(results)] == [False, False, False]
    # Each 1-rank row is a goal of its own: one below 0.95 fails it.
    results["paired"].update({"1rank": {"ratio": 0.97}, "1rank_any_cpu": {"ratio": 0.949},
                              "2ranks": {"ratio": 0.91}})
    assert [ok for _, _, ok in gemm_bench.goals(results)] == [True, False, True]
    results["paired"]["1rank_any_cpu"]["ratio"] = 0.95
    assert all(ok for _, _, ok in gemm_bench.goals(results))


def test_paired_turns_measure_both_sides_and_check_the_product():
    """dtorch and torch in two long-lived children taking turns: every pair
    gives a ratio, both children end cleanly, and the dtorch side's product
    is checked against numpy."""
    pytest.importorskip("torch")
    out = gemm_bench.paired({"n": 48, "reps": 1, "world": 1, "op": "matmul"},
                            {"DTORCH_BLAS_THREADS": "1"}, sys.executable,
                            {"n": 48, "reps": 1, "threads": 1, "batch": 1},
                            pairs=3, calls=2, gap_s=0.001, timeout=240)
    assert "error" not in out, out
    assert len(out["pair_ratios"]) == 3 and all(r > 0 for r in out["pair_ratios"])
    assert out["ratio"] == sorted(out["pair_ratios"])[1]
    assert out["max_rel_err"] < 1e-5
    assert out["gflops"] > 0 and out["torch_gflops"] > 0
    assert len(out["blas"]) == 1 and out["blas"][0].split("; ")[0].endswith(", 1 thread"), out
    goals = gemm_bench.goals({"paired": {"1rank": out, "2ranks": {"ratio": 0.5}}})
    assert goals[0][1] == out["ratio"] and goals[1][1] is None and goals[2][2] is False
    # Each turn says the CPU its computing thread (dtorch's rank, torch's
    # main thread) last ran on.
    allowed = os.sched_getaffinity(0)
    assert len(out["dtorch_cpu"]) == len(out["torch_cpu"]) == 3
    assert all(c in allowed for c in out["dtorch_cpu"] + out["torch_cpu"]), out
    assert out["by_cpu"] == gemm_bench.by_cpu(out["dtorch_s"], out["dtorch_cpu"],
                                              out["torch_s"], out["torch_cpu"])


def test_turns_are_told_apart_by_cpu():
    # dtorch on CPU 0 twice (2 s, 4 s) and CPU 1 once; torch on CPU 1
    # twice (1 s, 3 s) and CPU 0 once (1 s); CPU 2 had only dtorch.
    by = gemm_bench.by_cpu([2.0, 4.0, 1.0, 5.0], [0, 0, 1, 2], [1.0, 3.0, 1.0, 1.0], [1, 1, 0, 1])
    assert by == {"0": {"dtorch_turns": 2, "torch_turns": 1, "ratio": 1.0 / 3.0},
                  "1": {"dtorch_turns": 1, "torch_turns": 3, "ratio": 1.0}}
    assert gemm_bench.by_cpu([1.0], [None], [1.0], [None]) == {}
    p = {"dtorch_cpu": [0, 0, 1], "torch_cpu": [0, 1, 1],
         "by_cpu": {"0": {"dtorch_turns": 2, "torch_turns": 1, "ratio": 0.9}}}
    assert gemm_bench.cpu_note("any CPU", p) == (
        "any CPU: both sides on the same CPU in 2 of 3 pairs; CPU 0: 0.90 "
        "(2 dtorch turns, 1 torch turns)")
    assert gemm_bench.cpu_note("any CPU", {"dtorch_cpu": [None]}) is None


def test_paired_reports_a_child_that_fails():
    """A peer that cannot start gives an error, not a hang; the dtorch child
    is ended all the same."""
    out = gemm_bench.paired({"n": 16, "reps": 1, "world": 1, "op": "matmul"},
                            {"DTORCH_BLAS_THREADS": "1"}, "/bin/false",
                            {"n": 16, "reps": 1, "threads": 1, "batch": 1},
                            pairs=2, calls=1, gap_s=0.0, timeout=60)
    assert "error" in out and "ended" in out["error"], out


AFFINITY_CHILD = """
import os, subprocess, sys
sys.path.insert(0, {bench!r})
from bench_support import serve_lock_step

def setup():
    def call(command):
        child = subprocess.run([sys.executable, "-c",
                                "import os; print(sorted(os.sched_getaffinity(0)))"],
                               capture_output=True, text=True, check=True)
        return {{"mine": sorted(os.sched_getaffinity(0)), "its_child": child.stdout.strip()}}
    return call, lambda: {{"ended": True}}

serve_lock_step(setup)
"""


@pytest.mark.parametrize("pinned", [True, False])
def test_lock_step_child_confines_itself_and_what_it_starts(pinned):
    """The 1-rank GEMM pairs run both sides on one CPU: a LockStepChild given
    `cpus` runs there, and so does every process it starts (dtorch's
    workers); without `cpus` it keeps the parent's CPUs."""
    allowed = sorted(os.sched_getaffinity(0))
    want = [allowed[-1]] if pinned else allowed
    child = LockStepChild([sys.executable, "-c", AFFINITY_CHILD.format(bench=BENCH)],
                          timeout=60, cpus={allowed[-1]} if pinned else None)
    with child:
        got = child.call("run")
        assert got == {"mine": want, "its_child": str(want)}, got
    assert child.close() is None  # already ended by the context manager
