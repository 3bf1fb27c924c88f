"""Pipeline parallelism: the bubble of GPipe, 1F1B and interleaved 1F1B
measured from the profiler trace, next to the theoretical (p - 1) /
(m + p - 1) (interleaved with v stages per rank: (p - 1) / (v m + p - 1)),
and each stage's peak memory under every schedule.

A chain of equal Linear + ReLU layers (--width, --layers per stage) runs as
a pipeline of p stages (one rank each, a (p,) "pp" mesh of the embedded
cluster) with m microbatches of --rows rows (interleaved: --chunks stages per
rank, the same layers cut finer), for every p of --stages and m of
--microbatches; each setting runs in a fresh interpreter (a rank's peak
memory is a high-water mark of its process). After --warmup steps,
--repeats steps are profiled one by one and the fastest is kept: for each
stage's rank, the bubble is the part of the step (first kernel of any stage
to the last one) in which that rank runs no kernel, split into the time it
had no run queued, the time a run waited on a receive, and the rest of the
time inside runs between kernels (instruction overhead and, on a busy host,
the rank's thread waiting for a core). Peak memory is the rank's high-water
mark (dtorch.memory_stats()["peak_bytes"]); "activations" subtracts what the
rank holds after the step (parameters and gradients).

Each setting runs with each way of recording a move's receive
(`PipelineSchedule._receive`): "ahead" (pipeline()'s: at the end of the
receiving rank's action before the one that reads it), "at_use" (with the
action that reads it) and "with_send" (right after its send, how moves were
recorded before: the receive then waits in the receiving rank's in-order
queue and communication stream ahead of work that does not need it). The
variants alternate setting by setting, so they see the same load; the
host's load average is kept with every figure.

Writes table.md, results.json and pipeline.png to bench/results/pipeline/.
Not run by the tests (test_pipeline_bench.py runs a tiny setting).

    python3 bench/pipeline_bench.py [--stages 2,4] [--microbatches 4,8] [--width 512]
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_support import parse_args_or_run_job, run_job_file, write_table_and_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def busy_union(intervals):
    """Total length covered by a list of (start, end) intervals."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def bubbles_from_trace(events, rank_pids):
    """Per rank (pid), the fraction of the step in which it runs no kernel."""
    kernels = {pid: [] for pid in rank_pids}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and e.get("pid") in kernels:
            kernels[e["pid"]].append((e["ts"], e["ts"] + e["dur"]))
    spans = [iv for ivs in kernels.values() for iv in ivs]
    if not spans:
        raise RuntimeError("the trace has no kernels of the stage ranks")
    start = min(a for a, _ in spans)
    stop = max(b for _, b in spans)
    return [1.0 - busy_union(kernels[pid]) / (stop - start) for pid in rank_pids], stop - start


def merged(intervals):
    """The intervals joined where they overlap, sorted."""
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def minus(these, those):
    """The parts of the merged intervals `these` outside the merged `those`."""
    out = []
    for a, b in these:
        cur = a
        for c, d in those:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append([cur, c])
            cur = max(cur, d)
        if cur < b:
            out.append([cur, b])
    return out


def idle_breakdown(events, rank_pids):
    """Per rank (pid), where the step's idle time (no kernel running) goes,
    as fractions of the step: "no_run" (no program running: nothing queued
    yet), "recv_wait" (inside a run while a receive is outstanding) and
    "in_run_other" (inside a run between kernels, no receive outstanding)."""
    spans = {pid: {"kernel": [], "run": [], "recv": []} for pid in rank_pids}
    for e in events:
        if e.get("ph") != "X" or e.get("pid") not in spans:
            continue
        iv = (e["ts"], e["ts"] + e["dur"])
        if e.get("cat") == "kernel":
            spans[e["pid"]]["kernel"].append(iv)
        elif e.get("cat") == "run":
            spans[e["pid"]]["run"].append(iv)
        elif e.get("name") == "recv":
            spans[e["pid"]]["recv"].append(iv)
    all_kernels = [iv for s in spans.values() for iv in s["kernel"]]
    lo, hi = min(a for a, _ in all_kernels), max(b for _, b in all_kernels)
    total = lambda ivs: sum(b - a for a, b in ivs)  # noqa: E731
    out = []
    for pid in rank_pids:
        clip = lambda ivs: merged([(max(a, lo), min(b, hi)) for a, b in ivs  # noqa: E731
                                   if min(b, hi) > max(a, lo)])
        idle = minus([[lo, hi]], clip(spans[pid]["kernel"]))
        runs, recvs = clip(spans[pid]["run"]), clip(spans[pid]["recv"])
        outside = minus(idle, runs)
        inside = minus(idle, outside)
        other = minus(inside, recvs)
        out.append({"no_run": total(outside) / (hi - lo),
                    "recv_wait": (total(inside) - total(other)) / (hi - lo),
                    "in_run_other": total(other) / (hi - lo)})
    return out


def run_job(job):
    """One schedule in this interpreter; returns the measurements."""
    import dtorch
    from dtorch import nn
    from dtorch.distributed.pipelining import pipeline

    p, m, rows, width = job["stages"], job["microbatches"], job["rows"], job["width"]
    v = job.get("chunks", 1)
    dtorch.init(world_size=p)
    mesh = dtorch.init_device_mesh("cpu", (p,), mesh_dim_names=("pp",))
    stages = [nn.Sequential(*[layer for _ in range(job["layers"] // v)
                              for layer in (nn.Linear(width, width), nn.ReLU())])
              for _ in range(p * v)]
    pp = pipeline(stages, mesh["pp"], n_microbatches=m, schedule=job["schedule"])
    pp._receive = job.get("receive", "ahead")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m * rows, width)).astype(np.float32)
    y = rng.standard_normal((m * rows, width)).astype(np.float32)
    loss_fn = dtorch.nn.functional.mse_loss

    def step():
        for s in stages:
            s.zero_grad()
        return pp.step(x, target=y, loss_fn=loss_fn).item()

    for _ in range(job["warmup"]):
        step()
    stage_ranks = [int(pp.stage_meshes[s].mesh.reshape(-1)[0]) for s in range(p)]  # by position
    best = None
    cpu0, load0 = time.process_time(), os.getloadavg()[0]
    for k in range(job.get("repeats", 1)):
        trace = os.path.join(job["workdir"], f"trace-{job['schedule']}-{k}.json")
        with dtorch.profiler.profile(trace):
            loss = step()
        with open(trace) as f:
            data = json.load(f)
        os.unlink(trace)
        events = data["traceEvents"] if isinstance(data, dict) else data
        names = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
        pids = [next(pid for pid, n in names.items() if n == f"rank {r}") for r in stage_ranks]
        bubbles, span_us = bubbles_from_trace(events, pids)
        if best is None or span_us < best[1]:
            best = (bubbles, span_us, idle_breakdown(events, pids), loss)
    bubbles, span_us, breakdown, loss = best
    stats = {r["rank"]: r for r in dtorch.memory_stats()}
    out = dict(job, loss=loss, bubbles=bubbles, step_ms=span_us / 1e3, idle=breakdown,
               peak_bytes=[stats[r]["peak_bytes"] for r in stage_ranks],
               held_bytes=[stats[r]["bytes"] for r in stage_ranks],
               theoretical=(p - 1) / (v * m + p - 1),
               client_cpu_s=time.process_time() - cpu0,
               load=[load0, os.getloadavg()[0]])
    dtorch.shutdown()
    return out


def run_in_fresh_interpreter(job):
    return run_job_file(__file__, job)


def measure(stages, microbatches, rows, width, layers, warmup, workdir, chunks=2,
            repeats=1, variants=("ahead",)):
    """GPipe, 1F1B and (with chunks > 1, layers divisible by it and
    microbatches by stages) interleaved 1F1B, each in a fresh interpreter;
    `variants` lists the ways of recording receives to run
    (PipelineSchedule._receive), alternating per schedule."""
    results = []
    settings = [("GPipe", 1), ("1F1B", 1)]
    if chunks > 1 and layers % chunks == 0 and microbatches % stages == 0:
        settings.append(("Interleaved1F1B", chunks))
    for schedule, v in settings:
        for receive in variants:
            results.append(run_in_fresh_interpreter(dict(
                schedule=schedule, chunks=v, stages=stages, microbatches=microbatches,
                rows=rows, width=width, layers=layers, warmup=warmup, workdir=workdir,
                repeats=repeats, receive=receive)))
    return results


def activations_mib(r):
    return [(pk - held) / 2 ** 20 for pk, held in zip(r["peak_bytes"], r["held_bytes"])]


def table(results):
    lines = ["| schedule | p | m | receives | bubble (measured, mean of ranks) | per rank | "
             "theoretical (p-1)/(vm+p-1) | idle: no run / recv wait / in run | step ms | "
             "activation peak per rank (MiB) | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        idle = r.get("idle") or []
        parts = (" / ".join(f"{np.mean([i[k] for i in idle]):.2f}"
                            for k in ("no_run", "recv_wait", "in_run_other")) if idle else "")
        load = r.get("load")
        lines.append(
            f"| {r['schedule']} | {r['stages']} | {r['microbatches']} | "
            f"{r.get('receive', 'ahead')} | "
            f"{np.mean(r['bubbles']):.2f} | {', '.join(f'{b:.2f}' for b in r['bubbles'])} | "
            f"{r['theoretical']:.2f} | {parts} | {r['step_ms']:.1f} | "
            f"{', '.join(f'{a:.1f}' for a in activations_mib(r))} | "
            f"{'' if not load else f'{load[0]:.0f}-{load[1]:.0f}'} |")
    return "\n".join(lines)


def plot(results, path):
    """Measured bubble (receives recorded ahead) next to theory per
    setting; step time of each way of recording receives; activation
    memory per stage, GPipe vs 1F1B."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ahead = [r for r in results if r.get("receive", "ahead") == "ahead"]
    key = lambda r: (r["schedule"], r["stages"], r["microbatches"])  # noqa: E731
    labels = [f"{r['schedule']}\np={r['stages']} m={r['microbatches']}" for r in ahead]
    x = np.arange(len(ahead))
    fig, axes = plt.subplots(3, 1, figsize=(max(8, len(ahead) * 0.9), 12))
    ax = axes[0]
    ax.bar(x - 0.2, [np.mean(r["bubbles"]) for r in ahead], 0.4, label="measured (mean of ranks)")
    ax.bar(x + 0.2, [r["theoretical"] for r in ahead], 0.4, label="theory (p-1)/(vm+p-1)")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("bubble fraction")
    ax.set_title("Pipeline bubble from the profiler trace (receives recorded ahead)")
    ax.legend(fontsize=8)
    ax = axes[1]
    modes = sorted({r.get("receive", "ahead") for r in results})
    width = 0.8 / len(modes)
    for k, mode in enumerate(modes):
        by = {key(r): r for r in results if r.get("receive", "ahead") == mode}
        ax.bar(x - 0.4 + width * (k + 0.5), [by[key(r)]["step_ms"] if key(r) in by else 0
                                             for r in ahead], width, label=f"receive {mode}")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("step ms (fastest profiled step)")
    ax.legend(fontsize=8)
    ax = axes[2]
    for r in ahead:
        if r["schedule"] in ("GPipe", "1F1B"):
            act = activations_mib(r)
            ax.plot(range(len(act)), act, marker="o",
                    label=f"{r['schedule']} p={r['stages']} m={r['microbatches']}")
    ax.set_xlabel("stage")
    ax.set_ylabel("activation peak (MiB)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages", default="2,4", help="pipeline stages (comma list)")
    parser.add_argument("--microbatches", default="4,8", help="microbatches (comma list)")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=2, help="stages per rank (interleaved)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3,
                        help="profiled steps per setting; the fastest is kept")
    parser.add_argument("--receives", default="ahead,at_use,with_send",
                        help="ways of recording receives to compare (comma list)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the whole grid this many times (rows per round)")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "pipeline"))
    args = parse_args_or_run_job(parser, None, run_job)
    if args is None:
        return
    variants = tuple(args.receives.split(","))
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.rounds):
            for p in [int(v) for v in args.stages.split(",")]:
                for m in [int(v) for v in args.microbatches.split(",")]:
                    results += measure(p, m, args.rows, args.width, args.layers, args.warmup,
                                       workdir, args.chunks, args.repeats, variants)
    text = table(results)
    print(text)
    write_table_and_json(args.out, text + "\n", results)
    plot(results, os.path.join(args.out, "pipeline.png"))


if __name__ == "__main__":
    main()
