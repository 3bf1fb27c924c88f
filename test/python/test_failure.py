"""A dead worker becomes dtorch.WorkerError naming the rank within 5 s,
shutdown returns within 2 s, and no process is left behind. Each case runs
in its own interpreter so the shared test session is untouched."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import backend_name, subprocess_env

pytestmark = pytest.mark.skipif(backend_name() != "cluster", reason="needs worker processes")


def worker_pids():
    out = subprocess.run(["pgrep", "-f", "dtorch-worker"], capture_output=True, text=True)
    return {int(p) for p in out.stdout.split()}


def run_script(body, timeout=60):
    script = textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout, cwd="/", env=subprocess_env())


def wait_gone(pids, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not (pids & worker_pids()):
            return True
        time.sleep(0.05)
    return False


def test_killed_worker_raises_worker_error_naming_the_rank():
    before = worker_pids()
    r = run_script("""
        import os, signal, subprocess, time
        import dtorch
        from dtorch import Shard
        mesh = dtorch.init_device_mesh("cpu", (4,))
        x = dtorch.ones(64, 64, device_mesh=mesh, placements=[Shard(0)])
        print("ok", (x @ x).sum().item())
        kids = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "dtorch-worker"],
                              capture_output=True, text=True).stdout.split()
        print("workers", len(kids))
        victim = max(int(k) for k in kids)
        args = open(f"/proc/{victim}/cmdline").read().split(chr(0))
        print("victim ranks", args[args.index("--ranks") + 1])
        os.kill(victim, signal.SIGKILL)
        t = time.time()
        try:
            y = x
            for _ in range(50):
                y = (y @ x) * 0.01
            y.numpy()
            print("no error")
        except dtorch.WorkerError as e:
            print("WorkerError", round(time.time() - t, 2), "rank", e.rank, "|", e)
        t = time.time()
        dtorch.shutdown()
        print("shutdown", round(time.time() - t, 2))
    """)
    out = r.stdout
    assert "ok 262144.0" in out, out + r.stderr
    assert "workers 2" in out, out + r.stderr
    line = next(l for l in out.splitlines() if l.startswith("WorkerError"))
    seconds = float(line.split()[1])
    rank = int(line.split()[3])
    first, last = map(int, next(l for l in out.splitlines()
                                if l.startswith("victim ranks")).split()[2].split("-"))
    assert seconds < 5, line
    assert first <= rank <= last, (line, first, last)
    assert f"rank {rank}" in line, line
    shutdown = float(next(l for l in out.splitlines() if l.startswith("shutdown")).split()[1])
    assert shutdown < 2, out
    assert wait_gone(worker_pids() - before, 5), "worker processes left behind"


def test_script_that_dies_leaves_no_worker_behind():
    before = worker_pids()
    r = run_script("""
        import dtorch
        mesh = dtorch.init_device_mesh("cpu", (2, 2))
        x = dtorch.ones(4, 4, device_mesh=mesh)
        x.numpy()
        raise SystemExit("boom")
    """)
    assert "boom" in r.stderr
    assert wait_gone(worker_pids() - before, 5), "worker processes left behind"


def test_connects_to_workers_started_by_hand():
    import socket
    from dtorch import _runtime

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    exe = _runtime._worker_executable()
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([exe, "--listen", f"tcp://127.0.0.1:{p}", "--token", "s3cret",
                               "--ranks", r, "--world-size", "4"])
             for p, r in zip(ports, ["0-1", "2-3"])]
    try:
        r = run_script(f"""
            import os, numpy as np, dtorch
            from dtorch import Shard
            os.environ["DTORCH_WORKERS"] = "tcp://127.0.0.1:{ports[0]},tcp://127.0.0.1:{ports[1]}"
            os.environ["DTORCH_TOKEN"] = "s3cret"
            dtorch.init()
            mesh = dtorch.init_device_mesh("cpu", (2, 2))
            a = np.arange(12.0, dtype=np.float32).reshape(4, 3)
            x = dtorch.tensor(a, device_mesh=mesh, placements=[Shard(0), Shard(1)])
            print("world", dtorch._C.world_size(), "ok", np.allclose((x @ x.t()).numpy(), a @ a.T))
            dtorch.shutdown()
        """)
        assert "world 4 ok True" in r.stdout, r.stdout + r.stderr
        for p in procs:
            p.wait(timeout=5)  # served their one controller, then exited
    finally:
        for p in procs:
            p.kill()
