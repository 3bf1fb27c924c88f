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
    assert line.endswith(", 1 thread"), line


def test_two_ranks_on_one_host_share_the_cores():
    out = gemm_bench.dtorch_run({"n": 33, "reps": 2, "world": 2, "op": "bmm"}, {}, timeout=240)
    assert "error" not in out, out
    assert out["max_rel_err"] < 1e-5
    share = max(1, len(os.sched_getaffinity(0)) // 2)
    want = f"{share} thread" + ("s" if share > 1 else "")
    assert len(out["blas"]) == 2, out  # one line per worker process
    for line in out["blas"]:
        assert line.endswith(want), (line, want)


def test_the_report_renders_missing_peers():
    missing = {"torch_error": "not installed"}
    dt = {"gflops": 100.0, "gflops_fetch": 80.0, "sync_s": 0.02, "fetch_s": 0.03,
          "max_rel_err": 1e-7, "blas": ["sgemm: oneDNN 2.6.3 (avx2), dgemm: x, 1 thread"]}
    raw = {"dtorch_1rank": [dt], "torch_1thread": [missing], "dtorch_2ranks": [dt],
           "torch_2threads": [missing]}
    for label, _ in gemm_bench.BLAS_OPTIONS:
        raw["option:" + label] = [dt if "BLIS" not in label else {"error": "timed out"}]
    results = {"date": "now", "git": "rev", "host": "here",
               "config": {"n": 64, "rounds": 1, "reps": 2}, "raw": raw,
               "summary": gemm_bench.summarize(raw)}
    text = gemm_bench.table(results)
    assert "timed out" in text and "100.0" in text
    assert [ok for _, _, ok in gemm_bench.goals(results["summary"])] == [False, False]
