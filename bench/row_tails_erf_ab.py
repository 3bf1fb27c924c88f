"""The generated kernels of cross-entropy (forward and backward), softmax,
layer_norm and gelu with DTORCH_ROW_MASKED_TAILS and DTORCH_ERF_PIECEWISE
on and off, interleaved in one run.

A child interpreter records each case with dtorch (1 rank) and saves its
forward and backward segments (dtorch.last_ir("input")). For each switch,
build/bin/row_kernel_bench (bench/row_kernel_bench.cpp) generates every
kernel once with the switch off (DTORCH_KERNEL_DUMP_DIR); then, every
round, it compiles each segment with the defaults and calls each generated
kernel and its switch-off twin in turn (--pair), --repeat times each, so a
busy host slows both alike. A segment's time is the sum over its kernels
of the median call; the table gives, per switch, the ratio off / default
(> 1: the default is faster), median over the rounds.

    python3 bench/row_tails_erf_ab.py [--rounds 5] [--repeat 60]
        [--out bench/results/xent]

Writes table.md and results.json into --out. Not run by the tests.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from bench_support import (parse_args_or_run_job, run_job_file,  # noqa: E402
                           write_table_and_json)

SWITCHES_OFF = [("DTORCH_ROW_MASKED_TAILS=0", {"DTORCH_ROW_MASKED_TAILS": "0"}),
                ("DTORCH_ERF_PIECEWISE=0", {"DTORCH_ERF_PIECEWISE": "0"})]

# name: (kind, rows, columns)
CASES = {
    "cross_entropy 256x1000": ("cross_entropy", 256, 1000),
    "cross_entropy 32x50257": ("cross_entropy", 32, 50257),
    "cross_entropy 1024x100": ("cross_entropy", 1024, 100),
    "softmax 512x1000": ("softmax", 512, 1000),
    "softmax 512x77": ("softmax", 512, 77),
    "layer_norm 512x1000": ("layer_norm", 512, 1000),
    "layer_norm 512x771": ("layer_norm", 512, 771),
    "gelu 64x1024": ("gelu", 64, 1024),
    "gelu 256x3072": ("gelu", 256, 3072),
}


def job_main(job):
    """Records every case's forward and backward segments into job["dir"]."""
    import numpy as np
    import dtorch
    import dtorch.nn.functional as F
    from dtorch import Replicate, Shard

    dtorch.init(world_size=1, num_processes=1)
    mesh = dtorch.init_device_mesh("cpu", (1,))
    rng = np.random.default_rng(0)
    graphs = {}

    def save(name):
        path = os.path.join(job["dir"], name.replace(" ", "_") + ".mlir")
        with open(path, "w") as f:
            f.write(dtorch.last_ir("input"))
        graphs[name] = path

    for name, (kind, rows, cols) in CASES.items():
        xv = rng.standard_normal((rows, cols)).astype(np.float32)
        x = dtorch.tensor(xv, device_mesh=mesh, placements=[Shard(0)], requires_grad=True)
        if kind == "cross_entropy":
            t = dtorch.tensor(rng.integers(0, cols, size=rows), device_mesh=mesh,
                              placements=[Replicate()])
            y = F.cross_entropy(x, t)
        elif kind == "softmax":
            y = F.softmax(x, -1)
        elif kind == "layer_norm":
            w = dtorch.tensor(rng.standard_normal(cols).astype(np.float32), device_mesh=mesh,
                              placements=[Replicate()], requires_grad=True)
            y = F.layer_norm(x, (cols,), w, w)
        else:
            # With a bias, as in an MLP: a group of two ops, so generated.
            b = dtorch.tensor(rng.standard_normal(cols).astype(np.float32), device_mesh=mesh,
                              placements=[Replicate()])
            y = F.gelu(x + b)
        y.numpy()
        save(name + " fwd")
        (y if y.ndim == 0 else y.sum()).backward()
        x.grad.numpy()
        save(name + " bwd")
    dtorch.shutdown()
    return {"graphs": graphs}


def run_bench(bench, graph, args, env):
    """row_kernel_bench's JSON rows for `graph` with `args` under `env`."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        subprocess.run([bench, graph, "--json", path] + args, check=True,
                       capture_output=True, env=dict(os.environ, **env), timeout=900)
        with open(path) as f:
            return json.load(f)
    finally:
        os.remove(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=60)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bin", "row_kernel_bench"))
    ap.add_argument("--out", default=os.path.join(HERE, "results", "xent"))
    args = parse_args_or_run_job(ap, argv, job_main)
    if args is None:
        return
    workdir = tempfile.mkdtemp(prefix="row_tails_erf_ab_")
    graphs = run_job_file(os.path.abspath(__file__), {"dir": workdir}, timeout=1800)["graphs"]
    # Each switch's kernels, generated once with it off.
    dumps = {}
    for name, env in SWITCHES_OFF:
        dumps[name] = os.path.join(workdir, name)
        os.makedirs(dumps[name], exist_ok=True)
        for g, path in graphs.items():
            run_bench(args.bench, path, ["--repeat", "1"],
                      dict(env, DTORCH_KERNEL_DUMP_DIR=dumps[name]))
    # ratio[g][switch]: per round, the sum over the segment's kernels of
    # the median call with the switch off over the same with the defaults,
    # the two called in turn.
    ratio = {g: {n: [] for n, _ in SWITCHES_OFF} for g in graphs}
    us = {g: {n: [] for n, _ in SWITCHES_OFF} for g in graphs}
    kernels = {}
    loads = []
    for r in range(args.rounds):
        loads.append(os.getloadavg()[0])
        print(f"round {r + 1}/{args.rounds}", flush=True)
        for g, path in graphs.items():
            for name, _ in SWITCHES_OFF:
                rows = [row for row in run_bench(args.bench, path,
                                                 ["--repeat", str(args.repeat),
                                                  "--pair", dumps[name]], {})
                        if "median_us_pair" in row]
                kernels[g] = len(rows)
                on = sum(row["median_us"] for row in rows)
                off = sum(row["median_us_pair"] for row in rows)
                ratio[g][name].append(off / on)
                us[g][name].append([on, off])
    loads.append(os.getloadavg()[0])
    names = [n for n, _ in SWITCHES_OFF]
    med = {g: {n: statistics.median(ratio[g][n]) for n in names} for g in graphs}
    default_us = {g: statistics.median(on for n in names for on, _ in us[g][n]) for g in graphs}
    lines = [f"# Row kernels and gelu: DTORCH_ROW_MASKED_TAILS and DTORCH_ERF_PIECEWISE "
             f"A/B ({time.strftime('%Y-%m-%d %H:%M:%S')})",
             "",
             f"Each case recorded by dtorch on 1 rank; build/bin/row_kernel_bench compiles its "
             f"segment with fusion and calls each generated kernel and the same kernel "
             f"generated with the switch off (another process, DTORCH_KERNEL_DUMP_DIR) in "
             f"turn, {args.repeat} times each; a segment's time is the sum over its kernels "
             f"of the median call. Ratio: switch off over the defaults (> 1: the default is "
             f"faster), median of {args.rounds} rounds (min-max in brackets). Load average "
             f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs.",
             "",
             "| segment | kernels | default us | " + " | ".join(f"{n} / default" for n in names)
             + " |",
             "|---|---|---|" + "---|" * len(names)]
    for g in graphs:
        cells = " | ".join(f"{med[g][n]:.3f} ({min(ratio[g][n]):.2f}-{max(ratio[g][n]):.2f})"
                           for n in names)
        lines.append(f"| {g} | {kernels[g]} | {default_us[g]:.1f} | {cells} |")
    text = "\n".join(lines) + "\n"
    print(text)
    write_table_and_json(args.out, text, {
        "time": time.strftime("%Y-%m-%d %H:%M:%S"), "loads": loads,
        "switches_off": dict(SWITCHES_OFF), "repeat": args.repeat, "rounds": args.rounds,
        "cases": {k: list(v) for k, v in CASES.items()}, "ratio_per_round": ratio,
        "us_default_and_off_per_round": us, "median_ratio": med})
    print(f"wrote {args.out}/table.md and results.json")


if __name__ == "__main__":
    main()
