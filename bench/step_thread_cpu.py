"""CPU time and context switches per thread of a cached 1-rank GPT training step.

Where the fixed cost of a cached step goes, in CPU time (which a busy host
inflates far less than wall time): the client's main thread per phase of
the step (batch upload, forward, backward, optimizer, loss fetch; from
`time.thread_time`), the controller thread, the cluster's I/O thread and
the worker process (all its threads), each from the kernel's per-thread
run time (`/proc/.../schedstat`, nanoseconds). The model, batch and AdamW
step are those of bench/train_bench.py --gpt-step. Per part (a thread
or a group of threads of one kind), it also counts the context switches per
step, voluntary (the thread blocked: a wake-up each) and involuntary (it was
preempted), from /proc/PID/task/TID/status: the client's main thread, its
controller thread (dtorch-ctrl), its cluster I/O thread (dtorch-io), its
ZeroMQ threads (ZMQbg/...), the worker's main thread (its I/O loop), its
rank thread (dtorch-rank), its ZeroMQ threads, and any other thread.

    python3 bench/step_thread_cpu.py [--steps 40] [--rounds 3]
        [--compare DTORCH_BATCH_FREES=0] [--loss-fetch sync|async] [--out DIR]

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

from bench_support import parse_args_or_run_job, run_json, write_table_and_json  # noqa: E402
from train_bench import compare_variants, gpt_step_job, gpt_step_session  # noqa: E402

PHASES = ("batch", "forward", "backward", "optimizer", "fetch")


def _thread_names_and_ns(pid):
    """{tid: (name, ns on CPU, voluntary, involuntary context switches)} of
    every thread of process `pid`."""
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
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = f.read()
        except OSError:
            continue
        vol = invol = 0
        for line in status.splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                vol = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                invol = int(line.split()[1])
        out[int(tid)] = (name, ns, vol, invol)
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


def _client_part(tid, name, main_tid):
    return ("client main" if tid == main_tid else
            "client controller" if name == "dtorch-ctrl" else
            "client cluster I/O" if name == "dtorch-io" else
            "client zmq" if name.startswith("ZMQbg") else "client other")


def _worker_part(pid, tid, name):
    return ("worker main (I/O)" if tid == pid else
            "worker rank" if name == "dtorch-rank" else
            "worker zmq" if name.startswith("ZMQbg") else "worker other")


def _snapshot(me, main_tid, workers):
    """(ns on CPU, voluntary, involuntary switches) by part."""
    parts = {}

    def add(part, ns, vol, invol):
        old = parts.get(part, (0, 0, 0))
        parts[part] = (old[0] + ns, old[1] + vol, old[2] + invol)

    for tid, (name, ns, vol, invol) in _thread_names_and_ns(me).items():
        add(_client_part(tid, name, main_tid), ns, vol, invol)
    for w in workers:
        for tid, (name, ns, vol, invol) in _thread_names_and_ns(w).items():
            add(_worker_part(w, tid, name), ns, vol, invol)
    return parts


def _delta(before, after, index, scale=1.0):
    out = {k: (after[k][index] - before.get(k, (0, 0, 0))[index]) * scale for k in after}
    out["all threads"] = sum(out.values())
    return out


def job_main(job):
    dtorch, model, opt, next_batch = gpt_step_session(job)
    me, main_tid = os.getpid(), __import__("threading").get_native_id()
    workers = _children(me)
    phases = {k: [] for k in PHASES}
    parts, voluntary, involuntary, walls = [], [], [], []
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
    sent = None
    for i in range(job["warmup"] + job["steps"]):
        if i == job["warmup"]:
            sent = dtorch._C.messages_sent()
        before = _snapshot(me, main_tid, workers)
        t0 = time.perf_counter()
        c, value = step()
        if value is not None:
            losses.append(value)
        if asynchronous:
            dtorch.synchronize()  # the step's own work, not the next one's
        wall = time.perf_counter() - t0
        after = _snapshot(me, main_tid, workers)
        if i < job["warmup"]:
            continue
        for name, a, b in zip(PHASES, c, c[1:]):
            phases[name].append((b - a) * 1e3)
        walls.append(wall * 1e3)
        parts.append(_delta(before, after, 0, 1e-6))
        voluntary.append(_delta(before, after, 1))
        involuntary.append(_delta(before, after, 2))
    for f in pending:
        losses.append(f.result())
    keys = sorted({k for p in parts for k in p})

    def per_step(samples):  # the mean: counts are small integers
        return {k: statistics.fmean(p.get(k, 0) for p in samples) for k in keys}

    return {"phases_cpu_ms": {k: statistics.median(v) for k, v in phases.items()},
            "step_wall_ms": statistics.median(walls),
            "messages_per_step": (dtorch._C.messages_sent() - sent) / job["steps"],
            "threads_cpu_ms": {k: statistics.median(p.get(k, 0.0) for p in parts)
                               for k in keys},
            "voluntary_switches": per_step(voluntary),
            "involuntary_switches": per_step(involuntary),
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
    ap.add_argument("--out", help="write table.md and results.json into this directory")
    args = parse_args_or_run_job(ap, argv, job_main)
    if args is None:
        return
    cfg, workdir, job, job_path = gpt_step_job(
        "step_thread_cpu_", args.threads, batch=args.batch, warmup=args.warmup,
        steps=args.steps, loss_fetch=args.loss_fetch)
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
    names = [n for n, _ in variants]
    lines = [f"CPU ms per step, median over {args.rounds} rounds of each round's median; "
             f"context switches per step (voluntary: the thread blocked and was woken; "
             f"involuntary: preempted), median over rounds of each round's mean; least "
             f"round in brackets. {args.steps} steps after {args.warmup} warm-up, loss fetch "
             f"{args.loss_fetch}, variants interleaved, load {min(loads):.1f}-{max(loads):.1f} "
             f"(1-min load average before each round).", "",
             "| part | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    rows = [("step wall ms", "step_wall_ms", None),
            ("messages to the workers", "messages_per_step", None)]
    rows += [("main CPU: " + p, "phases_cpu_ms", p) for p in PHASES]
    for table, label in (("threads_cpu_ms", "CPU ms"), ("voluntary_switches", "vol. csw"),
                         ("involuntary_switches", "invol. csw")):
        keys = sorted({k for rs in rounds.values() for o in rs for k in o[table]},
                      key=lambda k: (k == "all threads", k))
        rows += [(f"{label}: {k}", table, k) for k in keys]
    for label, table, key in rows:
        cells = []
        for n in names:
            vals = [o[table] if key is None else o[table].get(key, 0.0) for o in rounds[n]]
            cells.append(f"{statistics.median(vals):.3f} ({min(vals):.3f})"
                         if table in ("threads_cpu_ms", "phases_cpu_ms", "step_wall_ms",
                                      "messages_per_step")
                         else f"{statistics.median(vals):.1f} ({min(vals):.1f})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if len(names) > 1:
        lines.append("")
        for n in names[1:]:
            for table, key, what in (("step_wall_ms", None, "step wall"),
                                     ("threads_cpu_ms", "all threads", "CPU, all threads"),
                                     ("voluntary_switches", "all threads", "voluntary switches"),
                                     ("involuntary_switches", "all threads",
                                      "involuntary switches")):
                def med(v):
                    return statistics.median(o[table] if key is None else o[table][key]
                                             for o in rounds[v])
                lines.append(f"- {what}: {names[0]} / {n} = {med(names[0]) / med(n):.2f}")
    for n in names:
        lines.append(f"- {n}: last losses {rounds[n][-1]['losses']}")
    table = "\n".join(lines) + "\n"
    print("\n" + table)
    result = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv[1:],
              "variants": dict(variants), "rounds": rounds, "loads": loads}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if args.out:
        write_table_and_json(args.out, table, result)


if __name__ == "__main__":
    main()
