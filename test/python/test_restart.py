"""dtorch.restart() after a worker failure, in the same Python session: the
lost worker processes are replaced, tensors with a piece on a replaced rank
raise LostTensorError when used, the others keep their values, new tensors,
collectives and cached programs work on every rank, and a training loop
that restores its parameters goes on with the same losses as a run without
the fault. Each case runs in its own interpreter; every worker process it
saw (the replacements too) must be gone after its shutdown."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import backend_name, subprocess_env

needs_workers = pytest.mark.skipif(backend_name() != "cluster", reason="needs worker processes")

# Helpers for the child scripts: the worker processes of this interpreter,
# the ranks each hosts, and a kill that returns the victim's ranks.
PRELUDE = """
import os, signal, subprocess, time
import numpy as np
import dtorch
from dtorch import Partial, Replicate, Shard

SEEN = set()

def workers():
    out = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "dtorch-worker"],
                         capture_output=True, text=True).stdout.split()
    pids = {}
    for p in out:
        args = open(f"/proc/{p}/cmdline").read().split(chr(0))
        first, last = map(int, args[args.index("--ranks") + 1].split("-"))
        pids[int(p)] = (first, last)
    SEEN.update(pids)
    return pids

def kill_worker_of(rank, sig=signal.SIGKILL):
    for pid, (first, last) in workers().items():
        if first <= rank <= last:
            os.kill(pid, sig)
            return pid
    raise AssertionError(f"no worker hosts rank {rank}")

def report_seen():
    workers()
    print("seen", " ".join(str(p) for p in sorted(SEEN)))
"""


def run_script(body, timeout=120):
    script = PRELUDE + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout, cwd="/", env=subprocess_env())


def lines_starting(out, word):
    return [l for l in out.splitlines() if l.startswith(word + " ") or l == word]


def value_of(out, word, index=1):
    return lines_starting(out, word)[0].split()[index]


def assert_all_gone(out, seconds=5):
    pids = [int(p) for p in lines_starting(out, "seen")[0].split()[1:]]
    assert pids, out
    deadline = time.time() + seconds
    while time.time() < deadline:
        alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
        if not alive:
            return
        time.sleep(0.05)
    raise AssertionError(f"worker processes left behind: {alive}")


@needs_workers
def test_killed_worker_is_replaced_lost_tensors_raise_and_survivors_keep_values():
    r = run_script("""
        dtorch.init(world_size=4, num_processes=2, cache_dir="")
        mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        low = dtorch.DeviceMesh("cpu", [0, 1])      # ranks of the first process
        a = np.arange(32.0, dtype=np.float32).reshape(8, 4)
        b = np.arange(24.0, dtype=np.float32).reshape(4, 6) / 10
        x = dtorch.tensor(a, device_mesh=mesh, placements=[Shard(0), Shard(1)])
        w = dtorch.tensor(b, device_mesh=mesh, placements=[Replicate(), Shard(0)])
        keep = dtorch.tensor(a, device_mesh=low, placements=[Shard(0)])
        dtorch.manual_seed(7)
        r1 = dtorch.randn(6, device_mesh=mesh)
        print("before", np.allclose((x @ w).numpy(), a @ b), keep.numpy().sum())
        workers()
        for round, rank in ((1, 2), (2, 3)):
            kill_worker_of(rank)
            t = time.time()
            try:
                (x @ w).sum().item()
                print("noerror")
            except dtorch.WorkerError as e:
                print("error", round, f"{time.time() - t:.3f}", type(e).__name__, e.rank)
            t = time.time()
            info = dtorch.restart()
            print("restart", round, f"{time.time() - t:.3f}", info.replaced_ranks,
                  info.lost_tensors)
            print("keep", round, keep.numpy().sum(), (keep * 2).numpy().sum())
            for name, use in (("fetch", lambda: x.numpy()), ("op", lambda: x + 1),
                              ("matmul", lambda: x @ w), ("item", lambda: r1.sum().item())):
                try:
                    use()
                    print("notlost", name)
                except dtorch.LostTensorError as e:
                    print("lost", round, name, e.rank, "|", e)
            # New tensors across every rank: a matmul that redistributes and an
            # all_reduce (a Partial sum made Replicate).
            x = dtorch.tensor(a, device_mesh=mesh, placements=[Shard(0), Shard(1)])
            w = dtorch.tensor(b, device_mesh=mesh, placements=[Replicate(), Shard(0)])
            p = dtorch.tensor(a, device_mesh=mesh, placements=[Shard(0), Replicate()])
            total = p.sum(0).redistribute(mesh, [Replicate(), Replicate()])
            print("after", round, np.allclose((x @ w).numpy(), a @ b),
                  np.allclose(total.numpy(), a.sum(0)))
            r1 = dtorch.randn(6, device_mesh=mesh)
        # The seed state is the client's: the same draws as a fresh seeding.
        r2 = dtorch.randn(6, device_mesh=mesh).numpy()
        dtorch.manual_seed(7)
        draws = [dtorch.randn(6, device_mesh=mesh).numpy() for _ in range(4)]
        print("rng", np.array_equal(r2, draws[3]), np.array_equal(r1.numpy(), draws[2]))
        report_seen()
        t = time.time()
        dtorch.shutdown()
        print("shutdown", f"{time.time() - t:.3f}")
    """)
    out = r.stdout
    print(out)
    assert "before True 496.0" in out, out + r.stderr
    assert "noerror" not in out and "notlost" not in out, out + r.stderr
    for round in (1, 2):
        err = next(l for l in out.splitlines() if l.startswith(f"error {round} "))
        assert err.split()[3] in ("WorkerError", "CollectiveTimeout"), err
        assert err.split()[4] in ("2", "3"), err
        line = next(l for l in out.splitlines() if l.startswith(f"restart {round} "))
        assert "(2, 3)" in line, line
        assert float(line.split()[2]) < 5, line
        # x, w, the seeded randn and the mesh-wide results held are lost.
        assert int(line.split()[-1]) >= 3, line
        assert f"keep {round} 496.0 992.0" in out, out
        for name in ("fetch", "op", "matmul", "item"):
            lost = next(l for l in out.splitlines() if l.startswith(f"lost {round} {name} "))
            assert lost.split()[3] in ("2", "3") and "replaced" in lost, lost
        assert f"after {round} True True" in out, out + r.stderr
    assert "rng True True" in out, out
    assert float(value_of(out, "shutdown")) < 2, out
    assert_all_gone(out)


@needs_workers
def test_restart_without_a_failure_keeps_everything():
    r = run_script("""
        dtorch.init(world_size=4, num_processes=2, cache_dir="")
        mesh = dtorch.init_device_mesh("cpu", (4,))
        a = np.arange(16.0, dtype=np.float32).reshape(4, 4)
        x = dtorch.tensor(a, device_mesh=mesh, placements=[Shard(0)])
        y = (x @ x).sum()
        print("first", y.item() == (a @ a).sum())
        before = workers()
        compiles = dtorch._C.compile_count()
        info = dtorch.restart()
        print("restart", info.replaced_ranks, info.lost_tensors, workers() == before)
        print("again", (x @ x).sum().item() == (a @ a).sum(),
              dtorch._C.compile_count() == compiles)
        report_seen()
        dtorch.shutdown()
    """)
    out = r.stdout
    assert "first True" in out, out + r.stderr
    assert "restart () 0 True" in out, out + r.stderr
    assert "again True True" in out, out + r.stderr
    assert_all_gone(out)


@needs_workers
def test_stopped_worker_is_replaced_after_the_idle_timeout():
    r = run_script("""
        dtorch.init(world_size=4, num_processes=2, cache_dir="")
        mesh = dtorch.init_device_mesh("cpu", (4,))
        high = dtorch.DeviceMesh("cpu", [2, 3])
        x = dtorch.ones(8, 8, device_mesh=mesh, placements=[Shard(0)])
        keep = dtorch.full((4,), 3.0, device_mesh=high, placements=[Shard(0)])
        print("first", (x @ x).sum().item(), keep.sum().item())
        kill_worker_of(0, signal.SIGSTOP)   # cannot answer the reset
        t = time.time()
        info = dtorch.restart(idle_timeout=0.5)
        print("restart", f"{time.time() - t:.3f}", info.replaced_ranks)
        print("keep", keep.sum().item())
        try:
            x.numpy()
        except dtorch.LostTensorError as e:
            print("lost", e.rank)
        x = dtorch.ones(8, 8, device_mesh=mesh, placements=[Shard(0)])
        print("after", (x @ x).sum().item())
        report_seen()
        t = time.time()
        dtorch.shutdown()
        print("shutdown", f"{time.time() - t:.3f}")
    """)
    out = r.stdout
    print(out)
    assert "first 512.0 12.0" in out, out + r.stderr
    line = lines_starting(out, "restart")[0]
    assert line.endswith("(0, 1)"), out + r.stderr
    assert 0.5 <= float(line.split()[1]) < 5, line
    assert "keep 12.0" in out, out
    assert "lost 0" in out, out
    assert "after 512.0" in out, out + r.stderr
    assert float(value_of(out, "shutdown")) < 2, out
    assert_all_gone(out)


@needs_workers
def test_survivor_waiting_for_a_stopped_worker_is_kept():
    # Ranks 2-3's process is stopped while ranks 0-1 wait for it in a
    # collective: the silent one is replaced, the waiting one then becomes
    # idle (its peer is gone) and keeps its tensors.
    r = run_script("""
        dtorch.init(world_size=4, num_processes=2, cache_dir="")
        mesh = dtorch.init_device_mesh("cpu", (4,))
        low = dtorch.DeviceMesh("cpu", [0, 1])
        x = dtorch.ones(64, 64, device_mesh=mesh, placements=[Shard(0)])
        keep = dtorch.full((4,), 2.0, device_mesh=low, placements=[Shard(0)])
        print("first", (x @ x).sum().item(), keep.sum().item())
        kill_worker_of(3, signal.SIGSTOP)
        pending = (x @ x).sum().numpy_async()   # ranks 0-1 wait for 2-3
        time.sleep(0.3)
        t = time.time()
        info = dtorch.restart(idle_timeout=2.0)
        print("restart", f"{time.time() - t:.3f}", info.replaced_ranks)
        try:
            pending.result(timeout=10)
        except dtorch.WorkerError as e:
            print("pending", e.rank, "silent" in str(e))
        print("keep", keep.sum().item())
        x = dtorch.ones(64, 64, device_mesh=mesh, placements=[Shard(0)])
        print("after", (x @ x).sum().item())
        report_seen()
        dtorch.shutdown()
    """)
    out = r.stdout
    print(out)
    assert "first 262144.0 8.0" in out, out + r.stderr
    line = lines_starting(out, "restart")[0]
    assert line.endswith("(2, 3)"), out + r.stderr
    assert float(line.split()[1]) < 6, line
    assert "pending 2 True" in out, out
    assert "keep 8.0" in out, out
    assert "after 262144.0" in out, out + r.stderr
    assert_all_gone(out)


@needs_workers
def test_training_continues_with_the_losses_of_a_run_without_the_fault():
    # A small MLP, data parallel on "dp" and tensor parallel on "tp", trained
    # with SGD; the fault run kills a worker before step 4, restarts, puts the
    # parameters back from the numpy copies of the last finished step and
    # redoes the step.
    script = """
        import sys
        fault_at, auto = int(sys.argv[1]), sys.argv[2] == "auto"
        dtorch.init(world_size=4, num_processes=2, cache_dir="", auto_restart=auto)
        import dtorch.nn as nn
        import dtorch.nn.functional as F
        mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        dtorch.manual_seed(3)
        model = nn.Sequential(
            nn.Linear(8, 32, device_mesh=mesh, placements=[Replicate(), Shard(0)]), nn.Tanh(),
            nn.Linear(32, 4, device_mesh=mesh, placements={"weight": [Replicate(), Shard(1)]}))
        opt = dtorch.optim.SGD(model.parameters(), lr=0.2)
        rng = np.random.default_rng(0)
        batches = [(rng.normal(size=(16, 8)).astype(np.float32),
                    rng.normal(size=(16, 4)).astype(np.float32)) for _ in range(8)]
        copies = {k: v.numpy().copy() for k, v in model.state_dict().items()}
        losses, step, faulted = [], 0, 0
        while step < len(batches):
            try:
                if step == fault_at and not faulted:
                    faulted = 1
                    kill_worker_of(3)
                xb, yb = batches[step]
                x = dtorch.tensor(xb, device_mesh=mesh, placements=[Shard(0), Replicate()])
                y = dtorch.tensor(yb, device_mesh=mesh, placements=[Shard(0), Replicate()])
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
                copies = {k: v.numpy().copy() for k, v in model.state_dict().items()}
                step += 1
            except dtorch.WorkerError as e:
                if faulted > 2:
                    raise
                faulted += 1
                if not auto:
                    info = dtorch.restart()
                    print("restarted at", step, info.replaced_ranks, f"{info.seconds:.3f}")
                opt.zero_grad()
                model.load_state_dict(copies)
        print("losses", " ".join(repr(l) for l in losses))
        print("auto_restarts", dtorch._C.controller_stats()["auto_restarts"])
        report_seen()
        dtorch.shutdown()
    """
    def run(fault_at, mode="manual"):
        body = textwrap.dedent(script)
        r = subprocess.run([sys.executable, "-c", PRELUDE + body, str(fault_at), mode],
                           capture_output=True, text=True, timeout=180, cwd="/",
                           env=subprocess_env())
        assert lines_starting(r.stdout, "losses"), r.stdout + r.stderr
        assert_all_gone(r.stdout)
        return r.stdout
    clean = run(-1)
    faulty = run(4)
    print(faulty)
    assert "restarted at" not in clean, clean
    assert "restarted at 4 (2, 3)" in faulty, faulty
    want = lines_starting(clean, "losses")[0].split()[1:]
    got = lines_starting(faulty, "losses")[0].split()[1:]
    assert len(want) == 8 and float(want[-1]) < float(want[0]), clean
    assert got == want, (got, want)
    # The same with automatic restarts: the loop only restores its values.
    auto = run(4, "auto")
    assert "restarted at" not in auto and "auto_restarts 1" in auto, auto
    assert lines_starting(auto, "losses")[0].split()[1:] == want, auto


@needs_workers
def test_automatic_restart_replaces_a_dead_worker_before_the_next_request():
    r = run_script("""
        dtorch.init(world_size=4, num_processes=2, cache_dir="", auto_restart=True)
        mesh = dtorch.init_device_mesh("cpu", (4,))
        low = dtorch.DeviceMesh("cpu", [0, 1])
        x = dtorch.ones(8, 8, device_mesh=mesh, placements=[Shard(0)])
        keep = dtorch.full((4,), 2.0, device_mesh=low, placements=[Shard(0)])
        print("first", (x @ x).sum().item(), keep.sum().item())
        kill_worker_of(3)
        try:
            (x @ x).sum().item()
            print("noerror")
        except dtorch.WorkerError as e:
            print("error", type(e).__name__, e.rank)
        try:
            x * 2
            print("op notlost")
        except dtorch.LostTensorError as e:
            print("op lost", e.rank)
        y = dtorch.ones(8, 8, device_mesh=mesh, placements=[Shard(1)])
        print("after", (y @ y).sum().item(), keep.sum().item())
        try:
            x.numpy()
            print("notlost")
        except dtorch.LostTensorError as e:
            print("lost", e.rank)
        stats = dtorch._C.controller_stats()
        print("stats", stats["auto_restarts"], stats["restarts"], len(workers()))
        report_seen()
        t = time.time()
        dtorch.shutdown()
        print("shutdown", f"{time.time() - t:.3f}")
    """)
    out = r.stdout
    assert "first 512.0 8.0" in out, out + r.stderr
    err = lines_starting(out, "error")[0].split()
    assert err[1] in ("WorkerError", "LostTensorError") and err[2] in ("2", "3"), out
    assert "after 512.0 8.0" in out, out + r.stderr
    assert "op lost 2" in out and "\nlost 2" in out, out
    assert "stats 1 1 2" in out, out
    assert float(value_of(out, "shutdown")) < 2, out
    assert_all_gone(out)


@needs_workers
def test_auto_restart_is_refused_with_workers_started_by_hand():
    r = run_script("""
        try:
            dtorch.init(workers=["tcp://127.0.0.1:1"], token="t", auto_restart=True)
        except ValueError as e:
            print("refused", e)
    """)
    assert "refused auto_restart needs the embedded cluster" in r.stdout, r.stdout + r.stderr


@needs_workers
def test_restart_names_a_gone_worker_started_by_hand():
    import socket
    from dtorch import _runtime

    def free_port():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    exe = _runtime._worker_executable()
    ports = [free_port(), free_port()]
    procs = [subprocess.Popen([exe, "--listen", f"tcp://127.0.0.1:{p}", "--token", "s3cret",
                               "--ranks", r, "--world-size", "4"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for p, r in zip(ports, ["0-1", "2-3"])]
    try:
        r = run_script(f"""
            dtorch.init(workers=["tcp://127.0.0.1:{ports[0]}", "tcp://127.0.0.1:{ports[1]}"],
                        token="s3cret")
            mesh = dtorch.init_device_mesh("cpu", (4,))
            x = dtorch.ones(8, 8, device_mesh=mesh, placements=[Shard(0)])
            print("first", (x @ x).sum().item())
            os.kill({procs[1].pid}, signal.SIGKILL)
            t = time.time()
            try:
                (x @ x).sum().item()
            except dtorch.WorkerError as e:
                print("error", f"{{time.time() - t:.3f}}", e.rank, "|", e)
            time.sleep(3)  # longer than a worker waits for a silent controller
            print("survivor alive", {procs[0].pid} in [int(p) for p in os.listdir("/proc")
                                                      if p.isdigit()])
            try:
                dtorch.restart()
                print("restarted")
            except dtorch.WorkerError as e:
                print("restart failed", e.rank, "|", e)
            t = time.time()
            dtorch.shutdown()
            print("shutdown", f"{{time.time() - t:.3f}}")
        """)
        out = r.stdout
        assert "first 512.0" in out, out + r.stderr
        assert "restarted" not in out, out
        # The killed worker's closed connection names it at once (not the
        # survivor whose collective lost its peer, not after the peer
        # timeout), and the controller keeps the survivor served meanwhile.
        error = lines_starting(out, "error")[0].split()
        print(f"[hand-started worker killed] detected in {error[1]} s")
        assert float(error[1]) < 1.5 and int(error[2]) in (2, 3), out
        assert "(ranks 2-3)" in " ".join(error), out
        assert "survivor alive True" in out, out + r.stderr
        line = lines_starting(out, "restart")[0]
        assert line.startswith("restart failed"), line
        assert f"(ranks 2-3)" in line and f"tcp://127.0.0.1:{ports[1]}" in line, line
        assert "cannot be replaced" in line, line
        assert float(value_of(out, "shutdown")) < 2, out
        procs[0].wait(timeout=5)  # served its one controller, then exited
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_restart_on_the_in_process_backend_replaces_nothing():
    # Runs whatever the test backend: ranks that are threads cannot be lost.
    r = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import numpy as np
        import dtorch
        from dtorch import Shard
        dtorch.init(world_size=4, backend="inprocess", cache_dir="")
        mesh = dtorch.init_device_mesh("cpu", (4,))
        x = dtorch.ones(8, 8, device_mesh=mesh, placements=[Shard(0)])
        print("first", (x @ x).sum().item())
        info = dtorch.restart()
        print("restart", info.replaced_ranks, info.lost_tensors, dtorch._C.restart_count())
        print("again", (x @ x).sum().item())
        dtorch.shutdown()
        try:
            dtorch.restart()
        except dtorch.DTorchError as e:
            print("after shutdown", e)
    """)], capture_output=True, text=True, timeout=60, cwd="/", env=subprocess_env())
    out = r.stdout
    assert "first 512.0" in out and "again 512.0" in out, out + r.stderr
    assert "restart () 0 1" in out, out
    assert "after shutdown dtorch is not initialized" in out, out

