"""A/B of speculation (docs/speculation.md) on the GPT step: rounds of
train_bench.py --gpt-step with DTORCH_SPECULATE=1 and =0 interleaved (each
round runs torch next to each setting, so every ratio has its own torch
time), 1 rank (--dp adds DP=2, whose programs have collectives and are not
speculated). Writes bench/results/speculate_ab/{table.md,results.json}.

    python3 bench/speculate_ab.py [--rounds 3] [--steps 20] [--loss-fetch both]
        [--variant NAME:ENV=VALUE[,...] ...] [--out DIR]

`--variant` (repeated) replaces the two DTORCH_SPECULATE variants by others,
each with its own environment (empty after the colon: the default one), e.g.
`--variant on: --variant off:DTORCH_INLINE_CONTROLLER=0,DTORCH_DIRECT_SEND=0`.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_bench  # noqa: E402
from bench_support import write_table_and_json  # noqa: E402

VARIANTS = [("DTORCH_SPECULATE=1", {"DTORCH_SPECULATE": "1"}),
            ("DTORCH_SPECULATE=0", {"DTORCH_SPECULATE": "0"})]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--loss-fetch", choices=("sync", "async", "both"), default="both")
    ap.add_argument("--dp", action="store_true", help="also DP=2 vs torch DDP")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "speculate_ab"))
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:ENV=VALUE[,...]")
    args = ap.parse_args(argv)
    variants = VARIANTS
    if args.variant:
        variants = []
        for spec in args.variant:
            name, _, env = spec.partition(":")
            variants.append((name, dict(kv.split("=", 1) for kv in env.split(",") if kv)))
    if not args.dp:
        train_bench.GPT_STEP_PAIRS = train_bench.GPT_STEP_PAIRS[:1]
    rows = {}
    scratch = tempfile.mkdtemp(prefix="speculate_ab_")  # each round's own table
    for r in range(args.rounds):
        for name, env in variants:
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                result = train_bench.gpt_step_bench(train_bench_args(args, scratch))
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            for row in result["rows"]:
                key = (row["setting"], name)
                rows.setdefault(key, []).append({
                    "ratio": row["round_ratios"][0] if row["round_ratios"] else None,
                    "dtorch_ms": row["dtorch"]["best_ms"],
                    "torch_ms": row["torch"] and row["torch"]["best_ms"],
                    "cpu_ratio": row["cpu_ratio"], "load": [result["load_min"], result["load_max"]],
                    "max_loss_diff": row["max_loss_diff"]})
            print(f"round {r + 1}/{args.rounds} {name} done", flush=True)
    described = "; ".join(f"{n} = {','.join(f'{k}={v}' for k, v in e.items()) or 'default'}"
                          for n, e in variants)
    lines = [f"GPT step, variants interleaved ({described}): {args.rounds} rounds of "
             f"{args.steps} steps after {args.warmup} warm-up; ratio = dtorch / torch median "
             f"step time of the round (goal <= 0.83).", "",
             "| setting | variant | ratio per round | median ratio | dtorch ms per round | "
             "CPU ratio (median) | load |", "|---|---|---|---|---|---|---|"]
    for (setting, name), rs in rows.items():
        ratios = [x["ratio"] for x in rs if x["ratio"] is not None]
        cpus = [x["cpu_ratio"] for x in rs if x["cpu_ratio"] is not None]
        loads = [v for x in rs for v in x["load"]]
        lines.append(
            f"| {setting} | {name} | {', '.join(f'{x:.2f}' for x in ratios)} | "
            f"{statistics.median(ratios):.2f} | "
            f"{', '.join('%.2f' % x['dtorch_ms'] for x in rs)} | "
            f"{statistics.median(cpus):.2f} | {min(loads):.1f}-{max(loads):.1f} |"
            if ratios else f"| {setting} | {name} | - | - | - | - | - |")
    table = "\n".join(lines) + "\n"
    print("\n" + table)
    write_table_and_json(args.out, table, {
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "rows": [{"setting": s, "variant": n, "rounds": rs} for (s, n), rs in rows.items()]})


def train_bench_args(args, out):
    return argparse.Namespace(
        gpt_step=True, rounds=1, steps=args.steps, warmup=args.warmup, threads=1,
        gpt_batch=16, loss_fetch=args.loss_fetch, out=out,
        torch_python=train_bench.DEFAULT_TORCH_PYTHON)


if __name__ == "__main__":
    main()
