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

from bench_support import parse_args_or_run_job, run_json  # noqa: E402
from train_bench import (compare_variants, gpt_step_job, gpt_step_session,  # noqa: E402
                         gpt_train_step)


def setup_groups(setups):
    """The worker's setup spans (sorted by start) as one group per run: a
    run's phases are back to back (each starts where the one before it
    ended) and end with "hand-off"; a RunProgram's start with "queue", a
    speculation's with "lookup". A RunProgram's go on after its run
    ("run", "table bytes", "outputs")."""
    groups = []
    for e in setups:
        home = None
        if e["name"] != "queue":
            for g in groups[-8:]:
                last = g[-1]
                if abs(last["ts"] + last["dur"] - e["ts"]) < 0.01:
                    home = g
                    break
        if home is None:
            home = []
            groups.append(home)
        home.append(e)
    return groups


def run_phases(trace, rank=0):
    """Per run of `rank` in `trace`: setup, teardown and the gaps between
    its kernels (microseconds), and its kernel count and length. With the
    worker's "setup" spans (SetupTrace: the phases from the message's
    receipt to the first kernel), also each phase's time, the time from the
    receipt to the first kernel and from the rank thread's pickup (the end
    of "queue") to the first kernel."""
    import dtorch.profiler as profiler
    compute = profiler.spans(trace, rank, "compute")
    runs = sorted((e for e in compute if e["cat"] == "run"), key=lambda e: e["ts"])
    kernels = [e for e in compute if e["cat"] == "kernel"]
    groups = setup_groups(sorted((e for e in compute if e["cat"] == "setup"),
                                 key=lambda e: e["ts"]))
    out = []
    for run in runs:
        start, end = run["ts"], run["ts"] + run["dur"]
        inside = [k for k in kernels if start <= k["ts"] and k["ts"] + k["dur"] <= end + 1e-3]
        if not inside:
            continue
        inside.sort(key=lambda k: k["ts"])
        first = inside[0]["ts"]
        # This run's setup: the group whose last phase (the hand-off) ends
        # inside the run, before its first kernel.
        def handed_off(g):
            hand = [e for e in g if e["name"] == "hand-off"]
            return hand[0]["ts"] + hand[0]["dur"] if hand else float("nan")
        mine = next((g for g in groups if start - 1e-3 <= handed_off(g) <= first + 1e-3), [])
        phases = {}
        for e in mine:
            phases[e["name"]] = phases.get(e["name"], 0.0) + e["dur"]
        picked = (mine[0]["ts"] + mine[0]["dur"] if mine and mine[0]["name"] == "queue"
                  else mine[0]["ts"] if mine else None)
        gaps = [b["ts"] - (a["ts"] + a["dur"]) for a, b in zip(inside, inside[1:])]
        out.append({"name": run["name"], "phases": phases,
                    "receive_us": first - mine[0]["ts"] if mine else None,
                    "pickup_us": first - picked if picked is not None else None,
                    "setup_us": first - start,
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


def stats(values):
    values = [v for v in values if v is not None]
    return ({"median": statistics.median(values), "least": min(values)}
            if values else {"median": float("nan"), "least": float("nan")})


def summarize_runs(runs):
    names = []
    for r in runs:
        names += [n for n in r.get("phases", {}) if n not in names]
    return {"runs": len(runs),
            "kernels": statistics.median(r["kernels"] for r in runs) if runs else 0,
            **{key: stats(r[key] for r in runs) for key, _ in SUMMARY},
            "receive_us": stats(r.get("receive_us") for r in runs),
            "pickup_us": stats(r.get("pickup_us") for r in runs),
            "phases": {n: stats(r["phases"].get(n) for r in runs) for n in names}}


def summarize(runs):
    """Median and least of each phase over the runs with the most kernels
    (the training step; smaller runs, such as a parameter upload, are left
    out); and, by kind, over the step's RunProgram runs ("run": with
    speculation, the confirmations, which run what the speculation left)
    and its speculations' starts ("speculate"), with their setup phases."""
    most = max(r["kernels"] for r in runs)
    step_runs = [r for r in runs if r["kernels"] == most]
    out = summarize_runs(step_runs)
    out["kernels"] = most
    out["run_names"] = sorted({r.get("name", "run").split()[0] for r in step_runs})
    # The step's runs: the largest programs' (a parameter upload's are left out).
    kinds = {}
    for kind in ("run", "speculate"):
        mine = [r for r in runs if r["name"].split()[0] == kind and r["phases"]]
        if mine:
            kinds[kind] = summarize_runs(mine)
    out["kinds"] = kinds
    return out


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
    args = parse_args_or_run_job(ap, argv, job_main)
    if args is None:
        return
    cfg, workdir, job, job_path = gpt_step_job(
        "executor_overhead_", args.threads, batch=args.batch, warmup=args.warmup,
        profile_steps=args.profile_steps)
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
    variant, each variant's median over the first's, then by kind of run
    (RunProgram runs, speculation starts) the setup and its phases
    (SetupTrace)."""
    first = names[0]
    nan = {"median": float("nan"), "least": float("nan")}
    lines = [f"GPT step on 1 rank, rank 0 ({result['time']}, load "
             f"{result['load_min']:.1f}-{result['load_max']:.1f}; losses identical: "
             f"{result['losses_identical']}). Median / least, us; ratios of medians.", ""]

    def table(title, get_summary):
        lines.extend([f"**{title}**", "",
                      "| median / least, us | " + " | ".join(names) + " | " +
                      " | ".join(f"{n} / {first}" for n in names[1:]) + " |",
                      "|---" * (len(names) * 2) + "|"])

        def row(label, get):
            cells, ratios = [], []
            for n in names:
                sm = get_summary(summary[n])
                v = get(sm) if sm else nan
                cells.append(f"{v['median']:.2f} / {v['least']:.2f}")
            for n in names[1:]:
                a = get(get_summary(summary[n]) or {}) if get_summary(summary[n]) else nan
                b = get(get_summary(summary[first])) if get_summary(summary[first]) else nan
                ratio = a["median"] / b["median"] if b["median"] == b["median"] and b["median"] else float("nan")
                ratios.append(f"{ratio:.2f}" if ratio == ratio else "-")
            lines.append(f"| {label} | " + " | ".join(cells + ratios) + " |")
        row("runs (count)", lambda s: {"median": s["runs"], "least": s["runs"]})
        row("kernels per run", lambda s: {"median": s["kernels"], "least": s["kernels"]})
        for key, label in SUMMARY:
            row(label, lambda s, key=key: s[key])
        row("receipt of the message to the first kernel", lambda s: s["receive_us"])
        row("rank thread's pickup to the first kernel", lambda s: s["pickup_us"])
        phases = []
        for n in names:
            sm = get_summary(summary[n])
            phases += [p for p in (sm or {}).get("phases", {}) if p not in phases]
        for p in phases:
            row(f"setup phase: {p}", lambda s, p=p: s["phases"].get(p, nan))
        lines.append("")
    table(f"The runs with the most kernels ({summary[first]['kernels']})", lambda s: s)
    table("RunProgram runs (with speculation: the confirmations)",
          lambda s: s["kinds"].get("run"))
    table("Speculation starts", lambda s: s["kinds"].get("speculate"))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
