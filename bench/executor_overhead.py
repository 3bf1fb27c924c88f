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

The jobs run with DTORCH_TRACE_SETUP=1: the worker traces its setup's
phases (Trace.h, SetupTrace: queue, lookup, bind inputs, bind buffers,
hand-off; "analyze" for a speculative start), and the table breaks the
setup down with them, from the receipt of the RunProgram to the first
kernel. `--out DIR` (not ending in .json) writes DIR/table.md too; the
fast setup's A/B is `--compare DTORCH_FAST_SETUP=0`.

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
    its kernels (microseconds), and its kernel count and length. With the
    worker's "setup" spans (SetupTrace: the phases from the message's
    receipt to the first kernel), also each phase's time and the time from
    the receipt to the first kernel."""
    import dtorch.profiler as profiler
    compute = profiler.spans(trace, rank, "compute")
    runs = sorted((e for e in compute if e["cat"] == "run"), key=lambda e: e["ts"])
    kernels = [e for e in compute if e["cat"] == "kernel"]
    setups = sorted((e for e in compute if e["cat"] == "setup"), key=lambda e: e["ts"])
    out = []
    previous_end = float("-inf")
    for run in runs:
        start, end = run["ts"], run["ts"] + run["dur"]
        inside = [k for k in kernels if start <= k["ts"] and k["ts"] + k["dur"] <= end + 1e-3]
        if not inside:
            previous_end = max(previous_end, end)
            continue
        inside.sort(key=lambda k: k["ts"])
        first = inside[0]["ts"]
        # This run's setup phases: after the previous run, up to its first kernel.
        phases = {}
        mine = [e for e in setups
                if e["ts"] >= previous_end - 1e-3 and e["ts"] + e["dur"] <= first + 1e-3]
        for e in mine:
            phases[e["name"]] = phases.get(e["name"], 0.0) + e["dur"]
        previous_end = max(previous_end, end)
        gaps = [b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(inside, inside[1:])]
        out.append({"name": run["name"], "phases": phases,
                    "receive_us": first - mine[0]["ts"] if mine else None,
                    "setup_us": inside[0]["ts"] - start,
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
    out), and of each setup phase (SetupTrace) over those that have it."""
    most = max(r["kernels"] for r in runs)
    step_runs = [r for r in runs if r["kernels"] == most]

    def stats(values):
        values = [v for v in values if v is not None]
        return ({"median": statistics.median(values), "least": min(values)}
                if values else {"median": float("nan"), "least": float("nan")})
    names = []
    for r in step_runs:
        names += [n for n in r.get("phases", {}) if n not in names]
    return {"kernels": most, "runs": len(step_runs),
            "run_names": sorted({r.get("name", "run") for r in step_runs}),
            **{key: stats(r[key] for r in step_runs) for key, _ in SUMMARY},
            "receive_us": stats(r.get("receive_us") for r in step_runs),
            "phases": {n: stats(r["phases"].get(n) for r in step_runs) for n in names}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile-steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--compare", action="append", default=[], metavar="ENV=VALUE[,...]",
                    help="variants besides the default (default: DTORCH_EXEC_PLAN=0)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "executor_overhead.json"),
                    help="a .json file the run is appended to, or a directory: "
                    "DIR/executor_overhead.json (appended) and DIR/table.md")
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
                           timeout=600,
                           env=dict(os.environ, DTORCH_TRACE_SETUP="1", **env))
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
    print(f"{'receipt to the first kernel, us':36}" + "".join(
        f"{summary[n]['receive_us']['median']:>{width - 10}.2f} / "
        f"{summary[n]['receive_us']['least']:<7.2f}" for n in names))
    table = markdown_table(summary, names, result)
    print("\n" + table)
    for n in names:
        for op, k in sorted(layout[n][-1].items()):
            print(f"{n}: {k['count']} {op} instructions per step, {k['bytes']} bytes, "
                  f"{k['least_us']:.1f} us (least each), {k['no_copy']} under 0.25 us")
    out = args.out
    if not out.endswith(".json"):
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "table.md"), "w") as f:
            f.write(table + "\n")
        out = os.path.join(out, "executor_overhead.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    history = []
    if os.path.exists(out):
        with open(out) as f:
            history = json.load(f)
    history.append(result)
    with open(out, "w") as f:
        json.dump(history, f, indent=1)


def markdown_table(summary, names, result):
    """The summary as markdown: each phase's median / least (us) per
    variant, the setup's phases (SetupTrace), and each variant's median
    over the first's."""
    first = names[0]
    lines = [f"GPT step, rank 0, {summary[first]['kernels']} kernels per run, "
             f"{summary[first]['runs']} runs per variant ({result['time']}, load "
             f"{result['load_min']:.1f}-{result['load_max']:.1f}; losses identical: "
             f"{result['losses_identical']})", "",
             "| median / least, us | " + " | ".join(names) + " | " +
             " | ".join(f"{n} / {first} (median)" for n in names[1:]) + " |",
             "|---" * (len(names) * 2) + "|"]

    def row(label, get):
        cells = []
        for n in names:
            v = get(summary[n])
            cells.append(f"{v['median']:.2f} / {v['least']:.2f}")
        ratios = []
        for n in names[1:]:
            a, b = get(summary[n])["median"], get(summary[first])["median"]
            ratios.append(f"{a / b:.2f}" if b and a == a and b == b else "-")
        lines.append(f"| {label} | " + " | ".join(cells + ratios) + " |")
    for key, label in SUMMARY:
        row(label, lambda s, key=key: s[key])
    row("receipt of the message to the first kernel", lambda s: s["receive_us"])
    phases = []
    for n in names:
        phases += [p for p in summary[n]["phases"] if p not in phases]
    nan = {"median": float("nan"), "least": float("nan")}
    for p in phases:
        row(f"setup phase: {p}", lambda s, p=p: s["phases"].get(p, nan))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
