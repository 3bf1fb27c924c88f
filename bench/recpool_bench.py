"""The client's recording cost with and without the record pool.

Client main-thread CPU (``time.thread_time``, which a busy host inflates
far less than wall time) of the cached 1-rank GPT training step of
bench/train_bench.py --gpt-step (per phase: batch upload, forward,
backward, optimizer, loss.item()), and the client CPU per op of cached
elementwise chains on a (1,) mesh (2,000 ops per chain, then a fetch):
multiplications by a Python number, additions of a tensor, and the same
additions with autograd records (the operand requires grad).

The variants run alternately, each in a fresh interpreter, for --rounds
rounds: the default, DTORCH_RECORD_POOL=0 (lib/Client/RecordPool.h off),
and with --baseline PYTHONPATH the package found there (a copy of
python/ built from another commit, e.g. main). The table gives the median
over rounds of each round's median (least round in brackets), the ratio
to the first variant, and the load average.

    python3 bench/recpool_bench.py [--rounds 5] [--steps 60]
        [--baseline /tmp/main_python] [--out bench/results/recpool]

Not run by the tests.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from bench_support import write_table_and_json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, HERE)

PHASES = ("batch", "forward", "backward", "optimizer", "fetch")
CHAIN_OPS = 2000


def child(job):
    from train_bench import gpt_step_session
    dtorch, model, opt, next_batch = gpt_step_session(job)
    phases = {k: [] for k in PHASES}
    for i in range(job["warmup"] + job["steps"]):
        c = [time.thread_time()]
        x, y = next_batch()
        c.append(time.thread_time())
        _, loss = model(x, y)
        c.append(time.thread_time())
        loss.backward()
        c.append(time.thread_time())
        opt.step()
        opt.zero_grad(set_to_none=True)
        c.append(time.thread_time())
        loss.item()
        c.append(time.thread_time())
        if i >= job["warmup"]:
            for k, a, b in zip(PHASES, c, c[1:]):
                phases[k].append((b - a) * 1e3)
    out = {"phases_cpu_ms": {k: statistics.median(v) for k, v in phases.items()}}
    out["phases_cpu_ms"]["step"] = statistics.median(
        sum(phases[k][i] for k in PHASES) for i in range(job["steps"]))

    from dtorch import Shard
    m = model.head.weight.device_mesh
    base = dtorch.ones(64, 64, device_mesh=m, placements=[Shard(0)])
    leaf = dtorch.ones(64, 64, device_mesh=m, placements=[Shard(0)], requires_grad=True)
    chains = {"mul by scalar": (lambda y: y * 1.0001, base),
              "add tensor": (lambda y: y + base, base),
              "add tensor, grad records": (lambda y: y + leaf, leaf)}
    per_op = {}
    for name, (step, start) in chains.items():
        samples = []
        for r in range(job["chain_reps"] + 2):
            y = start
            t = time.thread_time()
            for _ in range(CHAIN_OPS):
                y = step(y)
            spent = time.thread_time() - t
            y.sum().item()
            del y
            if r >= 2:  # the first two compile and warm the caches
                samples.append(spent / CHAIN_OPS * 1e6)
        per_op[name] = statistics.median(samples)
    out["chain_cpu_us_per_op"] = per_op
    out["pool"] = dtorch._C._record_pool_stats() if hasattr(dtorch._C, "_record_pool_stats") \
        else None
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--chain-reps", type=int, default=5)
    ap.add_argument("--baseline", help="PYTHONPATH of a baseline build's package")
    ap.add_argument("--out", help="folder for results.json and table.md")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        with open(args.job) as f:
            print("RESULT " + json.dumps(child(json.load(f))))
        return
    from train_bench import prepare_gpt_step, set_threads, write_job
    set_threads(1)
    cfg, workdir, data, weights = prepare_gpt_step("recpool_", 1)
    job = {"cfg": cfg, "data": data, "weights": weights, "batch": 16, "threads": 1,
           "steps": args.steps, "warmup": args.warmup, "chain_reps": args.chain_reps}
    path = write_job(workdir, job)
    variants = [("pool on", {}), ("DTORCH_RECORD_POOL=0", {"DTORCH_RECORD_POOL": "0"})]
    if args.baseline:
        variants.append(("baseline build", {"PYTHONPATH": args.baseline}))
    rounds = {n: [] for n, _ in variants}
    loads = []
    for r in range(args.rounds):
        for name, env in variants:
            loads.append(os.getloadavg()[0])
            run_env = dict(os.environ, **env)
            if "PYTHONPATH" not in env:
                run_env["PYTHONPATH"] = os.path.join(ROOT, "python")
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--job", path],
                                  capture_output=True, text=True, env=run_env, timeout=900)
            line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
            if not line:
                raise SystemExit(f"{name}: {done.stderr[-2000:]}")
            rounds[name].append(json.loads(line[-1][7:]))
            print(f"round {r + 1} {name}: step {rounds[name][-1]['phases_cpu_ms']['step']:.3f} ms",
                  flush=True)
    names = [n for n, _ in variants]
    rows = [(f"GPT step, main thread: {p} (ms)", "phases_cpu_ms", p)
            for p in PHASES + ("step",)]
    rows += [(f"chain: {c} (us/op)", "chain_cpu_us_per_op", c)
             for c in rounds[names[0]][0]["chain_cpu_us_per_op"]]
    lines = [f"Client main-thread CPU, median over {args.rounds} interleaved rounds of each "
             f"round's median (least round in brackets); ratio to '{names[0]}'; "
             f"{args.steps} GPT steps per round; load average {min(loads):.1f}-{max(loads):.1f} "
             f"(2 cores)", "",
             "| measure | " + " | ".join(names) + " | " +
             " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " |",
             "|---|" + "---|" * (2 * len(names) - 1)]
    table = {}
    for label, group, key in rows:
        meds = {}
        cells = []
        for n in names:
            vals = [o[group][key] for o in rounds[n]]
            meds[n] = statistics.median(vals)
            cells.append(f"{meds[n]:.3f} ({min(vals):.3f})")
        ratios = [f"{meds[n] / meds[names[0]]:.2f}" for n in names[1:]]
        table[label] = meds
        lines.append(f"| {label} | " + " | ".join(cells + ratios) + " |")
    text = "\n".join(lines)
    print("\n" + text)
    if args.out:
        write_table_and_json(args.out, text + "\n", {"rounds": rounds, "loads": loads,
                                                     "medians": table, "steps": args.steps})


if __name__ == "__main__":
    main()
