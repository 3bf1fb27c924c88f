"""Collectives between the two worker processes of the embedded cluster (4
ranks, 2 per process) go through shared memory between processes: the
numerics match numpy, the group segments the workers map count the calls
(read through /proc, from the header of each memfd segment), a large
all_reduce reads and writes the workers' tensors in place in their shared
arenas, and the results are bitwise those of the same computation with the
transport turned off (DTORCH_HOST_SHM=0: Gloo)."""
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import assert_close, backend_name, subprocess_env
from dtorch import Partial, Replicate, Shard

pytestmark = pytest.mark.skipif(backend_name() != "cluster",
                                reason="needs worker processes")

# runtime/collectives/HostSharedMemorySegment.h: SegmentHeader
MAGIC = 0x6873686374726F74
CALLS_OFFSET = 704
CLAIMED_OFFSET = 2816  # chunks claimed by all_reduce calls through peer access


def worker_pids():
    """The dtorch-worker processes this interpreter started."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        ppid = int(text[text.rindex(")") + 2:].split()[1])
        if ppid == os.getpid() and name.startswith("dtorch-worker"):
            pids.append(int(entry))
    return pids


def group_segments():
    """{group: (calls, bytes)} of every group segment a worker created."""
    found = {}
    for pid in worker_pids():
        fd_dir = f"/proc/{pid}/fd"
        for fd in os.listdir(fd_dir):
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            prefix = "/memfd:dtorch-hostshm:hostshm_world_group_"
            if not target.startswith(prefix):
                continue
            with open(f"{fd_dir}/{fd}", "rb") as f:
                header = f.read(4096)
            magic, = struct.unpack_from("<Q", header, 0)
            assert magic == MAGIC, target
            group = target[len(prefix):].split(" ")[0]
            found[group] = struct.unpack_from("<QQ", header, CALLS_OFFSET) + \
                struct.unpack_from("<I", header, CLAIMED_OFFSET)
    return found


def calls_of(segments):
    return sum(calls for calls, _, _ in segments.values())


def arenas_of(pid):
    """The shared arenas (SharedHostArena.h) process `pid` holds open."""
    fd_dir = f"/proc/{pid}/fd"
    found = []
    for fd in os.listdir(fd_dir):
        try:
            if os.readlink(f"{fd_dir}/{fd}").startswith("/memfd:dtorch-host-arena"):
                found.append(fd)
        except OSError:
            continue
    return found


def test_cross_process_collectives_go_through_shared_memory(dt, meshes):
    mesh = meshes["4"]
    before = calls_of(group_segments())
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 12)).astype(np.float32)
    x = dt.distribute_tensor(a, mesh, [Shard(0)])
    # all_gather, all_to_all, all_reduce and reduce_scatter over ranks 0-3.
    assert_close(x.redistribute(mesh, [Replicate()]).numpy(), a)
    assert_close(x.redistribute(mesh, [Shard(1)]).numpy(), a)
    total = x.sum(0)
    assert total.placements[0] == Partial("sum")
    assert_close(total.redistribute(mesh, [Replicate()]).numpy(), a.sum(0), 1e-4)
    assert_close(total.redistribute(mesh, [Shard(0)]).numpy(), a.sum(0), 1e-4)
    after = group_segments()
    assert "0,1,2,3" in after, after
    assert calls_of(after) >= before + 4
    assert after["0,1,2,3"][1] > 0


def test_two_by_two_mesh_crosses_processes_on_dp_only(dt, meshes):
    mesh = meshes["2x2"]  # dp groups {0, 2}, {1, 3} span the processes
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6, 8)).astype(np.float32)
    x = dt.distribute_tensor(a, mesh, [Shard(0), Shard(1)])
    before = group_segments()
    assert_close(x.redistribute(mesh, [Replicate(), Shard(1)]).numpy(), a)
    after = group_segments()
    grew = {g for g in after if after[g][0] > before.get(g, (0, 0, 0))[0]}
    assert grew and grew <= {"0,2", "1,3"}, (before, after)


def test_large_all_reduce_works_in_place_in_the_workers_arenas(dt, meshes):
    """1 MiB per rank: past the threshold of peer access, so every worker
    keeps its tensors in its shared arena and the members claim chunks of
    the reduction from the group's segment."""
    mesh = meshes["4"]
    pids = worker_pids()
    assert len(pids) == 2 and all(arenas_of(pid) for pid in pids), pids
    before = group_segments().get("0,1,2,3", (0, 0, 0))
    rng = np.random.default_rng(6)
    a = rng.standard_normal((4, 262144)).astype(np.float32)
    total = dt.distribute_tensor(a, mesh, [Shard(0)]).sum(0)
    assert_close(total.redistribute(mesh, [Replicate()]).numpy(), a.sum(0), 1e-4)
    after = group_segments()["0,1,2,3"]
    assert after[0] > before[0]
    assert after[2] != before[2], (before, after)  # chunks were claimed


SCRIPT = r"""
import hashlib
import numpy as np
import dtorch
from dtorch import Replicate, Shard
dtorch.init(world_size=4, num_processes=2)
mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
rng = np.random.default_rng(5)
a = rng.standard_normal((64, 48)).astype(np.float32)
w = rng.standard_normal((48, 40)).astype(np.float32)
x = dtorch.distribute_tensor(a, mesh, [Shard(0), Shard(1)])
y = dtorch.distribute_tensor(w, mesh, [Replicate(), Shard(0)])
z = (x @ y).relu().sum(0)
digest = hashlib.sha256()
for t in (z.redistribute(mesh, [Replicate(), Replicate()]),
          (x * 3).redistribute(mesh, [Replicate(), Replicate()]),
          x.redistribute(mesh, [Shard(1), Shard(0)])):
    digest.update(np.ascontiguousarray(t.numpy()).tobytes())
# 256 KiB partial sums over "dp" (across the processes): peer access.
b = rng.standard_normal((8, 65536)).astype(np.float32)
s = dtorch.distribute_tensor(b, mesh, [Shard(0), Replicate()]).sum(0)
digest.update(s.redistribute(mesh, [Replicate(), Replicate()]).numpy().tobytes())
print("digest", digest.hexdigest())
dtorch.shutdown()
"""


def run_script(shared_memory):
    env = subprocess_env()
    env["DTORCH_HOST_SHM"] = "1" if shared_memory else "0"
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True,
                         text=True, timeout=120, cwd="/", env=env)
    assert out.returncode == 0, out.stderr
    return [line for line in out.stdout.splitlines() if line.startswith("digest")]


def test_results_are_bitwise_those_of_gloo():
    with_shm = run_script(True)
    with_gloo = run_script(False)
    assert with_shm and with_shm == with_gloo
