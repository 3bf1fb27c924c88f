"""The GPT step's generated kernels with the row-kernel switches on and off,
interleaved in one run.

A child interpreter runs the 1-rank GPT step of bench/train_bench.py and
saves its segment (dtorch.last_ir("input") and ("rank")); then
build/bin/row_kernel_bench (bench/row_kernel_bench.cpp) compiles that graph
and times each generated kernel on its own (fastest of --repeat calls, wall
time), once per variant per round, the variants alternating
within every round (a busy host slows them alike); each kernel keeps its
fastest round. Variants: the defaults, each switch off alone, all off.

    python3 bench/row_kernel_ab.py [--rounds 3] [--repeat 200]
        [--out bench/results/rowkern]

Writes kernels_ab.md and kernels_ab.json into --out. Not run by the tests.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, HERE)

from bench_support import parse_args_or_run_job, run_json  # noqa: E402
from row_kernel_profile import instructions_of, label  # noqa: E402
from train_bench import (gpt_step_session, gpt_train_step, prepare_gpt_step,  # noqa: E402
                         set_threads, write_job)

SWITCHES = ["DTORCH_ROW_VECTOR_LOOPS", "DTORCH_WIDE_VECTORS", "DTORCH_ROW_SWEEP_REUSE",
            "DTORCH_ROW_TREE_MAX"]


def job_main(job):
    dtorch, model, opt, next_batch = gpt_step_session(job)
    step = gpt_train_step(model, opt, next_batch)
    for _ in range(3):
        step()
    with open(job["graph"], "w") as f:
        f.write(dtorch.last_ir("input"))
    return {"ir_ops": instructions_of(dtorch.last_ir("rank"))}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "row_kernel_bench"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "rowkern"))
    args = parse_args_or_run_job(ap, argv, job_main)
    if args is None:
        return
    set_threads(1)
    cfg, workdir, data_path, weights = prepare_gpt_step("row_kernel_ab_", 1)
    graph = os.path.join(workdir, "gpt_step.mlir")
    job_path = write_job(workdir, {"cfg": cfg, "data": data_path, "weights": weights,
                                   "batch": 16, "threads": 1, "graph": graph})
    out = run_json([sys.executable, os.path.abspath(__file__), "--job", job_path], timeout=600)
    if "error" in out:
        raise SystemExit(f"GPT step: {out['error']}")
    ir_ops = out["ir_ops"]
    variants = [("default", {})] + [(f"{s}=0", {s: "0"}) for s in SWITCHES] + [
        ("all off", {s: "0" for s in SWITCHES})]
    best = {name: {} for name, _ in variants}
    loads = []
    for r in range(args.rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for name, env in order:
            loads.append(os.getloadavg()[0])
            print(f"round {r + 1}: {name}", flush=True)
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
                path = f.name
            subprocess.run([args.bench, graph, "--repeat", str(args.repeat), "--json", path],
                           check=True, capture_output=True, env=dict(os.environ, **env))
            with open(path) as f:
                rows = json.load(f)
            os.remove(path)
            for row in rows:
                i = row["instruction"]
                if i not in best[name] or row["us"] < best[name][i]["us"]:
                    best[name][i] = row
    loads.append(os.getloadavg()[0])
    names = [n for n, _ in variants]
    indices = sorted(best["default"], key=lambda i: -best["all off"][i]["us"])
    totals = {n: sum(v["us"] for v in best[n].values()) for n in names}
    lines = [f"# GPT step: generated kernels, row-kernel switches A/B ({time.strftime('%Y-%m-%d %H:%M:%S')})",
             "",
             f"Each generated kernel of the 1-rank GPT step (config {cfg}, batch 16) called "
             f"on its own by build/bin/row_kernel_bench: fastest of {args.repeat} calls (wall "
             f"time), fastest of {args.rounds} rounds; the variants alternate within every "
             f"round. Load average {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs.",
             "",
             "| instruction | group | " + " | ".join(f"{n} us" for n in names)
             + " | all off / default |",
             "|---|---|" + "---|" * len(names) + "---|"]
    for i in indices:
        op = ir_ops[i] if i < len(ir_ops) else None
        name = label(op) if op else "?"
        cells = " | ".join(f"{best[n][i]['us']:.1f}" for n in names)
        ratio = best["all off"][i]["us"] / best["default"][i]["us"]
        lines.append(f"| #{i} | {name} | {cells} | {ratio:.2f} |")
    lines.append("| **all generated kernels** | | " + " | ".join(
        f"**{totals[n]:.0f}**" for n in names)
        + f" | **{totals['all off'] / totals['default']:.2f}** |")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "kernels_ab.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "kernels_ab.json"), "w") as f:
        json.dump({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "loads": loads,
                   "variants": dict(variants), "repeat": args.repeat, "rounds": args.rounds,
                   "us": {n: {str(i): v["us"] for i, v in best[n].items()} for n in names},
                   "labels": {str(i): label(ir_ops[i]) if i < len(ir_ops) else "?"
                              for i in indices}}, f, indent=1)
    print(f"wrote {args.out}/kernels_ab.md and kernels_ab.json")


if __name__ == "__main__":
    main()
