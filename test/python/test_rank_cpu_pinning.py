"""DTORCH_PIN_RANKS=1 pins each rank thread of the embedded cluster's workers
to CPUs of its own (runtime/include/dtorch/runtime/RankCpuPlacement.h) when
the host's ranks do not outnumber the CPUs, and keeps each worker process to
its ranks' CPUs; unset, nothing is pinned; a bad value fails the start with
an error naming it, and the next start works.

The affinities are read from /proc for the threads the worker names
(dtorch-rank for rank threads, dtorch-worker for the main thread). Each case
runs in a child process: the variable is read when a worker starts."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent(r"""
    import glob, json, os, subprocess, sys
    import dtorch

    world = int(sys.argv[1])
    out = {"cpus": sorted(os.sched_getaffinity(0))}
    try:
        dtorch.init(world_size=world, num_processes=world)
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
        # The session stays usable: a start with a good value works.
        os.environ["DTORCH_PIN_RANKS"] = "0"
        dtorch.init(world_size=world, num_processes=world)
    mesh = dtorch.init_device_mesh("cpu", (world,))
    out["sum"] = float((dtorch.ones(4 * world, device_mesh=mesh) * 2).sum().item())

    def cpus_allowed(task):
        for line in open(task + "/status"):
            if line.startswith("Cpus_allowed_list:"):
                text = line.split(":", 1)[1].strip()
                cpus = []
                for part in text.split(","):
                    a, _, b = part.partition("-")
                    cpus += list(range(int(a), int(b or a) + 1))
                return cpus

    workers = [int(p) for p in subprocess.run(
        ["pgrep", "-P", str(os.getpid()), "-f", "dtorch-worker"],
        capture_output=True, text=True).stdout.split()]
    out["workers"] = []
    for pid in sorted(workers):
        threads = {}
        for task in glob.glob(f"/proc/{pid}/task/*"):
            try:  # a short-lived thread (a connection's) may end meanwhile
                name = open(task + "/comm").read().strip()
                cpus = cpus_allowed(task)
            except OSError:
                continue
            threads.setdefault(name, []).append(cpus)
        out["workers"].append(threads)
    dtorch.shutdown()
    print("RESULT " + json.dumps(out), flush=True)
""")


def run_child(tmp_path, world, env):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    full = dict(os.environ, DTORCH_CACHE_DIR="", DTORCH_BLAS_VERBOSE="1",
                PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep +
                os.environ.get("PYTHONPATH", ""))
    full.pop("DTORCH_PIN_RANKS", None)
    full.update(env)
    out = subprocess.run([sys.executable, str(script), str(world)], env=full,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), out.stderr


def rank_threads(result):
    """The CPU lists of every worker's rank threads, in worker order."""
    return [w["dtorch-rank"] for w in result["workers"]]


def needs_cpus(n):
    return pytest.mark.skipif(len(os.sched_getaffinity(0)) < n,
                              reason=f"needs an affinity of at least {n} CPUs")


@needs_cpus(2)
def test_one_rank_with_one_blas_thread_keeps_to_one_cpu(tmp_path):
    result, err = run_child(tmp_path, 1, {"DTORCH_PIN_RANKS": "1", "DTORCH_BLAS_THREADS": "1"})
    first = result["cpus"][0]
    assert result["sum"] == 8.0
    assert rank_threads(result) == [[[first]]]
    # The whole worker process keeps to its rank's CPU, its main thread too.
    worker = result["workers"][0]
    assert worker["dtorch-worker"] == [[first]]
    assert all(cpus == [first] for lists in worker.values() for cpus in lists)
    assert f"; rank 0 on CPU {first}" in err


@needs_cpus(2)
def test_each_rank_of_a_host_gets_its_own_share(tmp_path):
    result, err = run_child(tmp_path, 2, {"DTORCH_PIN_RANKS": "1"})
    cpus = result["cpus"]
    share = len(cpus) // 2
    assert result["sum"] == 16.0
    # Each rank's BLAS gets the threads of its share, and the CPUs with them.
    assert rank_threads(result) == [[cpus[:share]], [cpus[share:2 * share]]]
    for r in range(2):
        assert f"rank {r} on CPU" in err


def test_unset_nothing_is_pinned(tmp_path):
    result, err = run_child(tmp_path, 2, {})
    assert result["sum"] == 16.0
    assert rank_threads(result) == [[result["cpus"]], [result["cpus"]]]
    assert "ranks not pinned (DTORCH_PIN_RANKS=1 pins them)" in err


def test_ranks_that_outnumber_the_cpus_are_left_to_the_scheduler(tmp_path):
    world = len(os.sched_getaffinity(0)) + 1
    if world > 8:
        pytest.skip("too many CPUs for one worker per rank and CPU")
    result, err = run_child(tmp_path, world, {"DTORCH_PIN_RANKS": "1"})
    assert result["sum"] == 8.0 * world
    assert rank_threads(result) == [[result["cpus"]]] * world
    assert f"ranks not pinned: {world} ranks on {world - 1} CPUs" in err


def test_a_bad_value_fails_the_start_and_the_next_start_works(tmp_path):
    result, err = run_child(tmp_path, 1, {"DTORCH_PIN_RANKS": "yes"})
    # Refused before any worker starts, with the variable named.
    assert result["error"] == "DTorchError: DTORCH_PIN_RANKS must be 0 or 1, not 'yes'"
    assert result["sum"] == 8.0
