"""Pipeline parallelism: the bubble of GPipe, 1F1B and interleaved 1F1B
measured from the profiler trace, next to the theoretical (p - 1) /
(m + p - 1) (interleaved with v stages per rank: (p - 1) / (v m + p - 1)),
and each stage's peak memory under every schedule.

A chain of equal Linear + ReLU layers (--width, --layers per stage) runs as
a pipeline of p stages (one rank each, a (p,) "pp" mesh of the embedded
cluster) with m microbatches of --rows rows (interleaved: --chunks stages per
rank, the same layers cut finer); each setting runs in a fresh
interpreter (a rank's peak memory is a high-water mark of its process).
After --warmup steps, one step is profiled: for each stage's rank, the
bubble is the part of the step (first kernel of any stage to the last one)
in which that rank runs no kernel. Peak memory is the rank's high-water
mark (dtorch.memory_stats()["peak_bytes"]); "activations" subtracts what the
rank holds after the step (parameters and gradients).

Writes table.md and results.json to bench/results/pipeline/. Not run by the
tests (test_pipeline_bench.py runs a tiny setting).

    python3 bench/pipeline_bench.py [--stages 4] [--microbatches 8] [--width 512]
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_support import run_job_file  # noqa: E402

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
    trace = os.path.join(job["workdir"], f"trace-{job['schedule']}.json")
    with dtorch.profiler.profile(trace):
        loss = step()
    with open(trace) as f:
        data = json.load(f)
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    stage_ranks = [int(pp.stage_meshes[s].mesh.reshape(-1)[0]) for s in range(p)]  # by position
    pids = [next(pid for pid, n in names.items() if n == f"rank {r}") for r in stage_ranks]
    bubbles, span_us = bubbles_from_trace(events, pids)
    stats = {r["rank"]: r for r in dtorch.memory_stats()}
    out = dict(job, loss=loss, bubbles=bubbles, step_ms=span_us / 1e3,
               peak_bytes=[stats[r]["peak_bytes"] for r in stage_ranks],
               held_bytes=[stats[r]["bytes"] for r in stage_ranks],
               theoretical=(p - 1) / (v * m + p - 1))
    dtorch.shutdown()
    return out


def run_in_fresh_interpreter(job):
    return run_job_file(__file__, job)


def measure(stages, microbatches, rows, width, layers, warmup, workdir, chunks=2):
    """GPipe, 1F1B and (with chunks > 1 and layers divisible by it)
    interleaved 1F1B, each in a fresh interpreter."""
    results = []
    settings = [("GPipe", 1), ("1F1B", 1)]
    if chunks > 1 and layers % chunks == 0 and microbatches % stages == 0:
        settings.append(("Interleaved1F1B", chunks))
    for schedule, v in settings:
        results.append(run_in_fresh_interpreter(dict(
            schedule=schedule, chunks=v, stages=stages, microbatches=microbatches, rows=rows,
            width=width, layers=layers, warmup=warmup, workdir=workdir)))
    return results


def table(results):
    lines = ["| schedule | p | m | bubble (measured, mean of ranks) | per rank | "
             "theoretical (p-1)/(vm+p-1) | step ms | activation peak per rank (MiB) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        act = [(pk - held) / 2 ** 20 for pk, held in zip(r["peak_bytes"], r["held_bytes"])]
        lines.append(
            f"| {r['schedule']} | {r['stages']} | {r['microbatches']} | "
            f"{np.mean(r['bubbles']):.2f} | {', '.join(f'{b:.2f}' for b in r['bubbles'])} | "
            f"{r['theoretical']:.2f} | {r['step_ms']:.1f} | "
            f"{', '.join(f'{a:.1f}' for a in act)} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", help=argparse.SUPPRESS)
    parser.add_argument("--stages", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=2, help="stages per rank (interleaved)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "pipeline"))
    args = parser.parse_args()
    if args.job:
        with open(args.job) as f:
            print(json.dumps(run_job(json.load(f))))
        return
    with tempfile.TemporaryDirectory() as workdir:
        results = measure(args.stages, args.microbatches, args.rows, args.width, args.layers,
                          args.warmup, workdir, args.chunks)
    text = table(results)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
