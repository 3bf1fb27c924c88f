"""Where the time of a 1-rank GPT training step goes, next to torch eager.

The GPT of bench/train_bench.py (same config, batch and AdamW step) on a
(1,) mesh: the median step time, then a profile (dtorch.profiler) of more
steps, from which the kernel time of rank 0 is summed per kernel name
(calls and milliseconds per step), and the torch eager step time of the same
model measured in the same run (bench/torch_peer.py in build/torch-venv).
Each side also reports its CPU time per step (dtorch: the client process and
its workers), which a busy shared host inflates far less than wall time.

    python3 bench/gpt_step_profile.py [--steps 20] [--profile-steps 5]
        [--compare DTORCH_FOLD_TRANSPOSE=0] [--label NAME]

`--compare` adds a dtorch run with other environment variables (a compiler
option turned off), shown side by side with the default. The variants and
torch run alternately for --rounds rounds and each keeps its fastest (a
shared, busy host slows them alike). Each dtorch measurement runs in a fresh
interpreter. Appends the result, under --label,
to bench/results/gpt_step_profile.json. Not run by the tests.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, HERE)

from bench_support import run_json  # noqa: E402
from train_bench import DEFAULT_TORCH_PYTHON, random_batch, run_torch, set_threads  # noqa: E402


def _children_cpu_seconds():
    """User + system CPU seconds of this process's live children (the
    embedded cluster's workers), from /proc."""
    me, total = os.getpid(), 0
    tick = os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:      # ppid
            total += (int(fields[11]) + int(fields[12])) / tick   # utime, stime
    return total


def dtorch_job(job):
    """Median step seconds and kernel totals per step, in this process."""
    set_threads(job["threads"])
    import dtorch
    from dtorch import Shard
    from model import GPT, GPTConfig, parallelize
    dtorch.init(world_size=1, num_processes=1)
    mesh = dtorch.init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    dtorch.manual_seed(0)
    with dtorch.nn.default_device_mesh(mesh):
        model = parallelize(GPT(GPTConfig(**job["cfg"])), mesh)
    opt = dtorch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    data = np.load(job["data"])
    rng = np.random.default_rng(0)

    def step():
        xb, yb = random_batch("gpt", job["cfg"], job["batch"], rng, data)
        x = dtorch.tensor(xb, device_mesh=mesh, placements=[Shard(0)])
        y = dtorch.tensor(yb, device_mesh=mesh, placements=[Shard(0)])
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    times = []
    for i in range(job["warmup"] + job["steps"]):
        if i == job["warmup"]:
            cpu = time.process_time() + _children_cpu_seconds()
        t = time.perf_counter()
        step()
        if i >= job["warmup"]:
            times.append(time.perf_counter() - t)
    # CPU time of the client and the workers per step: the work done,
    # which a busy host inflates far less than it does wall time.
    cpu = (time.process_time() + _children_cpu_seconds() - cpu) / job["steps"]
    with dtorch.profiler.profile() as prof:
        for _ in range(job["profile_steps"]):
            step()
    kernels = {}
    for e in dtorch.profiler.spans(prof.trace, 0, "compute"):
        if e.get("cat") != "kernel":
            continue
        k = kernels.setdefault(e["name"], [0, 0.0])
        k[0] += 1
        k[1] += e["dur"] / 1e3
    n = job["profile_steps"]
    return {"seconds": statistics.median(times), "cpu_seconds": cpu,
            "kernels": {name: {"calls": c / n, "ms": ms / n}
                        for name, (c, ms) in kernels.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="timed steps (median)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of every variant and torch, alternated; the fastest counts")
    ap.add_argument("--label", default="run")
    ap.add_argument("--compare", action="append", default=[], metavar="ENV=VALUE[,...]",
                    help="also run dtorch with these environment variables (e.g. "
                    "DTORCH_FOLD_TRANSPOSE=0), side by side with the default")
    ap.add_argument("--torch-python", default=DEFAULT_TORCH_PYTHON)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "gpt_step_profile.json"))
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:
        with open(args.job) as f:
            print(json.dumps(dtorch_job(json.load(f))))
        return
    set_threads(args.threads)
    from train import CharTokenizer, load_corpus
    text = load_corpus(("json", "textwrap"))
    tok = CharTokenizer.from_text(text)
    cfg = dict(vocab_size=len(tok.chars), block_size=32, n_layer=2, n_head=4, d_model=64)
    workdir = tempfile.mkdtemp(prefix="gpt_step_profile_")
    data_path = os.path.join(workdir, "data.npy")
    np.save(data_path, tok.encode(text))
    job = {"cfg": cfg, "data": data_path, "batch": args.batch, "warmup": args.warmup,
           "steps": args.steps, "profile_steps": args.profile_steps, "threads": args.threads}
    job_path = os.path.join(workdir, "job.json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    # Each variant: its name and the environment it adds to the dtorch job.
    variants = [("default", {})]
    for i, spec in enumerate(args.compare):
        env = dict(kv.split("=", 1) for kv in spec.split(","))
        variants.insert(i, (spec, env))
    spec = {"models": ["gpt"], "gpt": cfg, "batch": {"gpt": args.batch},
            "warmup": args.warmup, "steps": args.steps, "threads": args.threads,
            "ddp": False}
    # Rounds alternate the variants and torch, so that a busy host slows
    # them alike; each keeps its fastest round (per kernel: its least time).
    rounds = {name: [] for name, _ in variants}
    torch_rounds, torch_cpu_rounds, missing = [], [], None
    for r in range(args.rounds):
        for name, env in variants:
            print(f"round {r + 1}: dtorch, GPT on 1 rank ({name}) ...", flush=True)
            out = run_json([sys.executable, os.path.abspath(__file__), "--job", job_path],
                           timeout=600, env=dict(os.environ, **env))
            if "error" in out:
                raise SystemExit(f"dtorch job ({name}): {out['error']}")
            rounds[name].append(out)
        print(f"round {r + 1}: torch eager ...", flush=True)
        peer, missing = run_torch(args.torch_python, spec)
        if peer:
            torch_rounds.append(peer["train"]["gpt"]["eager_1proc_s"])
            if "eager_1proc_cpu_s" in peer["train"]["gpt"]:
                torch_cpu_rounds.append(peer["train"]["gpt"]["eager_1proc_cpu_s"])
    torch_s = min(torch_rounds) if torch_rounds else None
    torch_cpu = min(torch_cpu_rounds) if torch_cpu_rounds else None
    results = {}
    for name, outs in rounds.items():
        kernels = {}
        for out in outs:
            for kernel, k in out["kernels"].items():
                if kernel not in kernels or k["ms"] < kernels[kernel]["ms"]:
                    kernels[kernel] = k
        results[name] = {"seconds": min(o["seconds"] for o in outs),
                         "cpu_seconds": min(o["cpu_seconds"] for o in outs),
                         "round_seconds": [o["seconds"] for o in outs], "kernels": kernels}

    names = [n for n, _ in variants]
    print(f"\nGPT 1 rank, batch {args.batch}, {args.threads} thread(s), median of "
          f"{args.steps} steps, fastest of {args.rounds} rounds; kernels of rank 0 per "
          f"step from a profile of {args.profile_steps} steps (least per kernel)")
    print(f"torch eager step: " + ("-" if torch_s is None else f"{torch_s * 1e3:.2f} ms")
          + ("" if torch_cpu is None else f", {torch_cpu * 1e3:.2f} cpu ms")
          + (f" ({missing})" if missing else ""))
    width = max(22, max(len(n) for n in names) + 2)
    print(f"{'':22}" + "".join(f"{n:>{width}}" for n in names))
    print(f"{'step ms':22}" + "".join(
        f"{results[n]['seconds'] * 1e3:>{width}.2f}" for n in names))
    print(f"{'cpu ms per step':22}" + "".join(
        f"{results[n]['cpu_seconds'] * 1e3:>{width}.2f}" for n in names))
    if torch_s:
        print(f"{'ratio to torch eager':22}" + "".join(
            f"{results[n]['seconds'] / torch_s:>{width}.2f}" for n in names))
    print(f"{'kernels ms':22}" + "".join(
        f"{sum(k['ms'] for k in results[n]['kernels'].values()):>{width}.2f}" for n in names))
    every = sorted({k for n in names for k in results[n]["kernels"]},
                   key=lambda k: -max(results[n]["kernels"].get(k, {"ms": 0})["ms"]
                                      for n in names))
    for kernel in every:
        cells = []
        for n in names:
            k = results[n]["kernels"].get(kernel)
            cells.append("-" if k is None else f"{k['ms']:.3f} ms x{k['calls']:.0f}")
        print(f"{kernel:22}" + "".join(f"{c:>{width}}" for c in cells))

    result = {"label": args.label, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "threads": args.threads, "batch": args.batch, "steps": args.steps,
              "config": cfg, "rounds": args.rounds,
              "torch_eager_step_ms": None if torch_s is None else torch_s * 1e3,
              "torch_round_ms": [t * 1e3 for t in torch_rounds],
              "torch_eager_cpu_ms": None if torch_cpu is None else torch_cpu * 1e3,
              "torch_missing": missing,
              "dtorch": {n: {"environment": env, "step_ms": results[n]["seconds"] * 1e3,
                             "round_step_ms": [t * 1e3 for t in results[n]["round_seconds"]],
                             "cpu_ms_per_step": results[n]["cpu_seconds"] * 1e3,
                             "kernel_ms_per_step": sum(k["ms"] for k in
                                                       results[n]["kernels"].values()),
                             "kernels": results[n]["kernels"]} for n, env in variants}}
    runs = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            runs = json.load(f)
    runs = [r for r in runs if r.get("label") != args.label] + [result]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(runs, f, indent=1)

if __name__ == "__main__":
    main()
