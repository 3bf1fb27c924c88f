"""Data-parallel training step time with and without the overlap of
gradient communication and backward compute, in one run.

The GPT of examples/gpt and an MLP (the configurations of train_bench.py,
--scale multiplies their widths) train with AdamW on a (2,) "dp" mesh, two
worker processes of one rank each (collectives between processes), in
three settings, each in a fresh interpreter because the compiler reads its
configuration from the environment once:

- scheduled: the default, `--rank-schedule-collectives` issues every
  collective as soon as its operands exist and buckets small all_reduces;
- no buckets: early issue only (DTORCH_BUCKET_CAP_MB=0);
- program order: the pass left out (DTORCH_SCHEDULE_COLLECTIVES=0), the
  collectives where the lowering put them.

The settings alternate for --rounds rounds; each round's value is the
median step of --steps timed steps after --warmup; the table shows the
median over rounds and the ratio to "program order". Writes table.md,
results.json and overlap.png to bench/results/overlap/. Not run by the
tests.

    python3 bench/overlap_bench.py [--rounds 3] [--steps 10] [--scale 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

from bench_support import write_table_and_json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))

SETTINGS = {
    "scheduled": {},
    "no buckets": {"DTORCH_BUCKET_CAP_MB": "0"},
    "program order": {"DTORCH_SCHEDULE_COLLECTIVES": "0"},
}


def run_step_job(job, env, workdir):
    """Median step seconds of one train_bench job in a fresh interpreter
    with `env` added (the on-disk program cache off: its key holds the
    configuration, but a fresh compile is what each setting measures)."""
    path = os.path.join(workdir, "job.json")
    with open(path, "w") as f:
        json.dump(job, f)
    full_env = dict(os.environ, DTORCH_CACHE_DIR="", **env)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "train_bench.py"), "--job", path],
                          capture_output=True, text=True, timeout=600, env=full_env)
    if proc.returncode != 0:
        raise RuntimeError(f"job failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = np.arange(len(rows))
    width = 0.8 / len(SETTINGS)
    for k, name in enumerate(SETTINGS):
        ax.bar(xs + (k - 1) * width, [r["ms"][name] for r in rows], width, label=name)
    ax.set_xticks(xs, [f"{r['model']} DP=2" for r in rows])
    ax.set_ylabel("training step (ms, median)")
    ax.set_title("DP=2 step: gradient all_reduce overlap (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per round (median)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads per process")
    ap.add_argument("--scale", type=int, default=2, help="width multiplier of the models")
    ap.add_argument("--models", default="gpt,mlp")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "overlap"))
    args = ap.parse_args(argv)

    from train import CharTokenizer, load_corpus
    text = load_corpus(("json", "textwrap"))
    tok = CharTokenizer.from_text(text)
    workdir = tempfile.mkdtemp(prefix="overlap_bench_")
    data_path = os.path.join(workdir, "data.npy")
    np.save(data_path, tok.encode(text))
    cfgs = {"gpt": dict(vocab_size=len(tok.chars), block_size=32, n_layer=2, n_head=4,
                        d_model=64 * args.scale),
            "mlp": dict(d_in=64, hidden=256 * args.scale, layers=4, classes=10)}
    batch = {"gpt": 16, "mlp": 256}
    models = [m for m in args.models.split(",") if m]
    seconds = {(m, s): [] for m in models for s in SETTINGS}
    for rnd in range(args.rounds):
        for model in models:
            for name, env in SETTINGS.items():
                job = {"what": "train", "kind": model, "cfg": cfgs[model], "ranks": 2,
                       "batch": batch[model], "warmup": args.warmup, "steps": args.steps,
                       "threads": args.threads, "data": data_path}
                s = run_step_job(job, env, workdir)
                seconds[(model, name)].append(s)
                print(f"round {rnd + 1}: {model} {name}: {s * 1e3:.1f} ms", flush=True)

    rows = []
    for model in models:
        ms = {name: statistics.median(seconds[(model, name)]) * 1e3 for name in SETTINGS}
        rows.append({"model": model, "cfg": cfgs[model], "batch": batch[model], "ms": ms,
                     "all_ms": {name: [s * 1e3 for s in seconds[(model, name)]]
                                for name in SETTINGS},
                     "speedup_vs_program_order": {
                         name: ms["program order"] / ms[name] for name in SETTINGS}})
    lines = ["| model (DP=2) | " + " | ".join(f"{n} (ms)" for n in SETTINGS) +
             " | scheduled vs program order |",
             "|---|" + "---|" * (len(SETTINGS) + 1)]
    for r in rows:
        lines.append(f"| {r['model']} | " + " | ".join(f"{r['ms'][n]:.1f}" for n in SETTINGS) +
                     f" | {r['speedup_vs_program_order']['scheduled']:.2f}x |")
    table = "\n".join(lines) + "\n"
    print(table)
    write_table_and_json(
        args.out, f"DP=2 training step, median of {args.rounds} rounds of {args.steps} steps "
        f"(each a median), {args.threads} BLAS thread(s) per process.\n\n" + table,
        {"rounds": args.rounds, "steps": args.steps, "threads": args.threads,
         "settings": SETTINGS, "rows": rows})
    plot(rows, os.path.join(args.out, "overlap.png"))
    return rows


if __name__ == "__main__":
    main()
