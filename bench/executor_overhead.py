"""The executor's own cost per run of the GPT step on rank 0: the time from
the start of a run to its first kernel (setup), the gaps between
consecutive kernels, and the time from the last kernel to the end of the
run (teardown), read from dtorch.profiler traces.

The GPT of bench/train_bench.py (same config and batch as
bench/gpt_step_profile.py) trains on a (1,) mesh; each variant runs in a
fresh interpreter, the variants alternate for --rounds rounds, and each
reports, over the profiled runs of all its rounds, the median and the least
setup, gap and teardown. The default variant compares the executor's
per-upload plans with the unplanned path:

    python3 bench/executor_overhead.py [--rounds 3] [--profile-steps 10]
        [--compare DTORCH_EXEC_PLAN=0] [--out bench/results/executor_overhead.json]

Not run by the tests (bench/results/gpt_step_vs_torch.md quotes it).
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
                         gpt_train_step, set_threads, write_job)


def run_phases(trace, rank=0):
    """Per run of `rank` in `trace`: setup, teardown and the gaps between
    its kernels (microseconds), and its kernel count and length."""
    import dtorch.profiler as profiler
    compute = profiler.spans(trace, rank, "compute")
    runs = [e for e in compute if e["cat"] == "run"]
    kernels = [e for e in compute if e["cat"] == "kernel"]
    out = []
    for run in runs:
        start, end = run["ts"], run["ts"] + run["dur"]
        inside = [k for k in kernels if start <= k["ts"] and k["ts"] + k["dur"] <= end + 1e-3]
        if not inside:
            continue
        inside.sort(key=lambda k: k["ts"])
        gaps = [b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(inside, inside[1:])]
        out.append({"setup_us": inside[0]["ts"] - start,
                    "teardown_us": end - (inside[-1]["ts"] + inside[-1]["dur"]),
                    "gap_median_us": statistics.median(gaps) if gaps else 0.0,
                    "gap_sum_us": sum(gaps),
                    "kernel_us": sum(k["dur"] for k in inside),
                    "run_us": run["dur"], "kernels": len(inside)})
    return out


def job_main(job):
    dtorch, model, opt, next_batch = gpt_step_session(job)

    step = gpt_train_step(model, opt, next_batch)

    for _ in range(job["warmup"]):
        step()
    losses = []
    with dtorch.profiler.profile() as prof:
        for _ in range(job["profile_steps"]):
            losses.append(step())
    return {"runs": run_phases(prof.trace), "losses": losses,
            "layout": layout_kernels(prof.trace)}


def layout_kernels(trace, rank=0):
    """Per layout op (reshape, transpose): instructions per step run, their
    bytes and the sum of each one's least time over the profiled runs (us),
    and how many of them moved no data (least time under 0.25 us: a view
    or an in-place reshape, whose copy finds the same memory)."""
    import dtorch.profiler as profiler
    best = {}
    for e in profiler.spans(trace, rank, "compute"):
        if e["cat"] != "kernel" or e["name"] not in ("reshape", "transpose"):
            continue
        key = e["args"].get("detail")
        if key not in best or e["dur"] < best[key]["dur"]:
            best[key] = {"name": e["name"], "dur": e["dur"],
                         "bytes": e["args"].get("bytes", 0)}
    out = {}
    for b in best.values():
        k = out.setdefault(b["name"], {"count": 0, "least_us": 0.0, "bytes": 0,
                                       "no_copy": 0})
        k["count"] += 1
        k["least_us"] += b["dur"]
        k["bytes"] += b["bytes"] or 0
        k["no_copy"] += b["dur"] < 0.25
    return out


SUMMARY = [("setup_us", "setup before the first kernel, us"),
           ("gap_median_us", "median gap between kernels, us"),
           ("gap_sum_us", "sum of the gaps per run, us"),
           ("teardown_us", "after the last kernel, us"),
           ("kernel_us", "kernels per run, us"),
           ("run_us", "run span, us")]


def summarize(runs):
    """Median and least of each phase over the runs with the most kernels
    (the training step; smaller runs, such as a parameter upload, are left
    out)."""
    most = max(r["kernels"] for r in runs)
    step_runs = [r for r in runs if r["kernels"] == most]
    return {"kernels": most, "runs": len(step_runs),
            **{key: {"median": statistics.median(r[key] for r in step_runs),
                     "least": min(r[key] for r in step_runs)} for key, _ in SUMMARY}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile-steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--compare", action="append", default=[], metavar="ENV=VALUE[,...]",
                    help="variants besides the default (default: DTORCH_EXEC_PLAN=0)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "executor_overhead.json"))
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:
        with open(args.job) as f:
            print(json.dumps(job_main(json.load(f))))
        return
    set_threads(args.threads)
    cfg, workdir, data_path, weights = prepare_gpt_step("executor_overhead_", args.threads)
    job = {"cfg": cfg, "data": data_path, "weights": weights, "batch": args.batch,
           "warmup": args.warmup, "profile_steps": args.profile_steps,
           "threads": args.threads}
    job_path = write_job(workdir, job)
    variants = [("default", {})] + compare_variants(args.compare or ["DTORCH_EXEC_PLAN=0"])
    runs = {name: [] for name, _ in variants}
    losses = {name: [] for name, _ in variants}
    layout = {name: [] for name, _ in variants}
    loads = []
    for r in range(args.rounds):
        for name, env in variants:
            print(f"round {r + 1}: {name} ...", flush=True)
            loads.append(os.getloadavg()[0])
            out = run_json([sys.executable, os.path.abspath(__file__), "--job", job_path],
                           timeout=600, env=dict(os.environ, **env))
            if "error" in out:
                raise SystemExit(f"job ({name}): {out['error']}")
            runs[name] += out["runs"]
            layout[name].append(out["layout"])
            losses[name].append(out["losses"])
    names = [n for n, _ in variants]
    summary = {n: summarize(runs[n]) for n in names}
    same = all(losses[n] == losses[names[0]] for n in names)
    result = {"time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "rounds": args.rounds, "profile_steps": args.profile_steps,
              "load_min": min(loads), "load_max": max(loads),
              "losses_identical": same, "summary": summary, "layout": layout}
    print(f"\nGPT step on 1 rank, rank 0's runs of {summary[names[0]]['kernels']} kernels, "
          f"{args.rounds} interleaved rounds of {args.profile_steps} profiled steps; load "
          f"{min(loads):.1f}-{max(loads):.1f}; losses identical across variants: {same}")
    width = max(24, max(len(n) for n in names) + 2)
    print(f"{'median / least':36}" + "".join(f"{n:>{width}}" for n in names))
    for key, label in SUMMARY:
        print(f"{label:36}" + "".join(
            f"{summary[n][key]['median']:>{width - 10}.2f} / {summary[n][key]['least']:<7.2f}"
            for n in names))
    for n in names:
        for op, k in sorted(layout[n][-1].items()):
            print(f"{n}: {k['count']} {op} instructions per step, {k['bytes']} bytes, "
                  f"{k['least_us']:.1f} us (least each), {k['no_copy']} under 0.25 us")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    history = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            history = json.load(f)
    history.append(result)
    with open(args.out, "w") as f:
        json.dump(history, f, indent=1)


if __name__ == "__main__":
    main()
