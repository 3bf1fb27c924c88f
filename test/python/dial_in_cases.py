"""Workers that dial in to the controller (docs/guide/multi-host.md, "Workers
that dial in"): ``dtorch.init(listen=..., world_size=N)`` listens, each
``dtorch-worker --controller HOST:PORT`` (or ``--dial-in`` with torchrun's
MASTER_ADDR/MASTER_PORT, or placed by Slurm's variables) connects, and the
session runs as with listed workers. Every bad input fails at the point of
the mistake, naming it. The admission logic itself is unit-tested in
test/cpp/distributed/DialInTest.cpp.

These cases shut the session down and start their own, so test_dial_in.py
runs them in a pytest process of their own: the test session of conftest
stays untouched."""
import os
import signal
import socket
import subprocess
import threading
import time

import numpy as np
import pytest

import dtorch
from dtorch import Replicate, Shard, _C, _runtime

WORKER = _runtime._worker_executable()
pytestmark = pytest.mark.skipif(not WORKER or not os.path.exists(WORKER),
                                reason="dtorch-worker is not built")

TOKEN = "dial-in-test-token"
LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                    "MASTER_PORT")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "DTORCH_")) and k not in LAUNCH_VARIABLES}
    env["DTORCH_TOKEN"] = TOKEN
    env.update(extra)
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Workers:
    """Worker processes of one test; all are killed at the end."""

    def __init__(self):
        self.procs = []

    def start(self, args, env=None, **extra_env):
        p = subprocess.Popen([WORKER, *args], env=env or clean_env(**extra_env),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.procs.append(p)
        return p

    def finish(self, p, timeout=15):
        """Exit status and output of `p` once it exits."""
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


@pytest.fixture
def workers():
    dtorch.shutdown()
    w = Workers()
    yield w
    dtorch.shutdown()
    w.close()


def compute(world):
    """A matmul that needs redistribution, a reduction and an all_reduce;
    the values fetched (whole)."""
    mesh = dtorch.init_device_mesh("cpu", (2, world // 2) if world >= 4 else (world,))
    dtorch.manual_seed(7)
    if mesh.ndim == 2:
        x = dtorch.randn(8, 12, device_mesh=mesh, placements=[Shard(0), Shard(1)])
        w = dtorch.randn(12, 6, device_mesh=mesh, placements=[Replicate(), Shard(0)])
    else:
        x = dtorch.randn(8, 12, device_mesh=mesh, placements=[Shard(1)])
        w = dtorch.randn(12, 6, device_mesh=mesh, placements=[Shard(0)])
    y = (x @ w).relu()
    total = y.sum(dim=0)
    reduced = y.redistribute(mesh, [Replicate()] * mesh.ndim)
    return [x.numpy(), w.numpy(), y.numpy(), total.numpy(), reduced.numpy()]


def listed_workers_result(workers, world, per_worker):
    """The same computation on workers the controller dials (--listen)."""
    addresses = []
    for first in range(0, world, per_worker):
        port = free_port()
        address = f"tcp://127.0.0.1:{port}"
        workers.start(["--listen", address, "--ranks", f"{first}-{first + per_worker - 1}",
                       "--world-size", str(world)])
        addresses.append(address)
    dtorch.init(workers=addresses, token=TOKEN)
    try:
        return compute(world)
    finally:
        dtorch.shutdown()


@pytest.mark.parametrize("world, per_worker", [(2, 1), (4, 2), (4, 1)])
def test_dialed_in_workers_compute_as_listed_workers(workers, world, per_worker):
    expected = listed_workers_result(workers, world, per_worker)
    port = free_port()
    procs = [workers.start(["--controller", f"127.0.0.1:{port}",
                            "--ranks", f"{first}-{first + per_worker - 1}",
                            "--world-size", str(world)])
             for first in range(0, world, per_worker)]
    dtorch.init(listen=f"127.0.0.1:{port}", world_size=world, token=TOKEN)
    assert _C.world_size() == world
    got = compute(world)
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)
    dtorch.shutdown()
    for p in procs:
        code, out = workers.finish(p)
        assert code == 0, out
        assert f"dialing the controller at tcp://127.0.0.1:{port}" in out, out


def test_torchrun_variables_dial_master_addr_and_port(workers):
    """RANK/WORLD_SIZE/LOCAL_RANK place each worker, MASTER_ADDR:MASTER_PORT
    is the controller (torchrun's meaning); the world size is learned from
    the workers when init is not told it."""
    port = free_port()
    for rank in range(2):
        workers.start(["--dial-in", "--ranks-per-worker", "2"], RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    dtorch.init(listen=f":{port}", token=TOKEN)
    assert _C.world_size() == 4
    mesh = dtorch.init_device_mesh("cpu", (4,))
    x = dtorch.ones(16, device_mesh=mesh, placements=[Shard(0)])
    assert (x * 3).sum().item() == 48.0


def test_slurm_variables_and_the_environment_dial_the_controller(workers):
    """srun-style placement; DTORCH_CONTROLLER alone selects dial-in."""
    port = free_port()
    for task in range(2):
        workers.start([], SLURM_PROCID=str(task), SLURM_NTASKS="2", SLURM_LOCALID=str(task),
                      SLURM_NODEID="0", SLURM_NNODES="1", SLURM_NTASKS_PER_NODE="2",
                      DTORCH_CONTROLLER=f"localhost:{port}")
    dtorch.init(listen=f"127.0.0.1:{port}", world_size=2, token=TOKEN)
    mesh = dtorch.init_device_mesh("cpu", (2,))
    x = dtorch.ones(4, 3, device_mesh=mesh, placements=[Shard(1)])
    assert x.sum().item() == 12.0


def test_the_controller_may_start_before_the_workers(workers):
    port = free_port()

    def start_late():
        time.sleep(0.5)
        for first in (0, 1):
            workers.start(["--controller", f"127.0.0.1:{port}", "--ranks", str(first),
                           "--world-size", "2"])

    threading.Thread(target=start_late).start()
    dtorch.init(listen=f"127.0.0.1:{port}", world_size=2, token=TOKEN, admission_timeout=30)
    assert dtorch.ones(6).sum().item() == 6.0


def start_refused(workers, port, world_size, good, bad, **init):
    """Starts the `good` workers, then the `bad` one; init must fail."""
    good_procs = [workers.start(["--controller", f"127.0.0.1:{port}", *args]) for args in good]
    result = {}

    def run_init():
        try:
            dtorch.init(listen=f"127.0.0.1:{port}", world_size=world_size, token=TOKEN,
                        admission_timeout=20, **init)
        except dtorch.WorkerError as e:
            result["error"] = e

    t = threading.Thread(target=run_init)
    t.start()
    time.sleep(0.3)  # the good ones are admitted first
    bad_proc = workers.start(["--controller", f"127.0.0.1:{port}", *bad[0]], **bad[1])
    t.join(timeout=30)
    assert not t.is_alive()
    assert "error" in result, "init did not fail"
    return result["error"], good_procs, bad_proc


@pytest.mark.parametrize("world, good, bad, words", [
    (4, [["--ranks", "0-1", "--world-size", "4"]], (["--ranks", "1-2", "--world-size", "4"], {}),
     ["duplicate rank: rank 1 is already held by the worker", "(ranks 0-1)", "(ranks 1-2)"]),
    (2, [["--ranks", "0", "--world-size", "2"]], (["--ranks", "1", "--world-size", "3"], {}),
     ["world size mismatch: it was started for a world of 3 ranks, "
      "the controller's world size is 2"]),
    (2, [["--ranks", "0", "--world-size", "2"]],
     (["--ranks", "1", "--world-size", "2"], {"DTORCH_TOKEN": "another-token"}),
     ["authentication failed: wrong token", "(rank 1)"]),
])
def test_a_bad_worker_fails_the_start_naming_it(workers, world, good, bad, words):
    port = free_port()
    error, good_procs, bad_proc = start_refused(workers, port, world, good, bad)
    message = str(error)
    for w in words:
        assert w in message, message
    assert "cluster start failed" in message
    assert f"pid {bad_proc.pid}" in message, message
    # The refused worker is told why and exits; so do the admitted ones.
    code, out = workers.finish(bad_proc)
    assert code == 2, out
    assert words[0] in out, out
    for p in good_procs:
        code, out = workers.finish(p)
        assert code == 2, out
        assert "the controller's start failed" in out, out


def test_workers_disagreeing_on_the_world_size_fail_the_start(workers):
    """Without world_size, the first worker's world counts."""
    port = free_port()
    error, _, _ = start_refused(workers, port, None,
                                [["--ranks", "0-1", "--world-size", "4"]],
                                (["--ranks", "2", "--world-size", "3"], {}))
    assert "world size mismatch: it was started for a world of 3 ranks, the controller's " \
           "world size is 4 (the world of host" in str(error), str(error)


def test_a_rank_outside_the_world_stops_the_worker_and_the_start_names_it(workers):
    port = free_port()
    workers.start(["--controller", f"127.0.0.1:{port}", "--ranks", "0", "--world-size", "2"])
    bad = workers.start(["--dial-in"], RANK="2", WORLD_SIZE="2", LOCAL_RANK="0",
                        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    code, out = workers.finish(bad)
    assert code == 1 and "RANK=2 is not below WORLD_SIZE=2" in out, out
    bad = workers.start(["--controller", f"127.0.0.1:{port}", "--ranks", "2",
                         "--world-size", "2"])
    code, out = workers.finish(bad)
    assert code == 1 and "--ranks must be a non-empty range inside [0, world-size)" in out, out
    start = time.monotonic()
    with pytest.raises(dtorch.WorkerError) as info:
        dtorch.init(listen=f"127.0.0.1:{port}", world_size=2, token=TOKEN, admission_timeout=1.5)
    assert 1.4 < time.monotonic() - start < 10
    message = str(info.value)
    assert "the admission ended after 1500 ms waiting for workers to dial in" in message, message
    assert type(info.value) is dtorch.WorkerError, type(info.value)
    assert "rank 1 of 2 never arrived (1 worker(s) admitted: host" in message, message
    assert "(rank 0)" in message, message
    assert info.value.rank == 1


def test_no_worker_at_all_times_out_naming_every_rank(workers):
    port = free_port()
    with pytest.raises(dtorch.WorkerError, match=r"ranks 0-3 of 4 never arrived \(no worker"):
        dtorch.init(listen=f"127.0.0.1:{port}", world_size=4, token=TOKEN, admission_timeout=1)


def test_a_worker_that_dies_after_admission_is_named(workers):
    port = free_port()
    procs = [workers.start(["--controller", f"127.0.0.1:{port}", "--ranks", f"{2 * i}-{2 * i + 1}",
                            "--world-size", "4"]) for i in range(2)]
    dtorch.init(listen=f"127.0.0.1:{port}", world_size=4, token=TOKEN)
    mesh = dtorch.init_device_mesh("cpu", (4,))
    x = dtorch.ones(8, device_mesh=mesh, placements=[Shard(0)])
    assert x.sum().item() == 8.0
    os.kill(procs[1].pid, signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(dtorch.WorkerError) as info:
        for _ in range(100):
            (x * 2).sum().item()
            time.sleep(0.05)
    elapsed = time.monotonic() - start
    assert elapsed < 5, elapsed
    message = str(info.value)
    assert info.value.rank in (2, 3), message
    assert f"worker pid {procs[1].pid} (ranks 2-3)" in message, message


def test_a_dialing_worker_without_the_controller_address_is_refused_at_start(workers):
    p = workers.start(["--dial-in", "--ranks", "0", "--world-size", "1"])
    code, out = workers.finish(p)
    assert code == 1 and "MASTER_ADDR is not set: a dialing worker" in out, out
    p = workers.start(["--controller", "nohost", "--ranks", "0", "--world-size", "1"])
    code, out = workers.finish(p)
    assert code == 1 and "--controller='nohost' is not the controller's HOST:PORT" in out, out


def test_a_worker_gives_up_when_no_controller_answers(workers):
    p = workers.start(["--controller", f"127.0.0.1:{free_port()}", "--ranks", "0",
                       "--world-size", "1", "--controller-wait-ms", "500"])
    code, out = workers.finish(p)
    assert code == 3 and "did not answer for 500 ms" in out, out


def test_init_checks_its_listen_arguments(monkeypatch):
    dtorch.shutdown()
    monkeypatch.delenv("DTORCH_TOKEN", raising=False)
    monkeypatch.delenv("DTORCH_TOKEN_FILE", raising=False)
    with pytest.raises(ValueError, match="need their token"):
        dtorch.init(listen="127.0.0.1:29500", world_size=2)
    with pytest.raises(ValueError, match="not both"):
        dtorch.init(listen="127.0.0.1:29500", workers=["tcp://127.0.0.1:1"], token="t")
    with pytest.raises(ValueError, match="HOST:PORT"):
        dtorch.init(listen="127.0.0.1", token="t")
    with pytest.raises(ValueError, match="auto_restart"):
        dtorch.init(listen=":29500", token="t", auto_restart=True)


def test_curve_admits_only_the_workers_keys(workers, tmp_path):
    """With curve=, the listening controller is the CURVE server and admits
    the workers' public keys; a worker with another key fails the start,
    naming the handshake."""
    if not _C.curve_available():
        pytest.skip("the installed libzmq has no CURVE support")
    for name in ("controller", "worker", "stranger"):
        dtorch.generate_curve_keypair(str(tmp_path / name))
    curve = {"secret_key_file": str(tmp_path / "controller.key"),
             "worker_public_key_files": [str(tmp_path / "worker.pub")]}

    def start(key, port, first):
        return workers.start(["--controller", f"127.0.0.1:{port}", "--ranks", str(first),
                              "--world-size", "2",
                              "--curve-secret-key-file", str(tmp_path / f"{key}.key"),
                              "--curve-controller-public-key-file",
                              str(tmp_path / "controller.pub")])

    port = free_port()
    start("worker", port, 0)
    start("worker", port, 1)
    dtorch.init(listen=f"127.0.0.1:{port}", world_size=2, token=TOKEN, curve=curve)
    assert dtorch.ones(4).sum().item() == 4.0
    dtorch.shutdown()

    port = free_port()
    start("worker", port, 0)
    start("stranger", port, 1)
    start_time = time.monotonic()
    with pytest.raises(dtorch.WorkerError, match="failed its handshake") as info:
        dtorch.init(listen=f"127.0.0.1:{port}", world_size=2, token=TOKEN, curve=curve,
                    admission_timeout=20)
    assert time.monotonic() - start_time < 10
    assert "its CURVE public key is not one of the workers' keys this controller admits" in \
        str(info.value), str(info.value)


def test_a_worker_that_dies_before_the_world_is_complete_can_be_replaced(workers):
    """Its closed connection frees its ranks: a worker started again for
    them is admitted (as a restarted pod would be)."""
    port = free_port()
    result = {}

    def run_init():
        try:
            dtorch.init(listen=f"127.0.0.1:{port}", world_size=2, token=TOKEN,
                        admission_timeout=30)
            result["ok"] = True
        except Exception as e:  # reported below
            result["error"] = e

    t = threading.Thread(target=run_init)
    t.start()
    first = workers.start(["--controller", f"127.0.0.1:{port}", "--ranks", "0",
                           "--world-size", "2"])
    time.sleep(1.0)  # admitted, waiting for rank 1
    first.kill()
    first.wait()
    time.sleep(0.3)
    again = workers.start(["--controller", f"127.0.0.1:{port}", "--ranks", "0",
                           "--world-size", "2"])
    workers.start(["--controller", f"127.0.0.1:{port}", "--ranks", "1", "--world-size", "2"])
    t.join(timeout=40)
    assert result.get("ok"), result
    assert _C.world_size() == 2
    assert dtorch.ones(6).sum().item() == 6.0
    dtorch.shutdown()
    code, out = workers.finish(again)
    assert code == 0, out


def test_workers_waiting_for_a_controller_that_died_join_the_next_one(workers):
    """A controller stopped during the admission (killed, or its user
    pressed Ctrl-C): its waiting workers connect again to the next one on
    the same address and say Hello again."""
    import sys
    port = free_port()
    waiting = [workers.start(["--controller", f"127.0.0.1:{port}", "--ranks", str(rank),
                              "--world-size", "3"]) for rank in (0, 1)]
    first = subprocess.Popen(
        [sys.executable, "-c",
         f"import dtorch; dtorch.init(listen='127.0.0.1:{port}', world_size=3, "
         f"token={TOKEN!r}, admission_timeout=60)"],
        env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(dtorch.__file__))),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # ranks 0 and 1 admitted there; rank 2 never comes
    first.kill()
    first.wait()
    workers.start(["--controller", f"127.0.0.1:{port}", "--ranks", "2", "--world-size", "3"])
    dtorch.init(listen=f"127.0.0.1:{port}", world_size=3, token=TOKEN, admission_timeout=30)
    mesh = dtorch.init_device_mesh("cpu", (3,))
    assert dtorch.ones(6, device_mesh=mesh, placements=[Shard(0)]).sum().item() == 6.0
    dtorch.shutdown()
    for p in waiting:
        code, out = workers.finish(p)
        assert code == 0, out
