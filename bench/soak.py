"""Soak: a long training loop on the embedded cluster, watching every
process's resident memory, open file descriptors and threads over time.

The MLP of examples/mlp.py (two spirals, a 2x2 "dp" x "tp" mesh on 2 worker
processes, AdamW) trains for --steps steps; every step records, runs and
fetches its loss (`loss.item()`), as a training loop that logs every loss
does. Every --every steps the client and each worker process is sampled
from /proc: VmRSS, the number of entries in /proc/PID/fd and the number of
threads. The training runs in a child interpreter of its own, so the
figures are those of a fresh session.

Reported per process: RSS at step --from (1,000 by default, after warm-up:
compiles, caches and allocator pools are filled) and at the last step, the
growth between the two in percent, and the descriptor and thread counts at
both points. The goals of issue 11: RSS growth under 5 %, no growth of
descriptors or threads.

    python3 bench/soak.py [--steps 10000] [--every 250] [--from 1000]
                          [--out bench/results/soak]

Writes table.md, results.json and soak.png to the output folder. Not run by
the tests (test/python/test_soak_bench.py runs a short version).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def proc_sample(pid):
    """(rss_kib, fds, threads) of `pid`, read from /proc."""
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds, threads


def worker_pids(parent):
    """The dtorch-worker processes started by `parent` (the embedded
    cluster's children), in pid order."""
    out = subprocess.run(["pgrep", "-P", str(parent), "-f", "dtorch-worker"],
                         capture_output=True, text=True).stdout.split()
    return sorted(int(p) for p in out)


def child(steps, every):
    """Runs in the child interpreter: trains and prints one JSON line with
    the samples."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import numpy as np

    import dtorch
    import dtorch.nn as nn
    import dtorch.nn.functional as F
    from dtorch import Replicate, Shard
    from mlp import spirals

    dtorch.init(world_size=4, num_processes=2)
    mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dtorch.manual_seed(0)
    hidden = 64
    colwise, rowwise = [Replicate(), Shard(0)], {"weight": [Replicate(), Shard(1)]}
    model = nn.Sequential(
        nn.Linear(2, hidden, device_mesh=mesh, placements=colwise), nn.Tanh(),
        nn.Linear(hidden, hidden, device_mesh=mesh, placements=rowwise), nn.Tanh(),
        nn.Linear(hidden, 2, device_mesh=mesh))
    opt = dtorch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    rng = np.random.default_rng(0)
    me = os.getpid()
    workers = worker_pids(me)
    names = ["client"] + [f"worker {i}" for i in range(len(workers))]
    pids = [me] + workers
    samples = []
    losses = []
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        xb, yb = spirals(128, rng)
        x = dtorch.tensor(xb, device_mesh=mesh, placements=[Shard(0), Replicate()])
        y = dtorch.tensor(yb, device_mesh=mesh, placements=[Shard(0), Replicate()])
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if step == 1 or step % every == 0:
            samples.append({"step": step, "seconds": time.perf_counter() - t0,
                            "procs": [proc_sample(p) for p in pids]})
    dtorch.shutdown()
    print(json.dumps({"names": names, "samples": samples,
                      "first_loss": losses[0], "last_loss": losses[-1],
                      "ms_per_step": 1e3 * (time.perf_counter() - t0) / steps}))


def summarize(result, start_step):
    """One row per process: the figures at `start_step` (or the first sample
    after it) and at the last sample."""
    samples = result["samples"]
    base = next(s for s in samples if s["step"] >= start_step)
    last = samples[-1]
    rows = []
    for i, name in enumerate(result["names"]):
        (rss0, fd0, th0), (rss1, fd1, th1) = base["procs"][i], last["procs"][i]
        peak = max(s["procs"][i][0] for s in samples if s["step"] >= start_step)
        rows.append({"process": name, "from_step": base["step"], "to_step": last["step"],
                     "rss_mib_from": rss0 / 1024, "rss_mib_to": rss1 / 1024,
                     "rss_mib_peak": peak / 1024,
                     "rss_growth_pct": 100.0 * (rss1 - rss0) / rss0,
                     "fds_from": fd0, "fds_to": fd1, "threads_from": th0, "threads_to": th1})
    return rows


def verdict(rows):
    """Whether the goals hold: RSS growth under 5 %, no growth of descriptors
    or threads, for every process."""
    return all(r["rss_growth_pct"] < 5.0 and r["fds_to"] <= r["fds_from"]
               and r["threads_to"] <= r["threads_from"] for r in rows)


def table(rows, result):
    lines = [f"Soak: {result['samples'][-1]['step']} steps of the 2x2 MLP, "
             f"{result['ms_per_step']:.2f} ms/step, loss {result['first_loss']:.4f} -> "
             f"{result['last_loss']:.4f}", "",
             "| process | RSS MiB at step {0} | RSS MiB at step {1} | peak MiB | growth % "
             "| fds | threads |".format(rows[0]["from_step"], rows[0]["to_step"]),
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['process']} | {r['rss_mib_from']:.1f} | {r['rss_mib_to']:.1f} | "
                     f"{r['rss_mib_peak']:.1f} | {r['rss_growth_pct']:+.2f} | "
                     f"{r['fds_from']} -> {r['fds_to']} | "
                     f"{r['threads_from']} -> {r['threads_to']} |")
    lines += ["", "goals (RSS growth < 5 %, no fd or thread growth): "
              + ("met" if verdict(rows) else "NOT met")]
    return "\n".join(lines)


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s["step"] for s in result["samples"]]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for i, name in enumerate(result["names"]):
        for ax, k in zip(axes, range(3)):
            values = [s["procs"][i][k] / (1024 if k == 0 else 1) for s in result["samples"]]
            ax.plot(steps, values, label=name)
    for ax, title in zip(axes, ["RSS (MiB)", "open file descriptors", "threads"]):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10000)
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--from", dest="start", type=int, default=1000)
    p.add_argument("--out", default=os.path.join(HERE, "results", "soak"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args.steps, args.every)
        return
    if args.start > args.steps:
        p.error("--from must not exceed --steps")
    sys.path.insert(0, HERE)
    from bench_support import run_json, write_table_and_json
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    result = run_json([sys.executable, os.path.abspath(__file__), "--child",
                       "--steps", str(args.steps), "--every", str(args.every)],
                      timeout=max(600, args.steps * 0.5), env=env)
    if "error" in result:
        sys.exit(f"soak failed: {result['error']}")
    rows = summarize(result, args.start)
    text = table(rows, result)
    print(text)
    write_table_and_json(args.out, text + "\n",
                         {"rows": rows, "goals_met": verdict(rows), **result})
    plot(result, os.path.join(args.out, "soak.png"))


if __name__ == "__main__":
    main()
