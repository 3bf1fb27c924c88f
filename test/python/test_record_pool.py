"""The record pool (include/dtorch/Client/RecordPool.h): the client's per-op
objects (TensorImpl, TensorStorage, GradRecord and its operand array) come
from per-thread free lists. A tensor built in a reused block shows nothing
of the tensor before it (shape, dtype, grad, requires_grad, grad_fn, view),
and a training loop gives the same losses and gradients bit for bit with
DTORCH_RECORD_POOL=0 (the heap), which runs in a child interpreter."""
import json
import subprocess
import sys

import numpy as np

import dtorch
from dtorch import Shard, _C, nn

from conftest import subprocess_env


def test_recording_reuses_the_blocks_of_dropped_tensors(meshes):
    mesh = meshes["4"]
    x = dtorch.ones(8, 4, device_mesh=mesh, placements=[Shard(0)])
    for _ in range(50):  # warm: the blocks of the dropped chains are cached
        y = x
        for _ in range(20):
            y = y * 1.5
        y.numpy()
        del y
    before = _C._record_pool_stats()
    y = x
    for _ in range(20):
        y = y * 1.5
    after = _C._record_pool_stats()
    if not before["enabled"]:
        return
    # Each op allocates a TensorImpl and a TensorStorage block; the
    # TensorImpls at least come from the free lists (a storage's block
    # waits for its node's weak reference, which the controller may drop).
    reused, fresh = after["reused"] - before["reused"], after["fresh"] - before["fresh"]
    assert reused + fresh >= 40
    assert reused >= 20
    np.testing.assert_allclose(y.numpy(), np.full((8, 4), 1.5 ** 20, np.float32), rtol=1e-5)


def test_a_tensor_in_a_reused_block_shows_nothing_of_the_one_before(meshes):
    mesh = meshes["4"]
    for _ in range(20):
        w = dtorch.ones(4, 4, device_mesh=mesh, placements=[Shard(0)], requires_grad=True)
        h = (w * 3.0).sum(dim=1)
        h.retain_grad()
        loss = h.sum()
        loss.backward()
        assert h.grad is not None and w.grad is not None
        del w, h, loss
        # Fresh tensors now take the blocks those left.
        a = dtorch.full((2, 3), 2, dtype=dtorch.int64, device_mesh=mesh)
        b = a + 1
        assert b.shape == (2, 3)
        assert b.dtype == dtorch.int64
        assert b.grad is None
        assert b.grad_fn is None
        assert not b.requires_grad
        assert b.is_leaf
        assert not b._retains_grad
        assert b._view == a._view  # the mesh's view, as any tensor made on it
        np.testing.assert_array_equal(b.numpy(), np.full((2, 3), 3))
        c = dtorch.ones(3, device_mesh=mesh, requires_grad=True) * 2.0
        assert c.grad_fn is not None and c.grad_fn.name() == "MulBackward"
        assert c.grad_fn.scalar == (1, 2.0)
        assert len(c.grad_fn.inputs) == 1 and not c.grad_fn.released


STEPS = r"""
import json, sys
import numpy as np
import dtorch
from dtorch import Shard, nn
dtorch.init(world_size=2, backend="inprocess")
mesh = dtorch.init_device_mesh("cpu", (2,))
dtorch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16, device_mesh=mesh), nn.Tanh(),
                      nn.Linear(16, 4, device_mesh=mesh))
opt = dtorch.optim.AdamW(model.parameters(), lr=1e-2)
rng = np.random.default_rng(0)
losses = []
for _ in range(6):
    x = dtorch.tensor(rng.standard_normal((8, 8)).astype(np.float32),
                      device_mesh=mesh, placements=[Shard(0)])
    t = dtorch.tensor(rng.standard_normal((8, 4)).astype(np.float32),
                      device_mesh=mesh, placements=[Shard(0)])
    loss = ((model(x) - t) ** 2).mean()
    loss.backward()
    grads = [p.grad.numpy().tobytes().hex() for p in model.parameters()]
    opt.step()
    opt.zero_grad()
    losses.append(np.float32(loss.item()).tobytes().hex())
stats = dtorch._C._record_pool_stats()
print("RESULT " + json.dumps({"losses": losses, "grads": grads,
                              "enabled": stats["enabled"], "reused": stats["reused"]}))
"""


def _run(pool):
    env = subprocess_env()
    env["DTORCH_RECORD_POOL"] = pool
    done = subprocess.run([sys.executable, "-c", STEPS], capture_output=True, text=True,
                          env=env, timeout=300)
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, done.stderr[-3000:]
    return json.loads(line[-1][7:])


def test_training_is_bitwise_the_same_without_the_pool():
    on, off = _run("1"), _run("0")
    assert on["enabled"] and not off["enabled"]
    assert on["reused"] > 0 and off["reused"] == 0
    assert on["losses"] == off["losses"]
    assert on["grads"] == off["grads"]


HOLDERS = r"""
import json
import dtorch
dtorch.init(world_size=1, backend="inprocess")
mesh = dtorch.init_device_mesh("cpu", (1,))
x = dtorch.ones(3, device_mesh=mesh, requires_grad=True)
y = x * 2.0
z = y * 3.0  # z's record holds y
y.tag = "mine"
key = y._key
del y
w = z.grad_fn.inputs[0]
z.sum().backward()
print("RESULT " + json.dumps({"same_tensor": w._key == key, "tag": getattr(w, "tag", None),
                              "grad": x.grad.numpy().tolist()}))
"""


def test_a_record_keeps_the_python_object_only_without_the_pool():
    # With the pool, a tensor the session made reaches C++ as its own
    # shared_ptr (no control block per argument): a record keeps the C++
    # tensor, not its Python object, whose attributes go with it.
    # DTORCH_RECORD_POOL=0 keeps the Python object alive, as before.
    out = {}
    for pool in ("1", "0"):
        env = subprocess_env()
        env["DTORCH_RECORD_POOL"] = pool
        done = subprocess.run([sys.executable, "-c", HOLDERS], capture_output=True,
                              text=True, env=env, timeout=300)
        line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
        assert line, done.stderr[-3000:]
        out[pool] = json.loads(line[-1][7:])
    assert out["1"]["same_tensor"] and out["0"]["same_tensor"]
    assert out["1"]["tag"] is None
    assert out["0"]["tag"] == "mine"
    assert out["1"]["grad"] == out["0"]["grad"] == [6.0, 6.0, 6.0]
