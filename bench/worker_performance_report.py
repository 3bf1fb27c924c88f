"""Every goal of the worker-side performance work (the Eager Graph on the
workers: fusion, GEMM, shared-memory collectives, buffer planning, overlap,
the GPT training step), measured by one command at this checkout:

    python3 bench/worker_performance_report.py [--out bench/results/worker_performance]
                                               [--quick]

It runs each benchmark of bench/ that owns a goal, one after the other, each
writing its own table, JSON and PNG into a folder of --out, then reads their
results.json and writes one summary (summary.md, summary.json, summary.png):
per goal, the figure measured, the bound and whether it is met.

- GPT step, 1 rank vs torch eager and DP=2 vs torch DDP, `loss.item()` every
  step (bench/train_bench.py --gpt-step): dtorch / torch step time at most
  0.83 (1.2x faster), as the median of per-round ratios; the worst round is
  shown beside it.
- A cached 2,000-op elementwise chain on 4 ranks (bench/fusion_bench.py):
  at most 2 us per op to its fetched result.
- y = gelu(x*w+b)*s on 16M float32 (bench/fusion_bench.py): at least 0.70 of
  the one-thread STREAM triad measured in the same run.
- GEMM 1024^3 float32 (bench/gemm_bench.py): 1 rank at least 0.95x torch
  with 1 thread; 2 ranks of one host at least 0.9x torch with 2 threads.
- all_reduce between 2 processes of one host, 4 KiB to 64 MiB
  (bench/collective_bench.py): at least 5x Gloo at every size.
- Peak memory per rank of the GPT step with and without buffer planning
  (bench/memory_bench.py): reported (no bound).
- The trace of a DP=2 step shows an all_reduce running beside backward
  compute (test/python/test_profiler.py::test_profiler_overlap, run here).

torch runs from --peer-python (default: this Python, which `make test`'s
setup gives torch). --quick runs every benchmark at its smallest (a smoke
run, not figures). Not run by the tests.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def load_average():
    return os.getloadavg()[0]


def run(name, argv, log_dir, timeout):
    """Runs one benchmark (or test); returns (exit code, seconds)."""
    started = time.monotonic()
    with open(os.path.join(log_dir, name + ".log"), "w") as log:
        try:
            code = subprocess.run(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    seconds = time.monotonic() - started
    print(f"{name}: exit {code} in {seconds:.0f} s", flush=True)
    return code, seconds


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def goal(name, measured, bound, met, detail="", unit=""):
    return {"goal": name, "measured": measured, "bound": bound, "met": met,
            "detail": detail, "unit": unit}


def gpt_goals(results):
    out = []
    for ranks, label in ((1, "GPT step, 1 rank vs torch eager, loss.item()"),
                         (2, "GPT step, DP=2 vs torch DDP, loss.item()")):
        row = next((r for r in (results or {}).get("rows", [])
                    if r.get("ranks") == ranks and r.get("loss_fetch") == "sync"), None)
        rounds = (row or {}).get("round_ratios") or []
        if not rounds:
            out.append(goal(label, None, "<= 0.83", False, "no result"))
            continue
        median = statistics.median(rounds)
        out.append(goal(label, median, "<= 0.83", median <= 0.83,
                        "rounds " + ", ".join(f"{r:.2f}" for r in rounds) +
                        f"; worst {max(rounds):.2f}", "ratio"))
    return out


def fusion_goals(results):
    chain = ((results or {}).get("chain") or {}).get("dtorch_fused") or {}
    per_op = chain.get("cached_us_per_op")
    gelu = (results or {}).get("gelu") or {}
    fused = (gelu.get("dtorch_fused") or {}).get("gb_per_s")
    triad = (gelu.get("stream_triad") or {}).get("gb_per_s")
    share = fused / triad if fused and triad else None
    return [
        goal("cached 2,000-op chain on 4 ranks, us per op", per_op, "<= 2.0",
             per_op is not None and per_op <= 2.0,
             f"{chain.get('fused_instructions', '?')} fused instructions", "us"),
        goal("gelu(x*w+b)*s on 16M float32, share of STREAM triad", share, ">= 0.70",
             share is not None and share >= 0.70,
             f"{fused or 0:.2f} vs {triad or 0:.2f} GB/s", "ratio"),
    ]


def gemm_goals(results):
    goals = (results or {}).get("goals") or []
    if not goals:
        return [goal("GEMM 1024^3 float32", None, ">= 0.95 / 0.9", False, "no result")]
    bounds = {0: ">= 0.95", 1: ">= 0.95", 2: ">= 0.90"}
    return [goal("GEMM: " + g["goal"], g.get("ratio"), bounds.get(i, ""), bool(g.get("met")),
                 "", "ratio") for i, g in enumerate(goals)]


def collective_goals(results):
    rows = (results or {}).get("rows") or []
    if not rows:
        return [goal("all_reduce, 2 processes, vs Gloo", None, ">= 5 at every size", False,
                     "no result")]
    worst = min(rows, key=lambda r: r["ratio"])
    return [goal("all_reduce, 2 processes of one host, vs Gloo (least over sizes)",
                 worst["ratio"], ">= 5 at every size", worst["ratio"] >= 5.0,
                 ", ".join(f"{r['bytes'] // 1024} KiB {r['ratio']:.1f}x" for r in rows), "ratio")]


def memory_goals(results):
    out = []
    for row in (results or {}).get("rows") or []:
        out.append(goal(f"peak memory per rank, {row['setup']}, planning off / on",
                        row.get("ratio"), "reported", bool(row.get("losses_equal")),
                        f"{row['peak_bytes_off'] / 2**20:.1f} -> {row['peak_bytes_on'] / 2**20:.1f}"
                        " MiB; losses equal" if row.get("losses_equal") else "losses differ",
                        "ratio"))
    return out or [goal("peak memory per rank", None, "reported", False, "no result")]


def write_plot(goals, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [g["goal"][:60] for g in goals]
    colors = ["tab:green" if g["met"] else "tab:red" for g in goals]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(goals) + 1.2))
    ax.barh(range(len(goals)), [1] * len(goals), color=colors)
    ax.set_yticks(range(len(goals)))
    ax.set_yticklabels(names, fontsize=8)
    for i, g in enumerate(goals):
        text = "-" if g["measured"] is None else f"{g['measured']:.3g} (bound {g['bound']})"
        ax.text(0.02, i, text, va="center", fontsize=8, color="white")
    ax.set_xticks([])
    ax.invert_yaxis()
    ax.set_title("Worker-side performance goals (green: met)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "worker_performance"))
    ap.add_argument("--peer-python", default=sys.executable)
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the GPT step")
    ap.add_argument("--quick", action="store_true", help="smallest sizes: a smoke run")
    ap.add_argument("--timeout", type=float, default=1800, help="per benchmark, seconds")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    py = sys.executable
    peer = ["--peer-python", args.peer_python]
    load_start = load_average()
    started = time.monotonic()
    quick = args.quick
    steps = ["--steps", "3", "--rounds", "1"] if quick else ["--steps", "20", "--rounds",
                                                              str(args.rounds)]
    plan = [
        ("gpt_step", [py, "bench/train_bench.py", "--gpt-step", "--loss-fetch", "sync",
                      *steps, "--out", os.path.join(out, "gpt_step")],
         "gpt_step/gpt_step/results.json"),
        ("fusion", [py, "bench/fusion_bench.py", *peer, "--out", os.path.join(out, "fusion")] +
         (["--ops", "50", "--n", "65536", "--runs", "1", "--reps", "2"] if quick else []),
         "fusion/results.json"),
        ("gemm", [py, "bench/gemm_bench.py", *peer, "--out", os.path.join(out, "gemm")] +
         (["--n", "128", "--rounds", "1", "--reps", "2", "--pairs", "2", "--turn-calls", "1"]
          if quick else []),
         "gemm/results.json"),
        ("collectives", [py, "bench/collective_bench.py", "--out",
                         os.path.join(out, "collectives")] + (["--quick"] if quick else []),
         "collectives/results.json"),
        ("memory", [py, "bench/memory_bench.py", "--out", os.path.join(out, "memory")] +
         (["--steps", "2", "--batch", "2"] if quick else []),
         "memory/results.json"),
    ]
    runs, results = {}, {}
    for name, argv, result in plan:
        code, seconds = run(name, argv, out, args.timeout)
        runs[name] = {"exit": code, "seconds": round(seconds, 1), "argv": argv[1:]}
        results[name] = read_json(os.path.join(out, result)) if code == 0 else None
    code, seconds = run("trace_overlap", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                          "test/python/test_profiler.py::test_profiler_overlap"],
                        out, args.timeout)
    runs["trace_overlap"] = {"exit": code, "seconds": round(seconds, 1)}

    goals = (gpt_goals(results["gpt_step"]) + fusion_goals(results["fusion"]) +
             gemm_goals(results["gemm"]) + collective_goals(results["collectives"]) +
             memory_goals(results["memory"]) +
             [goal("trace of a DP=2 step: all_reduce beside backward compute", None,
                   "test passes", code == 0, "test_profiler_overlap " +
                   ("passed" if code == 0 else f"failed (exit {code})"))])
    load_end = load_average()
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Worker-side performance goals ({when}, {git})", "",
             f"One command: `python3 bench/worker_performance_report.py"
             f"{' --quick' if quick else ''}`; load average {load_start:.1f} at the start, "
             f"{load_end:.1f} at the end, {os.cpu_count()} CPUs; "
             f"{time.monotonic() - started:.0f} s in all. Each benchmark's own table, JSON "
             "and PNG are in the folder of its name.", "",
             "| goal | measured | bound | met | detail |", "|---|---|---|---|---|"]
    for g in goals:
        measured = "-" if g["measured"] is None else f"{g['measured']:.3g}"
        met = ("yes" if g["met"] else "**no**") if g["bound"] != "reported" else \
            ("reported" if g["met"] else "**no**")
        lines.append(f"| {g['goal']} | {measured} | {g['bound']} | {met} | {g['detail']} |")
    lines += ["", "| benchmark | exit | seconds |", "|---|---|---|"]
    lines += [f"| {n} | {r['exit']} | {r['seconds']} |" for n, r in runs.items()]
    table = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(table)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"date": when, "git": git, "quick": quick, "load_start": load_start,
                   "load_end": load_end, "goals": goals, "runs": runs}, f, indent=1)
    write_plot(goals, os.path.join(out, "summary.png"))
    print(table)
    print(f"wrote {out}/summary.md, summary.json and summary.png")
    return 0 if all(g["met"] for g in goals) and all(r["exit"] == 0 for r in runs.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
