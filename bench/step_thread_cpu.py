"""CPU time per thread of a cached 1-rank GPT training step.

Where the fixed cost of a cached step goes, in CPU time (which a busy host
inflates far less than wall time): the client's main thread per phase of
the step (batch upload, forward, backward, optimizer, loss fetch; from
`time.thread_time`), the controller thread, the cluster's I/O thread and
the worker process (all its threads), each from the kernel's per-thread
run time (`/proc/.../schedstat`, nanoseconds). The model, batch and AdamW
step are those of bench/train_bench.py --gpt-step.

    python3 bench/step_thread_cpu.py [--steps 40] [--rounds 3]
        [--compare DTORCH_BATCH_FREES=0] [--loss-fetch sync|async]

`--compare` adds a variant with other environment variables; the variants
run alternately for --rounds rounds, each in a fresh interpreter, and the
table shows, per part, the median over rounds of each round's median per
step (and the least round). Not run by the tests.
"""
import argparse
import json
import os
import statistics
import sys
import time


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, HERE)

from bench_support import run_json  # noqa: E402
from train_bench import (compare_variants, prepare_gpt_step, gpt_step_session,  # noqa: E402
                         set_threads, write_job)

PHASES = ("batch", "forward", "backward", "optimizer", "fetch")


def _thread_names_and_ns(pid):
    """{tid: (name, ns on CPU)} of every thread of process `pid`."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
        except OSError:
            continue
        out[int(tid)] = (name, ns)
    return out


def _children(pid):
    kids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(name))
    return kids


def _snapshot(me, main_tid, workers):
    """ns on CPU by part: the client's threads by name, the workers."""
    parts = {}
    for tid, (name, ns) in _thread_names_and_ns(me).items():
        part = ("client main" if tid == main_tid else
                "controller" if name == "dtorch-ctrl" else
                "cluster I/O" if name == "dtorch-io" else "client other")
        parts[part] = parts.get(part, 0) + ns
    for w in workers:
        parts["workers"] = parts.get("workers", 0) + sum(
            ns for _, ns in _thread_names_and_ns(w).values())
    return parts


def job_main(job):
    dtorch, model, opt, next_batch = gpt_step_session(job)
    me, main_tid = os.getpid(), __import__("threading").get_native_id()
    workers = _children(me)
    phases = {k: [] for k in PHASES}
    parts = []
    pending = []
    asynchronous = job["loss_fetch"] == "async"

    def step():
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
        if asynchronous:
            pending.append(loss.item_async())
            value = pending.pop(0).result() if len(pending) > 1 else None
        else:
            value = loss.item()
        c.append(time.thread_time())
        return c, value

    losses = []
    for i in range(job["warmup"] + job["steps"]):
        before = _snapshot(me, main_tid, workers)
        c, value = step()
        if value is not None:
            losses.append(value)
        if asynchronous:
            dtorch.synchronize()  # the step's own work, not the next one's
        after = _snapshot(me, main_tid, workers)
        if i < job["warmup"]:
            continue
        for name, a, b in zip(PHASES, c, c[1:]):
            phases[name].append((b - a) * 1e3)
        parts.append({k: (after.get(k, 0) - before.get(k, 0)) / 1e6 for k in after})
    for f in pending:
        losses.append(f.result())
    keys = sorted({k for p in parts for k in p})
    return {"phases_cpu_ms": {k: statistics.median(v) for k, v in phases.items()},
            "threads_cpu_ms": {k: statistics.median(p.get(k, 0.0) for p in parts)
                               for k in keys},
            "losses": losses[-3:],
            "stats": {k: v for k, v in dtorch._C.controller_stats().items()
                      if isinstance(v, (int, float))}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--loss-fetch", choices=("sync", "async"), default="sync")
    ap.add_argument("--compare", action="append", default=[], metavar="ENV=VALUE[,...]")
    ap.add_argument("--json", help="also write the rounds here")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:
        with open(args.job) as f:
            print(json.dumps(job_main(json.load(f))))
        return
    set_threads(args.threads)
    cfg, workdir, data_path, weights = prepare_gpt_step("step_thread_cpu_", args.threads)
    job = {"cfg": cfg, "data": data_path, "weights": weights, "batch": args.batch,
           "warmup": args.warmup, "steps": args.steps, "threads": args.threads,
           "loss_fetch": args.loss_fetch}
    job_path = write_job(workdir, job)
    variants = [("default", {})] + compare_variants(args.compare)
    rounds = {name: [] for name, _ in variants}
    loads = []
    for r in range(args.rounds):
        for name, env in variants:
            loads.append(os.getloadavg()[0])
            out = run_json([sys.executable, os.path.abspath(__file__), "--job", job_path],
                           timeout=900, env=dict(os.environ, **env))
            if "error" in out:
                raise SystemExit(f"job ({name}): {out['error']}")
            rounds[name].append(out)
            print(f"round {r + 1} {name}: {json.dumps(out['threads_cpu_ms'])}", flush=True)
    print(f"\nCPU ms per step, median over {args.rounds} rounds of each round's median "
          f"(least round in brackets); {args.steps} steps, loss fetch {args.loss_fetch}, "
          f"load {min(loads):.1f}-{max(loads):.1f}\n")
    names = [n for n, _ in variants]
    print("| part | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    rows = [("main: " + p, "phases_cpu_ms", p) for p in PHASES]
    keys = sorted({k for rs in rounds.values() for o in rs for k in o["threads_cpu_ms"]})
    rows += [(k, "threads_cpu_ms", k) for k in keys]
    for label, table, key in rows:
        cells = []
        for n in names:
            vals = [o[table].get(key, 0.0) for o in rounds[n]]
            cells.append(f"{statistics.median(vals):.3f} ({min(vals):.3f})")
        print(f"| {label} | " + " | ".join(cells) + " |")
    for n in names:
        print(f"{n}: last losses {rounds[n][-1]['losses']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": rounds, "loads": loads}, f, indent=1)


if __name__ == "__main__":
    main()
