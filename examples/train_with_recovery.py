"""Trains the spirals MLP of examples/mlp.py on a 2x2 mesh with a checkpoint
every few steps, and survives the loss of a worker process: the training
loop catches `dtorch.WorkerError`, replaces the lost worker with
`dtorch.restart()`, loads the last checkpoint and goes on. Because the
checkpoint holds the model, the AdamW moments, the step count and the
random number generator's state, and every batch is drawn from the step
number alone, the losses after the recovery are those of a run without the
fault.

    python3 examples/train_with_recovery.py [--steps 40] [--every 5]
        [--kill-at 17] [--checkpoint-dir /tmp/dtorch-recovery]

`--kill-at N` sends SIGKILL to one worker process before step N, to show the
recovery (a real failure needs no flag).
"""
import argparse
import os
import signal
import subprocess
import tempfile

import numpy as np

import dtorch
import dtorch.distributed.checkpoint as dcp
import dtorch.nn as nn
import dtorch.nn.functional as F
from dtorch import Replicate, Shard

try:
    from mlp import spirals
except ImportError:  # imported as a module from elsewhere
    import importlib.util
    _spec = importlib.util.spec_from_file_location(
        "mlp", os.path.join(os.path.dirname(os.path.abspath(__file__)), "mlp.py"))
    _mlp = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mlp)
    spirals = _mlp.spirals


def build(mesh, hidden=64, lr=1e-2):
    """A fresh model and optimizer (their values come from the seed or from
    a checkpoint)."""
    colwise, rowwise = [Replicate(), Shard(0)], {"weight": [Replicate(), Shard(1)]}
    model = nn.Sequential(
        nn.Linear(2, hidden, device_mesh=mesh, placements=colwise), nn.Tanh(),
        nn.Linear(hidden, hidden, device_mesh=mesh, placements=rowwise), nn.Tanh(),
        nn.Linear(hidden, 2, device_mesh=mesh))
    opt = dtorch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    return model, opt


def batch(step, mesh, seed=0, batch_size=128):
    """The batch of `step`: it depends on the step number alone, so a
    resumed run sees the same data."""
    xb, yb = spirals(batch_size, np.random.default_rng([seed, step]))
    placements = [Shard(0), Replicate()]
    return (dtorch.tensor(xb, device_mesh=mesh, placements=placements),
            dtorch.tensor(yb, device_mesh=mesh, placements=placements))


def save(path, model, opt, step):
    dcp.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step,
              "rng": dtorch.get_rng_state()}, checkpoint_id=path)


def load(path, model, opt):
    """Loads the checkpoint into `model` and `opt` (resharded to their
    placements); returns its step."""
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "step": 0, "rng": None}
    dcp.load(state, checkpoint_id=path)
    opt.load_state_dict(state["optim"])
    dtorch.set_rng_state(state["rng"])
    # The load's own work runs now, in a segment of its own, so the next
    # training step is the segment the session has compiled (and fused)
    # before: a cache hit. (The losses would be bitwise the same without
    # it: unfused and fused kernels give the same bits.)
    dtorch.synchronize()
    return state["step"]


def kill_one_worker():
    """SIGKILLs this session's last worker process (fault injection)."""
    pids = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "dtorch-worker"],
                          capture_output=True, text=True).stdout.split()
    victim = max(int(p) for p in pids)
    os.kill(victim, signal.SIGKILL)
    return victim


def train(steps=40, every=5, kill_at=None, checkpoint_dir=None, seed=0, log=print):
    """Returns the loss of every step (after a recovery, the recomputed
    steps' losses replace the lost ones) and the number of recoveries."""
    checkpoint_dir = checkpoint_dir or tempfile.mkdtemp(prefix="dtorch-recovery-")
    path = os.path.join(checkpoint_dir, "latest")
    mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dtorch.manual_seed(seed)
    model, opt = build(mesh)
    step = 0
    save(path, model, opt, step)
    losses = {}
    recoveries = 0
    while step < steps:
        try:
            if kill_at is not None and step == kill_at and recoveries == 0:
                log(f"step {step:3d}  killing worker pid {kill_one_worker()}")
            x, y = batch(step, mesh, seed)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[step] = loss.item()
            step += 1
            if step % every == 0:
                save(path, model, opt, step)
                log(f"step {step:3d}  loss {losses[step - 1]:.4f}  (checkpoint)")
        except dtorch.WorkerError as error:
            recoveries += 1
            info = dtorch.restart()
            log(f"step {step:3d}  {type(error).__name__}: {str(error)[:120]}")
            log(f"          restarted ranks {info.replaced_ranks} in {info.seconds:.2f} s")
            # The old parameters had shards on the lost ranks: new objects,
            # filled from the checkpoint.
            model, opt = build(mesh)
            step = load(path, model, opt)
            log(f"          resumed from the checkpoint of step {step}")
    return [losses[s] for s in range(steps)], recoveries


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--kill-at", type=int, default=17)
    p.add_argument("--checkpoint-dir", default=None)
    args = p.parse_args()
    losses, recoveries = train(args.steps, args.every, args.kill_at, args.checkpoint_dir)
    print(f"{len(losses)} steps, {recoveries} recovery(ies), final loss {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
