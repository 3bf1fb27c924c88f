"""Client CPU of backward() in the GPT training step, with and without the
backward replay (lib/Client/BackwardReplay.cpp), in one process.

The GPT of `bench/train_bench.py --gpt-step` (same config, batch 16,
AdamW) on a (1,) mesh, or data parallel on (2,) with --ranks 2. Steps
alternate DTORCH_BACKWARD_REPLAY=1 and =0 (autograd.py reads it at every
backward), so a busy host slows both alike; each step's `loss.backward()`
is timed in the main thread's CPU time (`time.thread_time`) and wall time.
Every step also checks that the backward recorded the same ops (the number
of ops and the pending segment's structural hash) in both modes.

    python3 bench/backward_replay_bench.py [--steps 40] [--ranks 1]
        [--json bench/results/backward_replay.json]

Prints a table (least and median per mode, the ratio) and writes JSON.
Not run by the tests.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))


def run(steps, ranks, warmup, batch):
    import dtorch
    from dtorch import Shard
    from dtorch import _C
    from model import GPT, GPTConfig
    dtorch.init(world_size=ranks, num_processes=ranks)
    mesh = dtorch.init_device_mesh("cpu", (ranks,), mesh_dim_names=("dp",))
    cfg = GPTConfig(vocab_size=95, block_size=32, n_layer=2, n_head=4, d_model=64)
    dtorch.manual_seed(0)
    with dtorch.nn.default_device_mesh(mesh):
        model = GPT(cfg)
    model.train()
    opt = dtorch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    rng = np.random.default_rng(0)
    times = {"1": [], "0": []}
    walls = {"1": [], "0": []}
    recorded = {}
    for i in range(warmup + 2 * steps):
        mode = "1" if i % 2 == 0 else "0"
        os.environ["DTORCH_BACKWARD_REPLAY"] = mode
        xb = rng.integers(0, cfg.vocab_size, size=(batch, cfg.block_size))
        yb = rng.integers(0, cfg.vocab_size, size=(batch, cfg.block_size))
        x = dtorch.tensor(xb, device_mesh=mesh, placements=[Shard(0)])
        y = dtorch.tensor(yb, device_mesh=mesh, placements=[Shard(0)])
        _, loss = model(x, y)
        before = _C._pending_structure()
        c, w = time.thread_time(), time.perf_counter()
        loss.backward()
        c, w = time.thread_time() - c, time.perf_counter() - w
        after = _C._pending_structure()
        ops = after[0] - before[0]
        if i >= warmup:
            recorded.setdefault(mode, set()).add((ops, before[1], after[1]))
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        if i >= warmup:
            times[mode].append(c * 1e3)
            walls[mode].append(w * 1e3)
    same = recorded["1"] == recorded["0"] and len(recorded["1"]) == 1
    stats = _C._backward_replay_stats()
    ops = next(iter(recorded["1"]))[0]
    dtorch.shutdown()
    return {"ranks": ranks, "steps": steps, "batch": batch, "ops_per_backward": ops,
            "same_recording": same, "recordings": {k: sorted(v) for k, v in recorded.items()},
            "replay_stats": stats,
            "cpu_ms": times, "wall_ms": walls, "load": os.getloadavg()[0]}


def summary(result):
    rows = []
    for mode, label in (("0", "Python walk (DTORCH_BACKWARD_REPLAY=0)"),
                        ("1", "replay (default)")):
        cpu, wall = result["cpu_ms"][mode], result["wall_ms"][mode]
        rows.append((label, min(cpu), statistics.median(cpu), min(wall),
                     statistics.median(wall)))
    lines = [f"backward() of the GPT step, {result['ranks']} rank(s), "
             f"{result['ops_per_backward']} ops per backward, "
             f"{result['steps']} steps per mode, load {result['load']:.1f}",
             "",
             "| mode | CPU ms, least | CPU ms, median | wall ms, least | wall ms, median |",
             "|---|---|---|---|---|"]
    for label, a, b, c, d in rows:
        lines.append(f"| {label} | {a:.3f} | {b:.3f} | {c:.3f} | {d:.3f} |")
    (_, a0, b0, _, _), (_, a1, b1, _, _) = rows
    lines.append("")
    lines.append(f"CPU ratio walk / replay: least {a0 / a1:.1f}x, median {b0 / b1:.1f}x; "
                 f"same ops recorded in both modes: {result['same_recording']}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40, help="timed steps per mode")
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--json", default=os.path.join(HERE, "results", "backward_replay.json"))
    args = ap.parse_args(argv)
    result = run(args.steps, args.ranks, args.warmup, args.batch)
    print(summary(result))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
