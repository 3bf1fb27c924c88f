"""Security (docs/guide/security.md): the embedded cluster binds loopback
only and keeps its token off the workers' command lines; workers started by
hand read their token from a file or the environment; a peer with the wrong
token or CURVE key runs nothing and gets an error that names no secret; a
worker started with CURVE accepts only the controller's key. Each session
runs in its own interpreter so the shared test session is untouched."""
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import backend_name, subprocess_env

pytestmark = pytest.mark.skipif(backend_name() != "cluster", reason="needs worker processes")


def run_script(body, timeout=90, env=None):
    script = textwrap.dedent(body)
    full_env = subprocess_env()
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout, cwd="/", env=full_env)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_exe():
    from dtorch import _runtime
    return _runtime._worker_executable()


def start_worker(args, env=None, port=None):
    """A dtorch-worker started by hand on loopback, hosting ranks 0-1 of 2."""
    port = port or free_port()
    full_env = dict(os.environ)
    full_env.pop("DTORCH_TOKEN", None)
    full_env.update(env or {})
    proc = subprocess.Popen([worker_exe(), "--listen", f"tcp://127.0.0.1:{port}",
                             "--ranks", "0-1", "--world-size", "2",
                             "--controller-timeout-ms", "30000"] + args,
                            env=full_env, stderr=subprocess.PIPE, text=True)
    return proc, f"tcp://127.0.0.1:{port}"


# Runs in a fresh interpreter: the TCP sockets of this process and of its
# workers, with their state, from /proc (the same code as the test's).
SOCKETS_OF = """
import os
def sockets_of(pid):
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table, v6 in (("tcp", False), ("tcp6", True)):
        try:
            lines = open(f"/proc/{pid}/net/{table}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if inode not in inodes:
                continue
            address, port = local.split(":")
            if v6:
                ip = "v6:" + address
            else:
                ip = ".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0))
            found.append([ip, int(port, 16), "LISTEN" if state == "0A" else state])
    return found
"""


def test_embedded_cluster_is_loopback_only_and_its_token_is_not_on_any_command_line():
    r = run_script(SOCKETS_OF + """
        import json, os, subprocess, numpy as np, dtorch
        from dtorch import Shard, Replicate
        dtorch.init(world_size=4, token="tok-SECRET-4821")
        mesh = dtorch.init_device_mesh("cpu", (4,))
        a = np.arange(64.0, dtype=np.float32).reshape(8, 8)
        x = dtorch.tensor(a, device_mesh=mesh, placements=[Shard(1)])
        y = (x @ x.t()).redistribute(mesh, [Replicate()])   # collectives across processes
        ok = bool(np.allclose(y.numpy(), a @ a.T))
        kids = [int(k) for k in subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "dtorch-worker"],
                capture_output=True, text=True).stdout.split()]
        report = {"ok": ok, "client": sockets_of(os.getpid()), "workers": {}}
        for pid in kids:
            report["workers"][pid] = {
                "cmdline": open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace"),
                "environ": open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace"),
                "sockets": sockets_of(pid)}
        print("REPORT", json.dumps(report))
        dtorch.shutdown()
    """.replace("\n        ", "\n"), env={"DTORCH_HOST_SHM": "0"})
    line = next((l for l in r.stdout.splitlines() if l.startswith("REPORT")), None)
    assert line, r.stdout + r.stderr
    report = json.loads(line[len("REPORT "):])
    assert report["ok"]
    assert len(report["workers"]) == 2, report
    for pid, worker in report["workers"].items():
        assert "tok-SECRET-4821" not in worker["cmdline"], worker["cmdline"]
        assert "--token-fd" in worker["cmdline"]
        assert "tok-SECRET-4821" not in worker["environ"]
        # Controller link and Gloo data links (DTORCH_HOST_SHM=0): loopback only.
        assert worker["sockets"], f"worker {pid} has no TCP socket"
        for ip, port, state in worker["sockets"]:
            assert ip == "127.0.0.1", (pid, ip, port, state)
        # Connected groups leave no collective port open for a stray process.
        assert not [s for s in worker["sockets"] if s[2] == "LISTEN"], worker["sockets"]
    listening = [s for s in report["client"] if s[2] == "LISTEN"]
    assert listening, "the controller's socket listens"
    for ip, port, state in report["client"]:
        if state == "LISTEN":
            assert ip == "127.0.0.1", (ip, port)
    print("\nworker sockets:", {pid: w["sockets"] for pid, w in report["workers"].items()})


def test_wrong_token_runs_nothing_and_the_error_names_no_secret(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("file-tok-77\n")
    proc, address = start_worker(["--token-file", str(token_file)])
    try:
        r = run_script(f"""
            import time, dtorch
            t = time.time()
            try:
                dtorch.init(workers=["{address}"], token="wrong-guess-55")
                print("no error")
            except dtorch.WorkerError as e:
                print("WorkerError", round(time.time() - t, 2), "|", e)
        """)
        line = next((l for l in r.stdout.splitlines() if l.startswith("WorkerError")), None)
        assert line, r.stdout + r.stderr
        assert "wrong token" in line, line
        assert "wrong-guess-55" not in line and "file-tok-77" not in line, line
        assert float(line.split()[1]) < 10, line
        assert proc.poll() is None, "the worker must stay up"
        # The right token (from a file named by the environment) is served.
        r = run_script(f"""
            import numpy as np, dtorch
            dtorch.init(workers=["{address}"])
            mesh = dtorch.init_device_mesh("cpu", (2,))
            x = dtorch.ones(4, 4, device_mesh=mesh, placements=[dtorch.Shard(0)])
            print("sum", (x @ x).sum().item())
            dtorch.shutdown()
        """, env={"DTORCH_TOKEN_FILE": str(token_file)})
        assert "sum 64.0" in r.stdout, r.stdout + r.stderr
        proc.wait(timeout=10)
        assert "file-tok-77" not in proc.stderr.read()
    finally:
        proc.kill()


def test_worker_takes_its_token_from_the_environment_and_warns_about_argv():
    proc, address = start_worker([], env={"DTORCH_TOKEN": "env-tok-31"})
    try:
        r = run_script(f"""
            import dtorch
            dtorch.init(workers=["{address}"], token="env-tok-31")
            mesh = dtorch.init_device_mesh("cpu", (2,))
            print("sum", dtorch.ones(6, device_mesh=mesh).sum().item())
            dtorch.shutdown()
        """)
        assert "sum 6.0" in r.stdout, r.stdout + r.stderr
        proc.wait(timeout=10)
    finally:
        proc.kill()
    proc, _ = start_worker(["--token", "argv-tok"])
    try:
        deadline = time.time() + 20
        lines = []
        while time.time() < deadline:
            line = proc.stderr.readline()
            lines.append(line)
            if "warning" in line or not line:
                break
        warning = next((l for l in lines if "warning" in l), "")
        assert "--token puts the secret on the command line" in warning, lines
        assert "argv-tok" not in "".join(lines)
    finally:
        proc.kill()
        proc.wait()


def test_curve_worker_serves_only_the_controllers_key(tmp_path):
    import dtorch
    controller_public = dtorch.generate_curve_keypair(str(tmp_path / "controller"))
    assert len(controller_public) == 40
    assert oct(os.stat(tmp_path / "controller.key").st_mode & 0o777) == "0o600"
    dtorch.generate_curve_keypair(str(tmp_path / "stranger"))
    out = subprocess.run([worker_exe(), "--generate-curve-keypair", str(tmp_path / "worker")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and (tmp_path / "worker.pub").exists(), out.stderr
    proc, address = start_worker(
        ["--curve-secret-key-file", str(tmp_path / "worker.key"),
         "--curve-controller-public-key-file", str(tmp_path / "controller.pub")],
        env={"DTORCH_TOKEN": "curve-tok"})

    def attempt(curve):
        r = run_script(f"""
            import time, dtorch
            t = time.time()
            try:
                dtorch.init(workers=["{address}"], token="curve-tok", curve={curve!r})
                mesh = dtorch.init_device_mesh("cpu", (2,))
                print("sum", dtorch.ones(4, device_mesh=mesh).sum().item())
                dtorch.shutdown()
            except dtorch.WorkerError as e:
                print("WorkerError", round(time.time() - t, 2), "|", e)
        """)
        return r.stdout + r.stderr

    try:
        stranger = attempt({"secret_key_file": str(tmp_path / "stranger.key"),
                            "worker_public_key_files": [str(tmp_path / "worker.pub")]})
        assert "WorkerError" in stranger and "refused this side's CURVE key" in stranger, stranger
        plain = attempt(None)
        assert "WorkerError" in plain and ("mechanism mismatch" in plain
                                           or "do not match" in plain), plain
        wrong_server = attempt({"secret_key_file": str(tmp_path / "controller.key"),
                                "worker_public_key_files": [str(tmp_path / "stranger.pub")]})
        assert "WorkerError" in wrong_server and "handshake" in wrong_server, wrong_server
        for text in (stranger, plain, wrong_server):
            print("\n" + text.strip())
            seconds = float(text.split("WorkerError", 1)[1].split()[0])
            assert seconds < 10, text
            assert "curve-tok" not in text
        assert proc.poll() is None, "the worker must stay up"
        good = attempt({"secret_key_file": str(tmp_path / "controller.key"),
                        "worker_public_key_files": [str(tmp_path / "worker.pub")]})
        assert "sum 4.0" in good, good
        proc.wait(timeout=10)
    finally:
        proc.kill()


def test_curve_settings_are_checked_before_connecting(tmp_path):
    import dtorch
    with pytest.raises(ValueError, match="workers started by hand"):
        dtorch._runtime._curve_keys({"secret_key_file": "x", "worker_public_key_files": ["y"]}, [])
    # Keys in the environment are for workers started by hand: the embedded
    # cluster ignores them.
    os.environ["DTORCH_CURVE_SECRET_KEY_FILE"] = str(tmp_path / "absent.key")
    try:
        assert dtorch._runtime._curve_keys(None, []) == ("", [])
    finally:
        del os.environ["DTORCH_CURVE_SECRET_KEY_FILE"]
    with pytest.raises(ValueError, match="one per worker"):
        dtorch._runtime._curve_keys({"secret_key_file": "x", "worker_public_key_files": ["a", "b"]},
                                    ["tcp://h:1", "tcp://h:2", "tcp://h:3"])
    (tmp_path / "bad.key").write_text("hunter2-not-a-key\n")
    (tmp_path / "ok.pub").write_text(dtorch.generate_curve_keypair(str(tmp_path / "k")) + "\n")
    with pytest.raises(dtorch.DTorchError) as info:
        dtorch._runtime._curve_keys({"secret_key_file": str(tmp_path / "bad.key"),
                                     "worker_public_key_files": [str(tmp_path / "ok.pub")]},
                                    ["tcp://h:1"])
    assert "bad.key" in str(info.value) and "hunter2" not in str(info.value)
