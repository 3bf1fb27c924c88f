"""Workers on several "hosts": Linux network namespaces joined by veth pairs,
each two hosts directly and each host to the root namespace
(docs/guide/multi-host.md). Every test creates its namespaces, links and
addresses (10.213.X.0/24, X picked free, names unique per run) and removes
them, also on failure. Workers run inside
the namespaces (`ip netns exec NS dtorch-worker ...`, by hand, through Slurm's
or torchrun's variables), the client (controller) in the root namespace in
a child interpreter. Namespaces share the kernel, /dev/shm and the host name:
the workers' host identity differs by network namespace, so groups across
them go through Gloo over the veth links, bound to each host's address.

Shown: a 2x2 mesh on 2 hosts computes a matmul that needs redistribution, a
reduction and an all_reduce exactly as numpy and as one host does; 3 hosts
(workers placed by Slurm and torchrun variables, two processes of one host
on shared memory); a host whose link goes down mid-run becomes a WorkerError
naming the host's address within 5 s (the time is printed); workers on 2
hosts that dial a controller in the root namespace compute the same, and
such a host whose link goes down is named within 5 s too; shutdown leaves
no process and no namespace behind. Skipped with the reason when not root or
without `ip netns`."""
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from conftest import subprocess_env
from dtorch import _runtime

WORKER = _runtime._worker_executable()
PORT = 29500
LINK_DOWN_BOUND_S = 5.0


def _skip_reason():
    if os.geteuid() != 0:
        return "needs root to create network namespaces (ip netns)"
    if not shutil.which("ip"):
        return "the ip command (iproute2) is not installed"
    if not WORKER or not os.path.exists(WORKER):
        return "dtorch-worker is not built"
    probe = f"dtmhprobe{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns is unavailable: {made.stderr.strip()}"
    try:
        veth = subprocess.run(["ip", "-n", probe, "link", "add", "name", "probea", "type", "veth", "peer", "name", "probeb"],
                              capture_output=True, text=True)
        if veth.returncode != 0:
            return f"veth pairs are unavailable: {veth.stderr.strip()}"
        if not shutil.which("ss"):
            return "the ss command (iproute2) is not installed"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


SKIP_REASON = _skip_reason()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


def ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def free_subnet():
    """A 10.213.X.0/24 that no interface of the root namespace uses."""
    used = set(int(m) for m in re.findall(r"inet 10\.213\.(\d+)\.", ip("-4", "addr")))
    choices = [x for x in range(1, 255) if x not in used]
    return random.choice(choices)


class Hosts:
    """`count` network namespaces joined by veth pairs, with no bridge and
    no forwarding in the root namespace (so the host's firewall and
    br_netfilter never see their traffic): every two hosts share a pair of
    their own, and each host has a pair to the root namespace for the
    client. Host i has the address 10.213.X.(i+2) on each of its links (a
    /32 with a route per peer), the root namespace 10.213.X.1 on its ends.
    Everything is removed by close(), which kills the processes started in
    them first."""

    def __init__(self, count):
        tag = f"{os.getpid() % 100000:05d}{random.randrange(36 ** 2):03x}"[-7:]
        self.names = [f"dtmh{tag}{i}" for i in range(count)]
        self.links = [f"dtmv{tag}{i}" for i in range(count)]  # root-side veth ends
        self.subnet = free_subnet()
        self.root_address = f"10.213.{self.subnet}.1"
        self.addresses = [f"10.213.{self.subnet}.{i + 2}" for i in range(count)]
        self.processes = []
        try:
            for ns in self.names:
                ip("netns", "add", ns)
                ip("-n", ns, "link", "set", "lo", "up")
            for i, (ns, link, address) in enumerate(zip(self.names, self.links, self.addresses)):
                # The uplink to the client: "uplink" in the host, `link` in root.
                ip("link", "add", link, "type", "veth", "peer", "name", "uplink", "netns", ns)
                ip("addr", "add", f"{self.root_address}/32", "dev", link)
                ip("link", "set", "dev", link, "up")
                ip("route", "add", f"{address}/32", "dev", link)
                self._address_link(ns, "uplink", address, self.root_address)
                # A link to every host before it: "pJ" in host i, "pI" in j.
                for j in range(i):
                    ip("-n", ns, "link", "add", f"p{j}", "type", "veth", "peer", "name", f"p{i}",
                       "netns", self.names[j])
                    self._address_link(ns, f"p{j}", address, self.addresses[j])
                    self._address_link(self.names[j], f"p{i}", self.addresses[j], address)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _address_link(ns, device, address, peer):
        ip("-n", ns, "addr", "add", f"{address}/32", "dev", device)
        ip("-n", ns, "link", "set", "dev", device, "up")
        ip("-n", ns, "route", "add", f"{peer}/32", "dev", device)

    def host_links(self, host):
        """Every link of host `host`, as (namespace or None for root,
        device) pairs."""
        ns = self.names[host]
        return [(None, self.links[host])] + [
            (ns, f"p{j}") for j in range(len(self.names)) if j != host]

    def set_links(self, host, state):
        """`ip link set ... STATE` commands for every link of `host`."""
        return [["ip"] + (["-n", ns] if ns else []) + ["link", "set", "dev", dev, state]
                for ns, dev in self.host_links(host)]

    def start(self, host, args, env=None, name="worker"):
        """Starts dtorch-worker ARGS inside host `host`'s namespace; its
        output goes to a file read by output()."""
        log = tempfile.NamedTemporaryFile("w+", prefix=f"dtmh-{name}-", suffix=".log", delete=False)
        p = subprocess.Popen(["ip", "netns", "exec", self.names[host], WORKER, *args],
                             stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, **(env or {})))
        p.log = log
        self.processes.append(p)
        return p

    @staticmethod
    def output(p):
        p.log.flush()
        with open(p.log.name) as f:
            return f.read()

    def wait_listening(self, timeout=20):
        """Waits until every started worker printed that it listens."""
        deadline = time.monotonic() + timeout
        for p in self.processes:
            while "listening on" not in self.output(p):
                if p.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"worker did not start: {self.output(p)}")
                time.sleep(0.05)

    def processes_inside(self):
        """Pids of every process still running in the hosts' namespaces."""
        return {ns: ip("netns", "pids", ns).split() for ns in self.names
                if ip("netns", "pids", ns, check=False).split()}

    def leftovers(self):
        namespaces = set(ip("netns", "list").split())
        links = ip("-o", "link", "show")
        return ([n for n in self.names if n in namespaces]
                + [l for l in self.links if f" {l}:" in links or f" {l}@" in links])

    def close(self):
        # Links back up first: sockets of a host whose links were cut would
        # otherwise keep retransmitting (and keep its namespace alive,
        # unnamed) for minutes; this way their peers answer and they close.
        for host in range(len(self.names)):
            for command in self.set_links(host, "up"):
                subprocess.run(command, capture_output=True)
        for p in self.processes:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.log.close()
            os.unlink(p.log.name)
        for link in self.links:
            ip("link", "del", link, check=False)  # both ends of the pair
        for ns in self.names:
            ip("netns", "del", ns, check=False)  # with its links to the others


@pytest.fixture
def hosts():
    made = []

    def make(count):
        h = Hosts(count)
        made.append(h)
        return h

    try:
        yield make
    finally:
        for h in made:
            h.close()
            assert not h.leftovers(), f"left behind: {h.leftovers()}"


@pytest.fixture
def token_file():
    fd, path = tempfile.mkstemp(prefix="dtmh-token-")
    with os.fdopen(fd, "w") as f:
        f.write(f"multihost-{random.getrandbits(64):x}\n")
    try:
        yield path
    finally:
        os.unlink(path)


def token_of(path):
    with open(path) as f:
        return f.read().strip()


# The computation compared across layouts: integer-valued float32 inputs,
# so every sum is exact and any correct order of reduction gives the same
# bits as numpy.
COMPUTE = """
import json, sys, time
import numpy as np
import dtorch
from dtorch import Partial, Replicate, Shard

mesh = dtorch.init_device_mesh("cpu", MESH_SHAPE, mesh_dim_names=MESH_NAMES)
rng = np.random.default_rng(7)
a = rng.integers(-4, 5, size=(8, 12)).astype(np.float32)
b = rng.integers(-4, 5, size=(12, 6)).astype(np.float32)
out = {}
# A matmul whose operands are laid out so that it needs redistribution.
x = dtorch.distribute_tensor(a, mesh, [Shard(0), Shard(1)])
w = dtorch.distribute_tensor(b, mesh, [Replicate(), Shard(1)])
y = x @ w
out["matmul"] = y.numpy().tolist()
out["matmul_ir"] = dtorch.last_ir("redistributed")
# A reduction over a sharded dim.
out["sum"] = x.sum(dim=1).numpy().tolist()
# An all_reduce: a partial sum made replicated.
xs = dtorch.distribute_tensor(a, mesh, [Replicate(), Shard(1)])
ws = dtorch.distribute_tensor(b, mesh, [Replicate(), Shard(0)])
p = xs @ ws
out["partial_placements"] = str(p.placements)
r = p.redistribute(mesh, [Replicate(), Replicate()])
out["all_reduce"] = r.numpy().tolist()
out["all_reduce_ir"] = dtorch.last_ir("redistributed")
out["want_matmul"] = (a @ b).tolist()
out["want_sum"] = a.sum(axis=1).tolist()
"""


def run_client(prelude, body, timeout=60, inspect=None):
    """Runs a client script in a fresh interpreter (the root namespace) and
    returns its stdout, or fails with its output. With `inspect`, the script
    stops at each `pause()` (its session still up) until inspect(stdout so
    far) returned."""
    helper = ("import sys\n"
              "def pause():\n"
              "    print('PAUSED', flush=True)\n"
              "    sys.stdin.readline()\n")
    script = "\n".join(textwrap.dedent(part) for part in (helper, prelude, body))
    client = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=subprocess_env())
    lines = []
    deadline = time.monotonic() + timeout
    try:
        for line in client.stdout:
            lines.append(line)
            if line.startswith("PAUSED"):
                if inspect:
                    inspect("".join(lines))
                client.stdin.write("\n")
                client.stdin.flush()
            if time.monotonic() > deadline:
                raise AssertionError("client timed out:\n" + "".join(lines))
        code = client.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    out = "".join(lines)
    assert code == 0, out
    return out


def result_of(stdout):
    line = [l for l in stdout.splitlines() if l.startswith("RESULT ")]
    assert line, stdout
    return json.loads(line[-1][len("RESULT "):])


def one_host_reference(mesh_shape, names):
    body = COMPUTE.replace("MESH_SHAPE", repr(mesh_shape)).replace("MESH_NAMES", repr(names))
    world = 1
    for n in mesh_shape:
        world *= n
    out = run_client(f"import dtorch\ndtorch.init(world_size={world}, num_processes=2)\n",
                     body + "\nprint('RESULT ' + json.dumps(out))\ndtorch.shutdown()\n")
    return result_of(out)


def gloo_peers(hosts, p, host):
    """Addresses of other hosts that worker `p` (in `host`'s namespace) has
    TCP connections with: its Gloo pairs across the veth links (the client
    is on the root namespace's address, not a host's)."""
    r = subprocess.run(["ip", "netns", "exec", hosts.names[host], "ss", "-tnpH"],
                       capture_output=True, text=True)
    peers = set()
    for line in r.stdout.splitlines():
        if f"pid={p.pid}," not in line:
            continue
        remote = line.split()[4].rsplit(":", 1)[0]
        if remote in hosts.addresses and remote != hosts.addresses[host]:
            peers.add(remote)
    return peers


def shared_memory_segments(p):
    """memfd segments of the shared-memory transport mapped by process p."""
    with open(f"/proc/{p.pid}/maps") as f:
        return {line.split()[-2] for line in f if "memfd:dtorch-hostshm" in line}


def check_computation(got, reference):
    assert got["matmul"] == got["want_matmul"], "matmul differs from numpy"
    assert got["sum"] == got["want_sum"], "sum differs from numpy"
    assert got["all_reduce"] == got["want_matmul"], "all_reduce differs from numpy"
    assert "Partial" in got["partial_placements"], got["partial_placements"]
    assert "all_reduce" in got["all_reduce_ir"], got["all_reduce_ir"]
    assert re.search(r"all_gather|all_to_all|all_reduce|reduce_scatter", got["matmul_ir"]), \
        got["matmul_ir"]
    for key in ("matmul", "sum", "all_reduce"):
        assert got[key] == reference[key], f"{key}: multi-host result differs from one host"


def test_two_hosts_compute_as_one_host(hosts, token_file):
    h = hosts(2)
    workers = [h.start(i, ["--listen", f"tcp://{h.addresses[i]}:{PORT}", "--token-file", token_file,
                           "--ranks", f"{2 * i}-{2 * i + 1}", "--world-size", "4"])
               for i in range(2)]
    h.wait_listening()
    addresses = [f"tcp://{a}:{PORT}" for a in h.addresses]
    seen = {}

    def inspect(_):
        # While the session is up: each worker's Gloo pairs connect it with
        # the other host's address (bound there, not to loopback).
        seen["peers"] = [gloo_peers(h, p, i) for i, p in enumerate(workers)]

    stdout = run_client(
        f"import dtorch\ndtorch.init(workers={addresses!r}, token={token_of(token_file)!r})\n",
        COMPUTE.replace("MESH_SHAPE", "(2, 2)").replace("MESH_NAMES", "('dp', 'tp')") + """
print("RESULT " + json.dumps(out), flush=True)
pause()
dtorch.shutdown()
""", inspect=inspect)
    got = result_of(stdout)
    check_computation(got, one_host_reference((2, 2), ("dp", "tp")))
    assert seen["peers"] == [{h.addresses[1]}, {h.addresses[0]}], seen
    # Shutdown: both workers exit on their own, with status 0.
    for p in workers:
        assert p.wait(timeout=5) == 0, h.output(p)
    assert not h.processes_inside()
    print(f"[2 hosts] 2x2 mesh on {h.addresses}: matmul, sum, all_reduce equal numpy and one host; "
          f"Gloo pairs across the link: {seen['peers']}")


def test_three_hosts_placed_by_slurm_and_torchrun_variables(hosts, token_file):
    # Host 0: two worker processes placed by Slurm variables (tasks 0 and 1
    # of 4, the node's two tasks), which use shared memory between them:
    # they share --host-id (separate `ip netns exec` calls get separate
    # mount namespaces, which the default identity tells apart). Hosts 1 and
    # 2: one process each, placed by torchrun-style variables (MASTER_ADDR
    # is the client's address: each binds the address facing it).
    # 4 processes of 2 ranks (--ranks-per-worker 2): a 2x4 mesh.
    h = hosts(3)
    token = ["--token-file", token_file, "--ranks-per-worker", "2"]
    client_address = h.root_address
    for local in range(2):
        h.start(0, token + ["--bind-address", h.addresses[0], "--host-id", "host-a"],
                env={"SLURM_PROCID": str(local), "SLURM_NTASKS": "4", "SLURM_LOCALID": str(local),
                     "SLURM_NODEID": "0", "SLURM_TASKS_PER_NODE": "2,1(x2)",
                     "SLURM_JOB_NODELIST": "hosta,hostb,hostc", "DTORCH_WORKER_PORT": str(PORT)},
                name="slurm")
    for host in (1, 2):
        h.start(host, token,
                env={"RANK": str(host + 1), "WORLD_SIZE": "4", "LOCAL_RANK": "0",
                     "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": client_address, "MASTER_PORT": str(PORT - 1)},
                name="torchrun")
    h.wait_listening()
    logs = [h.output(p) for p in h.processes]
    assert "placed by slurm" in logs[0] and "placed by torchrun" in logs[2], logs
    addresses = [f"tcp://{h.addresses[0]}:{PORT}", f"tcp://{h.addresses[0]}:{PORT + 1}",
                 f"tcp://{h.addresses[1]}:{PORT}", f"tcp://{h.addresses[2]}:{PORT}"]
    seen = {}

    def inspect(_):
        seen["segments"] = [shared_memory_segments(p) for p in h.processes]
        seen["peers"] = [gloo_peers(h, p, host)
                         for p, host in zip(h.processes, (0, 0, 1, 2))]

    stdout = run_client(
        f"import dtorch\ndtorch.init(workers={addresses!r}, token={token_of(token_file)!r})\n",
        COMPUTE.replace("MESH_SHAPE", "(2, 4)").replace("MESH_NAMES", "('dp', 'tp')") + """
print("RESULT " + json.dumps(out), flush=True)
pause()
dtorch.shutdown()
""", inspect=inspect)
    got = result_of(stdout)
    check_computation(got, one_host_reference((2, 4), ("dp", "tp")))
    # Host 0's two processes share memory segments; the others map none.
    a, b, c, d = seen["segments"]
    assert a & b and not c and not d, seen
    # Every process talks Gloo with the other hosts only.
    others = [set(h.addresses) - {h.addresses[host]} for host in (0, 0, 1, 2)]
    assert all(peers and peers <= allowed for peers, allowed in zip(seen["peers"], others)), seen
    for p in h.processes:
        assert p.wait(timeout=5) == 0, h.output(p)
    assert not h.processes_inside()
    print(f"[3 hosts] 2x4 mesh on {h.addresses} (Slurm and torchrun placements) equals numpy and one host")


def test_a_host_whose_link_goes_down_is_named_within_5s(hosts, token_file):
    h = hosts(2)
    workers = [h.start(i, ["--listen", f"tcp://{h.addresses[i]}:{PORT}", "--token-file", token_file,
                           "--ranks", f"{2 * i}-{2 * i + 1}", "--world-size", "4",
                           "--heartbeat-ms", "100", "--controller-timeout-ms", "2000"])
               for i in range(2)]
    h.wait_listening()
    addresses = [f"tcp://{a}:{PORT}" for a in h.addresses]
    cut_commands = h.set_links(1, "down")
    stdout = run_client(f"""
        import subprocess, threading, time
        import dtorch
        from dtorch import Shard
        dtorch.init(workers={addresses!r}, token={token_of(token_file)!r},
                    heartbeat_interval=0.1, peer_timeout=1.0)
        mesh = dtorch.init_device_mesh("cpu", (4,))
        x = dtorch.ones(64, 64, device_mesh=mesh, placements=[Shard(0)])
        print("warm", float((x @ x).sum().numpy()), flush=True)
        down = {{}}
        def cut():
            down["t"] = time.monotonic()
            for command in {cut_commands!r}:
                subprocess.run(command, check=True)
        threading.Timer(0.3, cut).start()
        y = x
        try:
            for step in range(400):   # collectives across the link, in a loop
                y = (y @ x.t()) * (1.0 / 64)
                y.sum().numpy()
            print("no error", flush=True)
        except dtorch.WorkerError as e:
            print("DETECT", round(time.monotonic() - down["t"], 3), flush=True)
            print("ERROR", type(e).__name__, e.rank, e.host, "|", str(e).splitlines()[0], flush=True)
        t = time.monotonic()
        dtorch.shutdown()
        print("SHUTDOWN", round(time.monotonic() - t, 3), flush=True)
    """, "")
    error = [l for l in stdout.splitlines() if l.startswith("ERROR ")]
    assert error, stdout
    _, kind, rank, host, _, message = error[0].split(" ", 5)
    detect = float(re.search(r"DETECT (\S+)", stdout).group(1))
    print(f"[link down] {kind} after {detect:.3f} s from `ip link set down`: {message[:160]}")
    assert kind == "WorkerError", stdout
    assert int(rank) in (2, 3), stdout
    assert host.endswith("@" + h.addresses[1]), stdout
    assert h.addresses[1] in message, stdout
    assert detect < LINK_DOWN_BOUND_S, stdout
    assert float(re.search(r"SHUTDOWN (\S+)", stdout).group(1)) < 3.0, stdout
    # The survivor obeys the shutdown; the cut-off worker hears nothing from
    # the controller and exits on its own (--controller-timeout-ms).
    assert workers[0].wait(timeout=5) == 0, h.output(workers[0])
    assert workers[1].wait(timeout=10) == 3, h.output(workers[1])
    assert not h.processes_inside()


def test_workers_on_two_hosts_dial_a_controller_in_another_namespace(hosts, token_file):
    """Workers that dial in (docs/guide/multi-host.md, "Workers that dial
    in"): placed by torchrun-style variables whose MASTER_ADDR:MASTER_PORT is
    the client, listening in the root namespace; the collectives bind each
    host's address facing the client, and the session computes as one host
    does."""
    h = hosts(2)
    workers = [h.start(i, ["--dial-in", "--token-file", token_file, "--ranks-per-worker", "2"],
                       env={"RANK": str(i), "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                            "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": h.root_address,
                            "MASTER_PORT": str(PORT)},
                       name="dial-in")
               for i in range(2)]
    seen = {}

    def inspect(_):
        seen["peers"] = [gloo_peers(h, p, i) for i, p in enumerate(workers)]

    stdout = run_client(
        f"import dtorch\ndtorch.init(listen={h.root_address + ':' + str(PORT)!r}, world_size=4, "
        f"token={token_of(token_file)!r})\n",
        COMPUTE.replace("MESH_SHAPE", "(2, 2)").replace("MESH_NAMES", "('dp', 'tp')") + """
print("RESULT " + json.dumps(out), flush=True)
pause()
dtorch.shutdown()
""", inspect=inspect)
    got = result_of(stdout)
    check_computation(got, one_host_reference((2, 2), ("dp", "tp")))
    assert seen["peers"] == [{h.addresses[1]}, {h.addresses[0]}], seen
    for i, p in enumerate(workers):
        assert p.wait(timeout=5) == 0, h.output(p)
        log = h.output(p)
        assert f"dialing the controller at tcp://{h.root_address}:{PORT}" in log, log
        assert f"collectives on {h.addresses[i]}" in log, log
    assert not h.processes_inside()
    print(f"[2 hosts, dial-in] workers on {h.addresses} dialed {h.root_address}:{PORT}: "
          f"matmul, sum, all_reduce equal numpy and one host; Gloo pairs: {seen['peers']}")


def test_a_dialed_in_host_whose_link_goes_down_is_named_within_5s(hosts, token_file):
    h = hosts(2)
    workers = [h.start(i, ["--controller", f"{h.root_address}:{PORT}", "--token-file", token_file,
                           "--ranks", f"{2 * i}-{2 * i + 1}", "--world-size", "4",
                           "--heartbeat-ms", "100", "--controller-timeout-ms", "2000"],
                       name="dial-in")
               for i in range(2)]
    cut_commands = h.set_links(1, "down")
    stdout = run_client(f"""
        import subprocess, threading, time
        import dtorch
        from dtorch import Shard
        dtorch.init(listen="{h.root_address}:{PORT}", world_size=4, token={token_of(token_file)!r},
                    heartbeat_interval=0.1, peer_timeout=1.0)
        mesh = dtorch.init_device_mesh("cpu", (4,))
        x = dtorch.ones(64, 64, device_mesh=mesh, placements=[Shard(0)])
        print("warm", float((x @ x).sum().numpy()), flush=True)
        down = {{}}
        def cut():
            down["t"] = time.monotonic()
            for command in {cut_commands!r}:
                subprocess.run(command, check=True)
        threading.Timer(0.3, cut).start()
        y = x
        try:
            for step in range(400):
                y = (y @ x.t()) * (1.0 / 64)
                y.sum().numpy()
            print("no error", flush=True)
        except dtorch.WorkerError as e:
            print("DETECT", round(time.monotonic() - down["t"], 3), flush=True)
            print("ERROR", type(e).__name__, e.rank, e.host, "|", str(e).splitlines()[0], flush=True)
        dtorch.shutdown()
    """, "")
    error = [l for l in stdout.splitlines() if l.startswith("ERROR ")]
    assert error, stdout
    _, kind, rank, host, _, message = error[0].split(" ", 5)
    detect = float(re.search(r"DETECT (\S+)", stdout).group(1))
    print(f"[dial-in, link down] {kind} after {detect:.3f} s: {message[:160]}")
    assert kind == "WorkerError" and int(rank) in (2, 3), stdout
    assert host.endswith("@" + h.addresses[1]), stdout
    assert detect < LINK_DOWN_BOUND_S, stdout
    assert workers[0].wait(timeout=5) == 0, h.output(workers[0])
    assert workers[1].wait(timeout=10) == 3, h.output(workers[1])
    assert not h.processes_inside()
