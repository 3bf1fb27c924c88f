"""The embedded cluster's local links (StreamLink.h): by default each worker
process talks to the controller over an inherited Unix socketpair
(dtorch-worker --link-fd 4), and DTORCH_LOCAL_LINK=0 goes back to a ZeroMQ
connection. Either way the same work gives the same values: small ops, an
upload and a fetch larger than a socket buffer (bytes wait in the link and
leave as the socket drains), a collective, and a worker killed mid-session
reported by rank."""
import pytest

from conftest import run_fusion_script

SCRIPT = r"""
import json, os, signal, sys
import numpy as np
import dtorch
from dtorch import Shard, Replicate

dtorch.init(world_size=4, num_processes=2)
mesh = dtorch.init_device_mesh("cpu", (4,))
me = os.getpid()
workers = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        with open(f"/proc/{pid}/stat") as f:
            parent = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        continue
    if parent == me and argv and argv[0].endswith(b"dtorch-worker"):
        workers.append((int(pid), [a.decode() for a in argv if a]))
rng = np.random.default_rng(7)
a = rng.standard_normal((64, 32)).astype(np.float32)
x = dtorch.distribute_tensor(a, mesh, [Shard(0)])
small = ((x * 2.0 + 1.0).sum()).numpy()
# 24 MiB each way: more than a socket buffer holds.
big = rng.standard_normal((2048, 3072)).astype(np.float32)
b = dtorch.distribute_tensor(big, mesh, [Replicate()])
back = (b + 1.0).numpy()
rowsum = x.redistribute(mesh, [Replicate()]).numpy()
result = {
    "links": [argv[argv.index("--link-fd") + 1] if "--link-fd" in argv else None
              for _, argv in workers],
    "workers": len(workers),
    "small_err": float(abs(small - (a * 2 + 1).sum()) / abs((a * 2 + 1).sum())),
    "big_equal": bool(np.array_equal(back, big + 1.0)),
    "gather_equal": bool(np.array_equal(rowsum, a)),
}
# A worker killed: the next fetch that needs its ranks fails naming a rank;
# the session stays usable for shutdown.
os.kill(max(pid for pid, _ in workers), signal.SIGKILL)
try:
    (x * 3.0).numpy()
    result["kill_error"] = None
except Exception as e:
    result["kill_error"] = str(e)
dtorch.shutdown()
print("RESULT " + json.dumps(result))
"""


@pytest.mark.parametrize("setting, link", [(None, "4"), ("0", None), ("1", "4")])
def test_same_values_over_either_link(setting, link, monkeypatch):
    monkeypatch.delenv("DTORCH_LOCAL_LINK", raising=False)
    env = {} if setting is None else {"DTORCH_LOCAL_LINK": setting}
    r = run_fusion_script(SCRIPT, 1, timeout=300, env=env)
    assert r["workers"] == 2
    assert r["links"] == [link, link]
    assert r["small_err"] < 1e-5
    assert r["big_equal"] and r["gather_equal"]
    assert r["kill_error"] is not None and "killed by signal 9" in r["kill_error"], r["kill_error"]
