"""dtorch-worker placed by a launcher's variables, as a process
(docs/guide/multi-host.md): a bad value stops it at once with exit status 1
and an error naming the variable; good values place it and it says where;
explicit flags win. The mapping itself is unit-tested in
test/cpp/distributed/WorkerLaunchTest.cpp."""
import os
import socket
import subprocess
import time

import pytest

from dtorch import _runtime

WORKER = _runtime._worker_executable()
pytestmark = pytest.mark.skipif(not WORKER or not os.path.exists(WORKER),
                                reason="dtorch-worker is not built")

LAUNCH_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                    "MASTER_PORT")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "DTORCH_")) and k not in LAUNCH_VARIABLES}
    env["DTORCH_TOKEN"] = "launch-test-token"
    env.update(extra)
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_and_read(args, env, timeout=20):
    """Runs the worker until it listens (then kills it) or exits; returns
    (exit status or None when it was listening, output)."""
    p = subprocess.Popen([WORKER, *args], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.monotonic() + timeout
        for line in p.stdout:
            lines.append(line)
            if line.startswith("dtorch-worker listening on") or time.monotonic() > deadline:
                return None, "".join(lines)
        return p.wait(timeout=5), "".join(lines)
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


@pytest.mark.parametrize("env, words", [
    (dict(RANK="3", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="29400"),
     "RANK=3 is not below WORLD_SIZE=2"),
    (dict(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT="29400"),
     "LOCAL_RANK is not set"),
    (dict(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT="port"),
     "MASTER_PORT='port' is not a whole number"),
    (dict(SLURM_PROCID="0", SLURM_LOCALID="0"), "SLURM_NTASKS is not set"),
    (dict(SLURM_PROCID="0", SLURM_NTASKS="4", SLURM_LOCALID="0", SLURM_NNODES="2"),
     "DTORCH_BIND_ADDRESS"),
    (dict(SLURM_PROCID="1", SLURM_NTASKS="2", SLURM_LOCALID="0", RANK="0", WORLD_SIZE="2"),
     "SLURM_PROCID=1 vs RANK=0"),
    (dict(DTORCH_LAUNCHER="mpirun", SLURM_PROCID="0"), "must be auto, slurm, torchrun or none"),
])
def test_a_bad_variable_stops_the_worker_naming_it(env, words):
    code, out = start_and_read([], clean_env(**env))
    assert code == 1, out
    assert words in out, out


def test_slurm_variables_place_the_worker_and_flags_win():
    port = free_port()
    env = clean_env(SLURM_PROCID="1", SLURM_NTASKS="2", SLURM_LOCALID="0", SLURM_NODEID="1",
                    SLURM_TASKS_PER_NODE="1(x2)", SLURM_JOB_NODELIST="node[1-2]",
                    DTORCH_BIND_ADDRESS="127.0.0.1", DTORCH_WORKER_PORT=str(port))
    code, out = start_and_read(["--ranks-per-worker", "3"], env)
    assert code is None, out
    assert "placed by slurm (SLURM_PROCID=1 SLURM_NTASKS=2" in out, out
    assert f"ranks 3-5 of 6, listening on tcp://127.0.0.1:{port}" in out, out
    # Explicit --ranks/--world-size win over the variables.
    code, out = start_and_read(["--ranks", "0-1", "--world-size", "4"], env)
    assert code is None, out
    assert "explicit flags win: --ranks --world-size" in out, out
    assert f"listening on tcp://127.0.0.1:{port} (ranks 0-1 of 4)" in out, out
