"""dtorch.distributed.checkpoint: resharding round trips (DP x TP 2x2 ->
FSDP 4 -> 1 rank -> 2x2, uneven shapes, every dtype), optimizer and
non-tensor state, a bitwise-identical resumed training run, clear errors
for missing/corrupt checkpoints and mismatched targets, atomic saves
(client or worker killed mid-save), and safetensors files read back by the
`safetensors` package."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import dtorch
import dtorch.distributed.checkpoint as dcp
from dtorch import Partial, Replicate, Shard, nn
from dtorch.distributed.fsdp import fully_shard
from dtorch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                parallelize_module)

from conftest import backend_name, subprocess_env

F64 = dtorch.float64
needs_workers = pytest.mark.skipif(backend_name() != "cluster",
                                   reason="needs worker processes")


class MLP(nn.Module):
    """Uneven sizes: 7, 10 and 5 split by 2 and 4 leave remainders."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(7, 10, dtype=F64)
        self.fc2 = nn.Linear(10, 5, dtype=F64)

    def forward(self, x):
        return self.fc2(nn.functional.gelu(self.fc1(x)))


def values_of(state):
    return {k: v.numpy() for k, v in state.items()}


def randomize(model, seed):
    rng = np.random.default_rng(seed)
    with dtorch.no_grad():
        for p in model.parameters():
            p.copy_(rng.standard_normal(tuple(p.shape)))


def test_reshard_dp_tp_to_fsdp_to_one_rank_and_back(meshes, tmp_path):
    mesh = meshes["2x2"]
    model = MLP()
    randomize(model, 0)
    parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    assert model.fc1.weight.placements[0] == Shard(0)
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(s) for s in ((9, 7), (5, 11), (6, 3)))
    x, w = rng.standard_normal((4, 6)), rng.standard_normal((6, 3))
    extra = {
        "both": dtorch.distribute_tensor(a, mesh, [Shard(0), Shard(1)]),
        "nested": dtorch.distribute_tensor(b, mesh, [Shard(1), Shard(1)]),
        "replicated": dtorch.distribute_tensor(c, mesh, [Replicate(), Replicate()]),
        # A matmul contracting a sharded dim: Partial, reduced by the save.
        "partial": dtorch.distribute_tensor(x, mesh, [Replicate(), Shard(1)])
        @ dtorch.distribute_tensor(w, mesh, [Replicate(), Shard(0)]),
    }
    assert extra["partial"].placements[1].is_partial()
    want = {**{f"model.{k}": v for k, v in values_of(model.state_dict()).items()},
            "extra.both": a, "extra.nested": b, "extra.replicated": c, "extra.partial": x @ w}
    dcp.save({"model": model.state_dict(), "extra": extra}, checkpoint_id=tmp_path / "dp_tp")
    files = sorted(os.listdir(tmp_path / "dp_tp"))
    assert files == ["metadata.json"] + [f"shards-rank-0000{r}.bin" for r in range(4)], files

    def check(state, tol=1e-12):
        for key, value in want.items():
            group, name = key.split(".", 1)
            np.testing.assert_allclose(state[group][name].numpy(), value, rtol=tol, atol=tol,
                                       err_msg=key)

    # FSDP on 4 ranks: parameters Shard(0) over 4, extras in other layouts.
    m4 = meshes["4"]
    fsdp = MLP()
    fully_shard(fsdp, mesh=m4)
    assert fsdp.fc1.weight.placements == (Shard(0),)
    extra4 = {"both": dtorch.zeros(9, 7, dtype=F64, device_mesh=m4, placements=[Shard(1)]),
              "nested": dtorch.zeros(5, 11, dtype=F64, device_mesh=m4, placements=[Shard(0)]),
              "replicated": dtorch.zeros(6, 3, dtype=F64, device_mesh=m4,
                                         placements=[Shard(0)]),
              "partial": dtorch.zeros(4, 3, dtype=F64, device_mesh=m4,
                                      placements=[Replicate()])}
    state4 = {"model": fsdp.state_dict(), "extra": extra4}
    dcp.load(state4, checkpoint_id=tmp_path / "dp_tp")
    check(state4)
    assert fsdp.fc1.weight.placements == (Shard(0),)  # in place: the layout stays
    np.testing.assert_allclose(fsdp.fc1.weight.numpy(), want["model.fc1.weight"])

    # One rank, saved again from there.
    m1 = meshes["1"]
    state1 = {"model": {k: dtorch.zeros(*v.shape, dtype=F64, device_mesh=m1)
                        for k, v in fsdp.state_dict().items()},
              "extra": {k: dtorch.zeros(*v.shape, dtype=F64, device_mesh=m1)
                        for k, v in extra4.items()}}
    dcp.load(state1, checkpoint_id=tmp_path / "dp_tp")
    check(state1)
    dcp.save(state1, checkpoint_id=tmp_path / "one")
    assert sorted(os.listdir(tmp_path / "one")) == ["metadata.json", "shards-rank-00000.bin"]

    # Back to 2x2, in layouts the first save did not use (Partial too).
    back = {"model": {k: dtorch.zeros(*v.shape, dtype=F64, device_mesh=mesh,
                                      placements=[Shard(1 if v.ndim > 1 else 0), Shard(0)])
                      for k, v in fsdp.state_dict().items()},
            "extra": {"both": dtorch.zeros(9, 7, dtype=F64, device_mesh=mesh,
                                           placements=[Shard(1), Shard(0)]),
                      "nested": dtorch.zeros(5, 11, dtype=F64, device_mesh=mesh,
                                             placements=[Shard(0), Shard(0)]),
                      "replicated": dtorch.zeros(6, 3, dtype=F64, device_mesh=mesh,
                                                 placements=[Replicate(), Shard(1)]),
                      "partial": dtorch.zeros(4, 3, dtype=F64, device_mesh=mesh,
                                              placements=[Partial(), Replicate()])}}
    dcp.load(back, checkpoint_id=tmp_path / "one")
    check(back)
    assert back["extra"]["partial"].placements[0].is_partial()


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32",
                                   "int64", "bool"])
def test_every_dtype_round_trips_bitwise(meshes, tmp_path, dtype):
    dt = getattr(dtorch, dtype)
    rng = np.random.default_rng(3)
    raw = rng.standard_normal((5, 3)) * 100
    if dtype == "bool":
        data = raw > 0
    elif dtype == "bfloat16":
        import ml_dtypes
        data = raw.astype(ml_dtypes.bfloat16)
    else:
        data = raw.astype(dtype)
    src = dtorch.tensor(data, device_mesh=meshes["4"], placements=[Shard(0)], dtype=dt)
    dcp.save({"t": src, "n": data}, checkpoint_id=tmp_path / dtype)
    target = {"t": dtorch.zeros(5, 3, dtype=dt, device_mesh=meshes["2x2"],
                                placements=[Shard(1), Shard(0)]),
              "n": None}
    dcp.load(target, checkpoint_id=tmp_path / dtype)
    got = target["t"].numpy()
    assert got.dtype == data.dtype and got.tobytes() == data.tobytes()
    assert target["n"].dtype == data.dtype and target["n"].tobytes() == data.tobytes()


def test_empty_and_zero_d_tensors(meshes, tmp_path):
    m = meshes["4"]
    state = {"empty": dtorch.zeros(0, 3, device_mesh=m, placements=[Shard(0)]),
             "scalar": dtorch.tensor(np.float32(2.5), device_mesh=m),
             "few": dtorch.tensor(np.arange(2, dtype=np.float32), device_mesh=m,
                                  placements=[Shard(0)])}
    dcp.save(state, checkpoint_id=tmp_path / "c")
    target = {"empty": dtorch.ones(0, 3, device_mesh=m),
              "scalar": dtorch.zeros((), device_mesh=m),
              "few": dtorch.zeros(2, device_mesh=meshes["2x2"], placements=[Shard(0), Shard(0)])}
    dcp.load(target, checkpoint_id=tmp_path / "c")
    assert target["empty"].numpy().shape == (0, 3)
    assert target["scalar"].item() == 2.5
    assert target["few"].numpy().tolist() == [0.0, 1.0]


def test_optimizer_state_and_python_values_round_trip(meshes, tmp_path):
    mesh = meshes["2x2"]
    model = MLP()
    randomize(model, 4)
    parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    opt = dtorch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = dtorch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    x = dtorch.distribute_tensor(np.random.default_rng(5).standard_normal((4, 7)), mesh,
                                 [Shard(0), Replicate()])
    for _ in range(2):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        sched.step()
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 2,
             "note": "hello", "nested": {"t": (1, 2.5), 3: [None, True, float("inf")]},
             "rng": dtorch.get_rng_state(), "sched": sched.state_dict()}
    dcp.save(state, checkpoint_id=tmp_path / "opt")
    want_optim = {i: {k: (v.numpy() if hasattr(v, "numpy") else v) for k, v in s.items()}
                  for i, s in opt.state_dict()["state"].items()}

    fresh = MLP()
    fully_shard(fresh, mesh=meshes["4"])
    fresh_opt = dtorch.optim.AdamW(fresh.parameters(), lr=1e-2)
    fresh_sched = dtorch.optim.lr_scheduler.CosineAnnealingLR(fresh_opt, T_max=10)
    target = {"model": fresh.state_dict(), "optim": fresh_opt.state_dict(), "step": 0,
              "note": None, "nested": {}, "rng": None, "sched": fresh_sched.state_dict()}
    dcp.load(target, checkpoint_id=tmp_path / "opt")
    fresh_opt.load_state_dict(target["optim"])
    fresh_sched.load_state_dict(target["sched"])
    assert fresh_sched.last_epoch == sched.last_epoch == 2
    assert fresh_sched.get_last_lr() == sched.get_last_lr()
    assert target["step"] == 2 and target["note"] == "hello"
    assert target["nested"] == {"t": (1, 2.5), 3: [None, True, float("inf")]}
    assert target["rng"].tolist() == state["rng"].tolist()
    assert fresh_opt.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    got = fresh_opt.state_dict()["state"]
    assert sorted(got) == sorted(want_optim)
    for i, s in want_optim.items():
        for k, v in s.items():
            np.testing.assert_array_equal(np.asarray(got[i][k].numpy() if hasattr(
                got[i][k], "numpy") else got[i][k]), np.asarray(v), err_msg=f"{i}.{k}")
    for k, v in values_of(model.state_dict()).items():
        np.testing.assert_array_equal(fresh.state_dict()[k].numpy(), v, err_msg=k)


def test_missing_and_corrupt_checkpoints_raise_clear_errors(meshes, tmp_path):
    m = meshes["4"]
    t = dtorch.distribute_tensor(np.arange(12.0).reshape(4, 3), m, [Shard(0)])
    target = {"t": dtorch.zeros(4, 3, dtype=F64, device_mesh=m)}
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        dcp.load(target, checkpoint_id=tmp_path / "nothing")
    path = tmp_path / "c"
    dcp.save({"t": t}, checkpoint_id=path)
    meta = path / "metadata.json"
    text = meta.read_text()

    meta.write_text("{ not json")
    with pytest.raises(dtorch.DTorchError, match="metadata is not valid"):
        dcp.load(target, checkpoint_id=path)
    doc = json.loads(text)
    doc["tensors"][0]["chunks"][0]["byte_size"] = "8"
    meta.write_text(json.dumps(doc))
    with pytest.raises(dtorch.DTorchError, match="'t' chunk 0: byte size"):
        dcp.load(target, checkpoint_id=path)
    doc = json.loads(text)
    doc["objects_json"] = json.dumps({"dict": [[["s", "t"], {"tensor": "u", "kind": "dtensor"}]]})
    meta.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="not saved: 'u'"):
        dcp.load(target, checkpoint_id=path)

    meta.write_text(text)
    data = path / "shards-rank-00002.bin"
    raw = bytearray(data.read_bytes())
    raw[3] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(dtorch.DTorchError, match="shards-rank-00002.bin is corrupt"):
        dcp.load(target, checkpoint_id=path)
    data.unlink()
    with pytest.raises(dtorch.DTorchError, match="cannot open checkpoint file"):
        dcp.load(target, checkpoint_id=path)
    meta.unlink()
    with pytest.raises(FileNotFoundError, match="incomplete"):
        dcp.load(target, checkpoint_id=path)
    # The session is still usable.
    assert target["t"].numpy().sum() == 0


def test_mismatched_target_raises_value_error_naming_the_key(meshes, tmp_path):
    m = meshes["4"]
    dcp.save({"model": {"w": dtorch.ones(4, 3, device_mesh=m, placements=[Shard(0)])}},
             checkpoint_id=tmp_path / "c")
    keep = dtorch.zeros(4, 3, device_mesh=m)
    with pytest.raises(ValueError, match=r"'model.w' has shape \(4, 3\), the target has \(3, 4\)"):
        dcp.load({"model": {"w": dtorch.zeros(3, 4, device_mesh=m)}}, checkpoint_id=tmp_path / "c")
    with pytest.raises(ValueError, match="'model.w' has dtype float32, the target has float64"):
        dcp.load({"model": {"w": dtorch.zeros(4, 3, dtype=F64, device_mesh=m)}},
                 checkpoint_id=tmp_path / "c")
    with pytest.raises(ValueError, match="no tensor for 'model.v'"):
        dcp.load({"model": {"w": keep, "v": dtorch.zeros(2, device_mesh=m)}},
                 checkpoint_id=tmp_path / "c")
    assert keep.numpy().sum() == 0  # checked before anything changed
    with pytest.raises(TypeError, match="cannot save 'x' of type object"):
        dcp.save({"x": object()}, checkpoint_id=tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_rng_state_replays_random_ops(dt):
    dtorch.manual_seed(11)
    dtorch.randn(2)
    state = dtorch.get_rng_state()
    a = dtorch.randn(4).numpy()
    b = dtorch.rand(3).numpy()
    dtorch.set_rng_state(state)
    assert dtorch.randn(4).numpy().tobytes() == a.tobytes()
    assert dtorch.rand(3).numpy().tobytes() == b.tobytes()
    with pytest.raises(ValueError, match="two non-negative integers"):
        dtorch.set_rng_state([1])


def test_safetensors_are_read_by_the_safetensors_package(meshes, tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    import ml_dtypes
    mesh = meshes["2x2"]
    rng = np.random.default_rng(7)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    half = rng.standard_normal(7).astype(ml_dtypes.bfloat16)
    state = {"layer": {"w": dtorch.distribute_tensor(w, mesh, [Shard(0), Shard(1)]),
                       "b": dtorch.tensor(half, device_mesh=mesh,
                                          placements=[Shard(0), Replicate()],
                                          dtype=dtorch.bfloat16)},
             "ids": np.arange(4, dtype=np.int64),
             "mask": dtorch.tensor(np.array([True, False, True]), device_mesh=mesh)}
    path = tmp_path / "model.safetensors"
    dtorch.save_safetensors(state, path, metadata={"format": "pt"})
    got = st.load_file(str(path))
    assert sorted(got) == ["ids", "layer.b", "layer.w", "mask"]
    np.testing.assert_array_equal(got["layer.w"], w)
    assert got["layer.b"].tobytes() == half.tobytes()
    np.testing.assert_array_equal(got["ids"], np.arange(4))
    assert got["mask"].tolist() == [True, False, True]
    ours = dtorch.load_safetensors(path)
    assert ours["layer.b"].dtype == half.dtype and ours["layer.b"].tobytes() == half.tobytes()
    np.testing.assert_array_equal(ours["layer.w"], w)
    with pytest.raises(TypeError, match="'bad' is a str"):
        dtorch.save_safetensors({"bad": "x"}, tmp_path / "bad.safetensors")
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file
    tt = load_file(str(path))
    assert tt["layer.b"].dtype == torch.bfloat16
    np.testing.assert_array_equal(tt["layer.w"].numpy(), w)


# ---- atomicity: processes killed mid-save --------------------------------------

SAVER = """
import os, signal, sys, time
import numpy as np
import dtorch
import dtorch.distributed.checkpoint as dcp
from dtorch import Shard
path, mode = sys.argv[1], sys.argv[2]
mesh = dtorch.init_device_mesh("cpu", (4,))
def state(v):
    return {"big": dtorch.full((2048, 1024), float(v), device_mesh=mesh,
                               placements=[Shard(0)]),
            "rep": dtorch.full((512, 512), float(v), device_mesh=mesh),
            "version": v}
dcp.save(state(1), checkpoint_id=path)
print("SAVED 1", flush=True)
def pause(where):
    def hook(staging):
        print("PAUSED", where, flush=True)
        time.sleep(60)
    return hook
if mode in ("after_shards", "after_metadata"):
    dcp._test_hooks[mode] = pause(mode)
elif mode == "kill_worker":
    import subprocess, threading
    kids = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "dtorch-worker"],
                          capture_output=True, text=True).stdout.split()
    victim = max(int(k) for k in kids)
    threading.Timer(0.02, os.kill, (victim, signal.SIGKILL)).start()
print("SAVING 2", flush=True)
try:
    dcp.save(state(2), checkpoint_id=path)
    print("SAVED 2", flush=True)
except dtorch.WorkerError as e:
    print("WorkerError", e.rank, e, flush=True)
dtorch.shutdown()
"""


def run_saver(path, mode, kill_on):
    proc = subprocess.Popen([sys.executable, "-c", SAVER, str(path), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=subprocess_env(), cwd="/")
    lines = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
            if kill_on and line.startswith(kill_on):
                if kill_on == "SAVING":
                    time.sleep(0.05)  # the workers are writing
                proc.send_signal(signal.SIGKILL)
                break
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return lines, proc.stderr.read()


def loaded_version(meshes, path):
    m = meshes["4"]
    target = {"big": dtorch.zeros(2048, 1024, device_mesh=m, placements=[Shard(1)]),
              "rep": dtorch.zeros(512, 512, device_mesh=meshes["2x2"],
                                  placements=[Shard(0), Replicate()]),
              "version": 0}
    dcp.load(target, checkpoint_id=path)
    big, rep = target["big"].numpy(), target["rep"].numpy()
    v = target["version"]
    assert (big == v).all() and (rep == v).all(), f"mixed checkpoint (version {v})"
    return v


@needs_workers
@pytest.mark.parametrize("kill_on", ["PAUSED after_shards", "PAUSED after_metadata", "SAVING"])
def test_client_killed_mid_save_leaves_the_previous_checkpoint(meshes, tmp_path, kill_on):
    path = tmp_path / "ckpt"
    mode = kill_on.split()[1] if kill_on.startswith("PAUSED") else "plain"
    t = time.time()
    lines, err = run_saver(path, mode, kill_on)
    assert "SAVED 1" in lines and any(l.startswith(kill_on) for l in lines), (lines, err)
    version = loaded_version(meshes, path)
    print(f"killed at '{kill_on}' after {time.time() - t:.1f} s: checkpoint version {version}")
    # Killed before the exchange: the old one; "SAVING" may catch either.
    assert version == 1 or kill_on == "SAVING"
    leftovers = [n for n in os.listdir(tmp_path) if ".tmp-" in n]
    if mode != "plain":
        assert leftovers, "the killed save's staging folder should still be there"
    # The next save removes the staging folder of the dead process.
    dcp.save({"x": 1}, checkpoint_id=tmp_path / "ckpt")
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


@needs_workers
def test_worker_killed_mid_save_leaves_the_previous_checkpoint(meshes, tmp_path):
    path = tmp_path / "ckpt"
    lines, err = run_saver(path, "kill_worker", None)
    assert "SAVED 1" in lines, (lines, err)
    failed = [l for l in lines if l.startswith("WorkerError")]
    version = loaded_version(meshes, path)
    print("worker killed mid-save:", failed or lines[-1], "-> checkpoint version", version)
    assert (failed and version == 1) or ("SAVED 2" in lines and version == 2), (lines, err)
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


# ---- bitwise resume ----------------------------------------------------------------

TRAINER = """
import sys
import numpy as np
import dtorch
import dtorch.distributed.checkpoint as dcp
from dtorch import Replicate, Shard, nn
from dtorch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
path, mode, stop = sys.argv[1], sys.argv[2], int(sys.argv[3])
F = nn.functional
mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(12, 32)
        self.drop = nn.Dropout(0.2)
        self.fc2 = nn.Linear(32, 6)
    def forward(self, x):
        return self.fc2(self.drop(F.gelu(self.fc1(x))))
dtorch.manual_seed(0 if mode == "fresh" else 123)
model = Net()
parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
opt = dtorch.optim.AdamW(model.parameters(), lr=3e-2, weight_decay=0.01)
start = 0
if mode == "resume":
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 0, "rng": None}
    dcp.load(state, checkpoint_id=path)
    opt.load_state_dict(state["optim"])
    dtorch.set_rng_state(state["rng"])
    start = state["step"]
for step in range(start, stop):
    rng = np.random.default_rng(step)
    x = dtorch.distribute_tensor(rng.standard_normal((8, 12)).astype(np.float32), mesh,
                                 [Shard(0), Replicate()])
    y = dtorch.distribute_tensor(rng.integers(0, 6, 8), mesh, [Shard(0), Replicate()])
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    print("LOSS", step, float(loss.item()).hex(), flush=True)
    if mode == "fresh" and step + 1 == int(sys.argv[4]):
        dcp.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step + 1,
                  "rng": dtorch.get_rng_state()}, checkpoint_id=path)
import hashlib
digest = hashlib.sha256()
for name, value in sorted(model.state_dict().items()):
    digest.update(name.encode() + value.numpy().tobytes())
print("PARAMS", stop, digest.hexdigest(), flush=True)
dtorch.shutdown()
"""


def run_trainer(fusion, *args, script=TRAINER):
    """Runs `script` in a fresh interpreter with the on-disk program cache
    off; `fusion` is DTORCH_FUSION ("default": unset)."""
    env = dict(subprocess_env(), DTORCH_CACHE_DIR="")
    env.pop("DTORCH_FUSION", None)
    if fusion != "default":
        env["DTORCH_FUSION"] = fusion
    r = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True,
                       text=True, timeout=300, env=env, cwd="/")
    assert r.returncode == 0, r.stdout + r.stderr
    # LOSS step value; PARAMS step digest (of the parameters after the run)
    losses = {(l.split()[0], int(l.split()[1])): l.split()[2] for l in r.stdout.splitlines()
              if l.startswith(("LOSS ", "PARAMS "))}
    stats = [json.loads(l[len("STATS "):]) for l in r.stdout.splitlines()
             if l.startswith("STATS ")]
    return losses, stats[-1] if stats else None


# Every fusion tier, the default included: by default a segment's first run
# uses the runtime's kernels and later runs generated ones, so the resumed
# run's first step (a first run in the new process, the disk cache off)
# runs unfused where the uninterrupted run's fifth ran fused. Both give the
# same bits (test_fusion_tiers.py, FusedKernelBitwiseTest).
@pytest.mark.parametrize("fusion", ["0", "1", "default"])
def test_resumed_training_gives_bitwise_the_same_losses(tmp_path, fusion):
    path = tmp_path / "ckpt"
    full, _ = run_trainer(fusion, path, "fresh", 8, 4)
    resumed, _ = run_trainer(fusion, path, "resume", 8)
    assert sorted(resumed) == [("LOSS", s) for s in [4, 5, 6, 7]] + [("PARAMS", 8)]
    assert {s: full[s] for s in resumed} == resumed, (full, resumed)
    assert len({v for k, v in full.items() if k[0] == "LOSS"}) == 8  # the losses move


# An MLP whose forward, loss and backward are made of the transcendental
# kernels (gelu, tanh, sigmoid, silu, exp, log) in float32 and a bfloat16
# branch, trained with AdamW; each step is one segment (forward, backward,
# update). The first step after the resume is that segment's first run in
# the new process: unfused, against the fused one of the uninterrupted run.
TRANSCENDENTAL_TRAINER = """
import json, sys
import numpy as np
import dtorch
import dtorch.distributed.checkpoint as dcp
from dtorch import Replicate, Shard, nn
from dtorch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
path, mode, stop = sys.argv[1], sys.argv[2], int(sys.argv[3])
F = nn.functional
mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 48)
        self.fc2 = nn.Linear(48, 5)
    def forward(self, x):
        h = self.fc1(x)
        h = F.gelu(h) + h.tanh() * F.silu(h) * 0.5
        out = self.fc2(h)
        low = out.bfloat16()
        return out.tanh() * 2.0 + (low.sigmoid() * low.exp().log()).float() * 0.25
dtorch.manual_seed(0 if mode == "fresh" else 99)
model = Net()
parallelize_module(model, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
opt = dtorch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
start = 0
if mode == "resume":
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 0}
    dcp.load(state, checkpoint_id=path)
    opt.load_state_dict(state["optim"])
    start = state["step"]
for step in range(start, stop):
    rng = np.random.default_rng(step)
    x = dtorch.distribute_tensor(rng.standard_normal((16, 16)).astype(np.float32), mesh,
                                 [Shard(0), Replicate()])
    t = dtorch.distribute_tensor(rng.standard_normal((16, 5)).astype(np.float32), mesh,
                                 [Shard(0), Replicate()])
    y = dtorch.distribute_tensor(rng.integers(0, 5, 16), mesh, [Shard(0), Replicate()])
    opt.zero_grad()
    out = model(x)
    # softplus(out * t) = log(1 + exp(out * t)), plus cross entropy
    # (log_softmax: exp and log) and a sigmoid term.
    z = out * t
    loss = (z.exp() + 1.0).log().mean() + F.cross_entropy(out, y) + (out.sigmoid() * t).mean()
    loss.backward()
    opt.step()
    print("LOSS", step, float(loss.item()).hex(), flush=True)
    if mode == "fresh" and step + 1 == int(sys.argv[4]):
        dcp.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step + 1},
                 checkpoint_id=path)
import hashlib
digest = hashlib.sha256()
for name, value in sorted(model.state_dict().items()):
    digest.update(name.encode() + value.numpy().tobytes())
print("PARAMS", stop, digest.hexdigest(), flush=True)
print("STATS " + json.dumps(dtorch._C.controller_stats()))
dtorch.shutdown()
"""


def test_resumed_transcendental_training_is_bitwise_in_a_fresh_process_by_default(tmp_path):
    """The requirement "a resumed run produces bitwise the same losses",
    in its hardest setting: a fresh process, the disk program cache off,
    the default fusion tier (DTORCH_FUSION unset)."""
    path = tmp_path / "ckpt"
    full, full_stats = run_trainer("default", path, "fresh", 8, 4,
                                   script=TRANSCENDENTAL_TRAINER)
    resumed, resumed_stats = run_trainer("default", path, "resume", 8,
                                         script=TRANSCENDENTAL_TRAINER)
    assert sorted(resumed) == [("LOSS", s) for s in [4, 5, 6, 7]] + [("PARAMS", 8)]
    # Both runs fused the training step from its second run on.
    assert full_stats["fused_recompiles"] >= 1 and resumed_stats["fused_recompiles"] >= 1
    assert {s: full[s] for s in resumed} == resumed, (full, resumed)
    assert len({v for k, v in full.items() if k[0] == "LOSS"}) == 8  # the losses move


def test_arrays_and_dtensors_load_into_each_other(meshes, tmp_path):
    mesh = meshes["2x2"]
    a = np.arange(30, dtype=np.float32).reshape(6, 5)
    b = np.arange(12, dtype=np.int64).reshape(3, 4)
    dcp.save({"from_array": a,
              "from_dtensor": dtorch.distribute_tensor(b, mesh, [Shard(1), Shard(0)])},
             checkpoint_id=tmp_path / "c")
    target = {"from_array": dtorch.zeros(6, 5, device_mesh=mesh, placements=[Shard(1), Shard(0)]),
              "from_dtensor": np.zeros((3, 4), np.int64)}
    dcp.load(target, checkpoint_id=tmp_path / "c")
    np.testing.assert_array_equal(target["from_array"].numpy(), a)
    assert isinstance(target["from_dtensor"], np.ndarray)
    np.testing.assert_array_equal(target["from_dtensor"], b)


def test_load_gives_a_meta_initialized_model_its_values_in_its_layout(meshes, tmp_path):
    mesh = meshes["2x2"]
    model = MLP()
    randomize(model, 8)
    want = values_of(model.state_dict())
    dcp.save({"model": model.state_dict()}, checkpoint_id=tmp_path / "c")
    with nn.meta_init():
        big = MLP()
    parallelize_module(big, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    with pytest.raises(ValueError, match="meta tensor"):
        big.fc1.weight.numpy()
    dcp.load({"model": big.state_dict()}, checkpoint_id=tmp_path / "c")
    assert big.fc2.weight.placements == (Shard(1),)  # on mesh["tp"]
    for k, v in want.items():
        np.testing.assert_array_equal(big.state_dict()[k].numpy(), v, err_msg=k)


def test_chunk_checksums_are_zlib_crc32_of_the_file_bytes(meshes, tmp_path):
    import zlib
    t = dtorch.distribute_tensor(np.arange(40.0).reshape(8, 5), meshes["2x2"],
                                 [Shard(0), Shard(1)])
    dcp.save({"t": t, "a": np.arange(3, dtype=np.int32)}, checkpoint_id=tmp_path / "c")
    entries, _ = dcp.read_metadata(tmp_path / "c")
    chunks = entries["t"]["chunks"] + entries["a"]["chunks"]
    assert len(chunks) == 5
    for chunk in chunks:
        with open(tmp_path / "c" / chunk["file"], "rb") as f:
            f.seek(chunk["byte_offset"])
            data = f.read(chunk["byte_size"])
        assert zlib.crc32(data) == chunk["checksum"]
        piece = np.frombuffer(data, dtype=np.float64 if chunk in entries["t"]["chunks"]
                              else np.int32).reshape(chunk["sizes"])
        box = tuple(slice(o, o + s) for o, s in zip(chunk["offsets"], chunk["sizes"]))
        want = np.arange(40.0).reshape(8, 5) if chunk in entries["t"]["chunks"] \
            else np.arange(3, dtype=np.int32)
        np.testing.assert_array_equal(piece, want[box])
