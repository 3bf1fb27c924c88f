"""Trains an MLP with dtorch to tell two interleaved spirals apart, on a 2x2
mesh: the batch is split over "dp", the hidden layer over "tp".

    python3 examples/mlp.py
"""
import numpy as np

import dtorch
import dtorch.nn as nn
import dtorch.nn.functional as F
from dtorch import Replicate, Shard


def spirals(n, rng):
    """n points of two spirals in the plane, [n, 2] float32, and labels [n] int64."""
    t = rng.uniform(0.25, 1.0, n) * 3 * np.pi
    label = rng.integers(0, 2, n)
    r = t / (3 * np.pi)
    x = np.stack([r * np.cos(t + np.pi * label), r * np.sin(t + np.pi * label)], 1)
    return (x + rng.normal(0, 0.02, x.shape)).astype(np.float32), label.astype(np.int64)


def train(steps=300, batch_size=128, hidden=64, lr=1e-2, seed=0, log=print):
    mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dtorch.manual_seed(seed)
    colwise, rowwise = [Replicate(), Shard(0)], {"weight": [Replicate(), Shard(1)]}
    model = nn.Sequential(
        nn.Linear(2, hidden, device_mesh=mesh, placements=colwise), nn.Tanh(),
        nn.Linear(hidden, hidden, device_mesh=mesh, placements=rowwise), nn.Tanh(),
        nn.Linear(hidden, 2, device_mesh=mesh))
    opt = dtorch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rng = np.random.default_rng(seed)
    losses = []
    for step in range(steps):
        xb, yb = spirals(batch_size, rng)
        x = dtorch.tensor(xb, device_mesh=mesh, placements=[Shard(0), Replicate()])
        y = dtorch.tensor(yb, device_mesh=mesh, placements=[Shard(0), Replicate()])
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if step % 50 == 0 or step == steps - 1:
            log(f"step {step:4d}  loss {losses[-1]:.4f}")
    xt, yt = spirals(1000, rng)
    with dtorch.no_grad():
        pred = model(dtorch.tensor(xt, device_mesh=mesh)).argmax(-1).numpy()
    accuracy = float((pred == yt).mean())
    log(f"test accuracy: {accuracy:.1%}")
    return losses, accuracy


if __name__ == "__main__":
    train()
