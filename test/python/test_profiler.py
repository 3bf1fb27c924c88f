"""dtorch.profiler.profile: one Chrome/Perfetto trace of the client, the
controller and every rank's compute and comm streams.

The session of the test run (4 ranks, conftest.py) serves the trace-content
tests; the other backends and the DP=2 overlap check run in a fresh
interpreter each (a session of their own)."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import backend_name, subprocess_env
from dtorch import Partial, Replicate, Shard
from dtorch import profiler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_python(code, timeout=300, **env):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=timeout, cwd=ROOT,
                       env=dict(subprocess_env(), DTORCH_CACHE_DIR="", **env))
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def dp_computation(dt, mesh):
    """A small data-parallel computation: a matmul whose partial sums are
    all-reduced (the local pieces of x and w are [8, 2] and [2, 6])."""
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((8, 8)).astype(np.float32)
    ws = rng.standard_normal((8, 6)).astype(np.float32)
    x = dt.tensor(xs, device_mesh=mesh, placements=[Shard(1)])
    w = dt.tensor(ws, device_mesh=mesh, placements=[Shard(0)])
    y = x @ w
    assert y.placements == (Partial(),)
    z = y.redistribute(mesh, [Replicate()]).relu()
    return z, np.maximum(xs @ ws, 0)


@pytest.fixture(scope="module")
def dp_trace(dt, meshes, tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    dt.synchronize()
    with profiler.profile(path) as prof:
        z, want = dp_computation(dt, meshes["4"])
        np.testing.assert_allclose(z.numpy(), want, rtol=1e-5, atol=1e-5)
    with open(path) as f:
        trace = json.load(f)  # valid JSON
    assert trace == json.loads(json.dumps(prof.trace))
    return trace


def test_trace_names_the_client_the_controller_and_every_ranks_streams(dp_trace):
    processes = {e["pid"]: e["args"]["name"] for e in dp_trace["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(processes.values()) == ["client", "controller", "rank 0", "rank 1", "rank 2",
                                          "rank 3"]
    threads = {(processes[e["pid"]], e["args"]["name"]) for e in dp_trace["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    for r in range(4):
        assert {(f"rank {r}", "compute"), (f"rank {r}", "comm")} <= threads
    assert {("client", "python"), ("client", "session"), ("controller", "controller"),
            ("controller", "replies")} <= threads
    assert all(e["ph"] in ("X", "M") for e in dp_trace["traceEvents"])
    assert dp_trace["otherData"]["ranks"] == [0, 1, 2, 3]
    assert all(v == 0 for v in dp_trace["otherData"]["dropped"].values())


def test_every_rank_records_its_kernels_and_collectives_with_bytes(dp_trace):
    for r in range(4):
        compute = profiler.spans(dp_trace, r, "compute")
        kernels = [e for e in compute if e["cat"] == "kernel"]
        matmuls = [e for e in kernels if e["name"] == "matmul"]
        assert matmuls, [e["name"] for e in compute]
        assert all(e["args"]["bytes"] == 8 * 6 * 4 for e in matmuls)  # the [8, 6] f32 partial
        assert all(e["args"]["location"].startswith("loc(") for e in kernels)
        assert any(e["cat"] == "run" for e in compute)
        comm = profiler.spans(dp_trace, r, "comm")
        reduces = [e for e in comm if e["name"] == "all_reduce"]
        assert len(reduces) == 1, [e["name"] for e in comm]
        assert reduces[0]["cat"] == "collective"
        assert reduces[0]["args"]["bytes"] == 8 * 6 * 4
        # The all_reduce runs after the matmul it reduces, before the relu.
        relu = [e for e in kernels if e["name"] == "relu"]
        assert relu and relu[0]["ts"] >= reduces[0]["ts"] + reduces[0]["dur"] - 1e-3
        assert reduces[0]["ts"] >= matmuls[0]["ts"] + matmuls[0]["dur"] - 1e-3


def test_client_and_controller_spans(dp_trace):
    session = profiler.spans(dp_trace, "client", "session")
    ops = [e["name"] for e in session if e["cat"] == "op"]
    assert "matmul" in ops and "relu" in ops
    # An op's bytes are its result's global bytes.
    assert all(e["args"]["bytes"] == 8 * 6 * 4 for e in session if e["name"] in ("matmul", "relu"))
    assert any(e["name"] == "segment cut" for e in session)
    fetches = [e for e in session if e["name"] == "fetch"]
    assert fetches and fetches[-1]["args"]["bytes"] == 8 * 6 * 4
    python = profiler.spans(dp_trace, "client", "python")
    assert [e["name"] for e in python] == ["fetch"]
    assert python[0]["args"]["bytes"] == 8 * 6 * 4
    controller = [e["name"] for e in profiler.spans(dp_trace, "controller")]
    for name in ("segment", "cache lookup", "run send", "put", "fetch request"):
        assert name in controller, controller
    replies = profiler.spans(dp_trace, "controller", "replies")
    assert [e["name"] for e in replies] == ["fetch reply"]
    assert replies[0]["args"]["bytes"] == 4 * 8 * 6 * 4  # the 4 replicated pieces
    assert replies[0]["ts"] <= fetches[-1]["ts"] + fetches[-1]["dur"]


def test_one_timeline_and_sound_streams(dp_trace):
    assert profiler.check_streams(dp_trace) == []
    for r in range(4):
        for thread in ("compute", "comm"):
            ts = [e["ts"] for e in profiler.spans(dp_trace, r, thread)]
            assert ts == sorted(ts)
    # Every span lies inside the profiled region, on the client's clock:
    # the ranks' work happens between the first op recorded and the end of
    # the fetch that waited for it.
    session = profiler.spans(dp_trace, "client", "session")
    first_op = min(e["ts"] for e in session if e["cat"] == "op")
    fetch = [e for e in session if e["name"] == "fetch"][-1]
    for r in range(4):
        for e in profiler.spans(dp_trace, r):
            assert first_op - 1 <= e["ts"] and e["ts"] + e["dur"] <= fetch["ts"] + fetch["dur"] + 1


def test_check_streams_finds_overlapping_spans():
    def x(ts, dur):
        return {"ph": "X", "name": "k", "cat": "kernel", "ts": ts, "dur": dur, "pid": 7, "tid": 1}
    meta = [{"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "rank 0"}},
            {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "compute"}}]
    nested = {"traceEvents": meta + [x(0, 10), x(1, 2), x(4, 6), x(12, 1)]}
    assert profiler.check_streams(nested) == []
    crossing = {"traceEvents": meta + [x(0, 10), x(5, 10)]}
    assert len(profiler.check_streams(crossing)) == 1


def test_overlaps_reads_comm_and_compute_of_one_rank():
    meta = [{"ph": "M", "name": "process_name", "pid": 100, "args": {"name": "rank 0"}},
            {"ph": "M", "name": "thread_name", "pid": 100, "tid": 1, "args": {"name": "compute"}},
            {"ph": "M", "name": "thread_name", "pid": 100, "tid": 2, "args": {"name": "comm"}}]

    def ev(name, cat, tid, ts, dur):
        return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 100, "tid": tid}
    trace = {"traceEvents": meta + [ev("matmul", "kernel", 1, 0, 10), ev("add", "kernel", 1, 10, 5),
                                    ev("all_reduce", "collective", 2, 8, 4)]}
    found = profiler.overlaps(trace, 0)
    assert [(k["name"], round(d, 6)) for _, k, d in found] == [("matmul", 2), ("add", 2)]
    assert [k["name"] for _, k, _ in profiler.overlaps(trace, 0, compute={"matmul"})] == ["matmul"]
    assert profiler.overlaps(trace, 1) == []
    serial = {"traceEvents": meta + [ev("matmul", "kernel", 1, 0, 10),
                                     ev("all_reduce", "collective", 2, 10, 4)]}
    assert profiler.overlaps(serial, 0) == []


def test_start_stop_and_one_profile_at_a_time(dt, meshes, tmp_path):
    prof = profiler.profile()
    prof.start()
    with pytest.raises(RuntimeError, match="not stopped yet"):
        prof.export_chrome_trace(tmp_path / "early.json")
    with pytest.raises(RuntimeError, match="already active"):
        profiler.profile().start()
    with profiler.record_function("my region"):
        (dt.ones(4, 4, device_mesh=meshes["4"], placements=[Shard(0)]) + 1).sum().item()
    trace = prof.stop()
    python = profiler.spans(trace, "client", "python")
    assert [e["name"] for e in python] == ["fetch", "my region"] or \
        sorted(e["name"] for e in python) == ["fetch", "my region"]
    region = [e for e in python if e["name"] == "my region"][0]
    fetch = [e for e in python if e["name"] == "fetch"][0]
    assert region["ts"] <= fetch["ts"] and fetch["ts"] + fetch["dur"] <= region["ts"] + region["dur"]
    with pytest.raises(RuntimeError, match="not running"):
        prof.stop()
    prof.export_chrome_trace(tmp_path / "late.json")
    assert profiler.load(tmp_path / "late.json") == trace
    # Off again: nothing is recorded.
    (dt.ones(4, device_mesh=meshes["4"]) * 3).numpy()
    with profiler.profile() as again:
        pass
    assert profiler.spans(again.trace, 0) == []
    assert [e for e in profiler.spans(again.trace, "client", "session") if e["cat"] == "op"] == []


def test_a_full_buffer_drops_and_counts(dt, meshes):
    mesh = meshes["4"]
    x = dt.ones(4, 4, device_mesh=mesh, placements=[Shard(0)])
    with profiler.profile(max_events_per_rank=5) as prof:
        for _ in range(20):
            # A reduction (not elementwise, and not a transpose, which the
            # compiler folds away): 20 kernels, not one fused kernel.
            x = x.sum(1, keepdim=True)
        x.numpy()
    dropped = prof.trace["otherData"]["dropped"]
    for r in range(4):
        assert len(profiler.spans(prof.trace, r)) == 5
        assert dropped[f"rank {r}"] > 0
    assert dropped["client"] > 0
    with pytest.raises(ValueError):
        profiler.profile(max_events_per_rank=0)


@pytest.mark.parametrize("backend", ["inprocess", "cluster"])
def test_other_backends_trace_every_rank(backend, tmp_path):
    if backend == "cluster" and backend_name() != "cluster":
        pytest.skip("dtorch-worker is not built")
    path = tmp_path / "trace.json"
    run_python(f"""
        import numpy as np, dtorch
        from dtorch import Replicate, Shard
        dtorch.init(world_size=2, backend={backend!r}, num_processes=2)
        mesh = dtorch.init_device_mesh("cpu", (2,))
        with dtorch.profiler.profile({str(path)!r}):
            x = dtorch.ones(6, 4, device_mesh=mesh, placements=[Shard(1)])
            assert x.sum().redistribute(mesh, [Replicate()]).item() == 24
    """)
    trace = profiler.load(path)
    assert trace["otherData"]["ranks"] == [0, 1]
    for r in range(2):
        assert [e["name"] for e in profiler.spans(trace, r, "comm")] == ["all_reduce"]
        assert any(e["name"] == "sum" for e in profiler.spans(trace, r, "compute"))
    assert profiler.check_streams(trace) == []


def test_simulated_backend_traces_the_client_and_the_controller(tmp_path):
    path = tmp_path / "trace.json"
    run_python(f"""
        import dtorch
        from dtorch import Shard
        dtorch.init(world_size=16, backend="simulated")
        mesh = dtorch.init_device_mesh("cpu", (16,))
        with dtorch.profiler.profile({str(path)!r}):
            x = dtorch.ones(32, 4, device_mesh=mesh, placements=[Shard(0)])
            (x * 2).sum().item()
    """)
    trace = profiler.load(path)
    processes = {e["args"]["name"] for e in trace["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
    assert processes == {"client", "controller"}  # simulated ranks run nothing
    controller = [e["name"] for e in profiler.spans(trace, "controller")]
    assert "compile" in controller and "run send" in controller
    assert any(e["name"] == "mul" for e in profiler.spans(trace, "client", "session"))


def test_overlaps_sees_a_collective_beside_an_independent_gemm(dt, meshes):
    # The all_reduce of x @ w's partial sums and the GEMM a @ a need nothing
    # from each other: the comm stream reduces while the compute stream
    # multiplies, and the trace shows it on some rank.
    mesh = meshes["4"]
    rng = np.random.default_rng(1)
    x = dt.tensor(rng.standard_normal((256, 2048)).astype(np.float32), device_mesh=mesh,
                  placements=[Shard(1)])
    w = dt.tensor(rng.standard_normal((2048, 1024)).astype(np.float32), device_mesh=mesh,
                  placements=[Shard(0)])
    a = dt.tensor(rng.standard_normal((512, 512)).astype(np.float32), device_mesh=mesh)

    def step():
        reduced = (x @ w).redistribute(mesh, [Replicate()])
        product = a @ a  # before anything reads `reduced` in the compute stream
        return (reduced.sum() + product.sum()).item()
    step()
    with profiler.profile() as prof:
        for _ in range(3):
            step()
    assert profiler.check_streams(prof.trace) == []
    found = [hit for r in range(4) for hit in profiler.overlaps(prof.trace, r, compute={"matmul"})]
    assert found
    for comm, kernel, us in found:
        assert comm["name"] == "all_reduce" and kernel["name"] == "matmul" and us > 0
        assert comm["pid"] == kernel["pid"]


# The trace of a data-parallel training step on 2 worker processes: while a
# rank's comm stream all-reduces a gradient, its compute stream goes on with
# backward. The step's optimizer (SGD) has no matmul and the forward runs
# before any gradient exists, so a matmul running during a gradient
# all_reduce is backward compute.
OVERLAP_SCRIPT = """
    import sys, numpy as np, dtorch
    import dtorch.nn as nn, dtorch.nn.functional as F
    from dtorch import Replicate, Shard
    dtorch.init(world_size=2, backend="cluster", num_processes=2)
    mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
    dtorch.manual_seed(0)
    width = 384
    layers = []
    for i in range(6):
        layers += [nn.Linear(width, width, device_mesh=mesh), nn.Tanh()]
    model = nn.Sequential(*layers, nn.Linear(width, 4, device_mesh=mesh))
    opt = dtorch.optim.SGD(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    def step():
        x = dtorch.tensor(rng.standard_normal((256, width)).astype(np.float32),
                          device_mesh=mesh, placements=[Shard(0)])
        y = dtorch.tensor(rng.integers(0, 4, 256), device_mesh=mesh, placements=[Shard(0)])
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.item()
    for _ in range(2):
        step()  # compiled and cached
    with dtorch.profiler.profile(sys.argv[1]):
        for _ in range(3):
            step()
"""


def test_profiler_overlap(tmp_path):
    if backend_name() != "cluster":
        pytest.skip("dtorch-worker is not built")
    path = tmp_path / "dp2_step.json"
    script = tmp_path / "dp2_step.py"
    script.write_text(textwrap.dedent(OVERLAP_SCRIPT))
    r = subprocess.run([sys.executable, str(script), str(path)], capture_output=True, text=True,
                       timeout=300, cwd=ROOT, env=dict(subprocess_env(), DTORCH_CACHE_DIR=""))
    assert r.returncode == 0, r.stdout + r.stderr
    trace = profiler.load(path)
    assert profiler.check_streams(trace) == []
    for rank in range(2):
        reduces = [e for e in profiler.spans(trace, rank, "comm") if e["name"] == "all_reduce"]
        # At least the loss and one gradient all_reduce per step (gradients
        # may be bucketed into a few).
        assert len(reduces) >= 3 * 2
    found = [hit for rank in range(2)
             for hit in profiler.overlaps(trace, rank, "all_reduce", compute={"matmul"})]
    during = sorted({k["name"] for rank in range(2) for _, k, _ in profiler.overlaps(trace, rank)})
    assert found, ("no gradient all_reduce ran while a backward GEMM ran on the same rank "
                   f"(the all_reduces overlapped only {during})")


def test_a_profile_left_running_by_an_ended_session_does_not_block_the_next(tmp_path):
    run_python("""
        import dtorch
        dtorch.init(world_size=2, backend="inprocess")
        dtorch.profiler.profile().start()
        dtorch.shutdown()
        dtorch.init(world_size=2, backend="inprocess")
        mesh = dtorch.init_device_mesh("cpu", (2,))
        with dtorch.profiler.profile() as prof:
            (dtorch.ones(4, device_mesh=mesh) * 2).numpy()
        assert dtorch.profiler.spans(prof.trace, 0, "compute")
    """)
