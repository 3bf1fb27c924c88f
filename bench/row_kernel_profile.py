"""Rank 0's kernels of the 1-rank GPT training step, instruction by
instruction: least time, bytes moved, flops, and what they achieve against
one core's bandwidth (STREAM triad, bench/stream_triad.c) and FMA peak.

The GPT of bench/train_bench.py (same config, batch, weights and AdamW
step) runs in a fresh interpreter per measurement; after warm-up steps,
dtorch.profiler records --profile-steps steps and each instruction (program,
index) keeps its least time over them and over the rounds (what it costs
when nothing preempts it). The program's rank-level IR (dtorch.last_ir
("rank")) gives each instruction's operands: bytes are every input's plus
every output's size (each touched once), flops count one per element of
each elementwise op inside a fused group (exp, erf... count as one; a
`where`, cast or broadcast as none), 2MNK per product.

    python3 bench/row_kernel_profile.py [--rounds 3] [--profile-steps 10]
        [--compare DTORCH_ROW_SWEEP_REUSE=0,DTORCH_ROW_TREE_MAX=0]
        [--out DIR]

`--compare` adds variants (environment settings) run alternately with the
default in every round, so that a busy host slows them alike; the tables
show each instruction's least time per variant side by side. Writes
DIR/table.md and DIR/results.json (default bench/results/rowkern). Not run
by the tests.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, HERE)

from bench_support import parse_args_or_run_job, run_json, write_table_and_json  # noqa: E402
from train_bench import (compare_variants, gpt_step_job, gpt_step_session,  # noqa: E402
                         gpt_train_step)

BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i1": 1, "i8": 1}
# Kernels inside a fused group that do no arithmetic.
NO_FLOPS = {"broadcast_to", "full", "iota", "where", "cast", "reshape"}


def tensor_elements(text):
    """(elements, bytes) of every `tensor<AxBxf32>` in `text`, in order."""
    out = []
    for dims, dtype in re.findall(r"tensor<((?:\d+x)*)(\w+)>", text):
        n = 1
        for d in dims.split("x"):
            if d:
                n *= int(d)
        out.append((n, n * BYTES.get(dtype, 4)))
    return out


def signature_bytes(line):
    """Input and output bytes of an op from its trailing `: (ins) -> outs`."""
    m = re.search(r":\s*\((.*)\)\s*->\s*(.*?)\s*\{?\s*$", line)
    if not m:
        m2 = re.search(r":\s*\(\)\s*->\s*(.*?)\s*\{?\s*$", line)
        if not m2:
            return 0, 0
        return 0, sum(b for _, b in tensor_elements(m2.group(1)))
    ins = sum(b for _, b in tensor_elements(m.group(1)))
    outs = sum(b for _, b in tensor_elements(m.group(2)))
    return ins, outs


def instructions_of(ir):
    """The top-level ops of the rank IR's first function, in order (the
    program's instructions): kernel name, bytes in/out, flops and, for a
    fused group, the kernels of its body."""
    lines = ir.splitlines()
    ops, i = [], 0
    while i < len(lines) and not lines[i].lstrip().startswith("func.func"):
        i += 1
    i += 1
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("return") or stripped == "}" and line.startswith("  }"):
            break
        indent = len(line) - len(line.lstrip())
        if indent != 4 or not stripped:
            i += 1
            continue
        m = re.search(r'rank\.(kernel "(\w+)"|fused_adam|fused)', stripped)
        name = (m.group(2) or m.group(1)) if m else stripped.split()[0]
        ins, outs = signature_bytes(stripped)
        body = []
        if stripped.endswith("{"):
            i += 1
            while i < len(lines) and not lines[i].startswith("    }"):
                b = re.search(r'rank\.kernel "(\w+)"', lines[i])
                if b:
                    res = re.search(r"->\s*(tensor<[^>]*>)\s*$", lines[i].strip())
                    n = tensor_elements(res.group(1))[0][0] if res else 0
                    body.append((b.group(1), n))
                i += 1
        flops = 0
        if name in ("matmul",):
            flops = matmul_flops(stripped)
        elif name == "bmm":
            flops = bmm_flops(stripped)
        elif body:
            flops = sum(n for k, n in body if k not in NO_FLOPS)
        ops.append({"kernel": name, "in_bytes": ins, "out_bytes": outs, "flops": flops,
                    "body": [k for k, _ in body]})
        i += 1
    return ops


def matmul_flops(line):
    shapes = re.findall(r"tensor<((?:\d+x)+)\w+>", line.split(":")[-1])
    if len(shapes) < 3:
        return 0
    out = [int(d) for d in shapes[-1].split("x") if d]
    a = [int(d) for d in shapes[0].split("x") if d]
    trans_a = "trans_a = 1" in line
    k = a[0] if trans_a else a[-1]
    return 2 * out[0] * out[1] * k


def bmm_flops(line):
    shapes = re.findall(r"tensor<((?:\d+x)+)\w+>", line.split(":")[-1])
    if len(shapes) < 3:
        return 0
    a = [int(d) for d in shapes[0].split("x") if d]
    out = [int(d) for d in shapes[-1].split("x") if d]
    outn = 1
    for d in out:
        outn *= d
    # K: the dim of A that the output does not keep (the last of A unless
    # transposed; both operands hold head_dim or the sequence).
    ka = a[-1]
    if "trans_a = 1" in line:
        ka = a[1] if len(a) == 4 and "a_perm" not in line else a[-2]
    return 2 * outn * ka


def label(op):
    """A short name of an instruction: the fused group's reductions and
    main kernels."""
    if op["kernel"] != "fused":
        return op["kernel"]
    body = op["body"]
    reds = [k for k in body if k in ("sum", "max", "min")]
    main = [k for k in dict.fromkeys(body) if k not in NO_FLOPS | {"sum", "max", "min"}]
    if "max" in reds and "log" in main:
        kind = "log_softmax/CE fwd"
    elif "max" in reds and "exp" in main and "eq" not in main:
        kind = "softmax fwd"
    elif "max" in reds:
        kind = "row max"
    elif "eq" in main and len(reds) >= 3 and "exp" not in main:
        kind = "softmax/CE bwd" if "div" in main else "row bwd"
    elif "rsqrt" in main and len(reds) == 2:
        kind = "layer_norm fwd"
    elif len(reds) >= 2:
        kind = "layer_norm bwd"
    elif "gelu" in main:
        kind = "bias+gelu fwd"
    elif "exp" in main and "eq" in main:
        kind = "gelu bwd"
    elif reds:
        kind = "row " + "+".join(reds)
    else:
        kind = "elementwise"
    return f"fused: {kind} ({','.join(main[:6])})"


def job_main(job):
    dtorch, model, opt, next_batch = gpt_step_session(job)
    step = gpt_train_step(model, opt, next_batch)
    for _ in range(job["warmup"]):
        step()
    with dtorch.profiler.profile() as prof:
        for _ in range(job["profile_steps"]):
            step()
    ir = dtorch.last_ir("rank")
    best = {}
    for e in prof.trace["traceEvents"]:
        if e.get("ph") != "X" or e.get("cat") != "kernel" or e.get("pid") != 100:
            continue
        key = e["args"].get("detail")
        if key not in best or e["dur"] < best[key]["us"]:
            best[key] = {"name": e["name"], "us": e["dur"], "bytes": e["args"].get("bytes")}
    return {"instructions": best, "ir_ops": instructions_of(ir)}


def stream_triad(n, reps):
    """GB/s of bench/stream_triad.c (compiled here) for n floats per array."""
    src = os.path.join(HERE, "stream_triad.c")
    exe = os.path.join(tempfile.gettempdir(), f"stream_triad_{os.getpid()}")
    subprocess.run(["cc", "-O3", "-march=native", "-o", exe, src, "-lpthread"], check=True)
    try:
        out = subprocess.run([exe, str(n), str(reps)], capture_output=True, text=True,
                             check=True).stdout
    finally:
        os.remove(exe)
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile-steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--compare", action="append", default=[], metavar="ENV=VALUE[,...]")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "rowkern"))
    args = parse_args_or_run_job(ap, argv, job_main)
    if args is None:
        return
    cfg, workdir, job, job_path = gpt_step_job(
        "row_kernel_profile_", args.threads, batch=args.batch, warmup=args.warmup,
        profile_steps=args.profile_steps)
    variants = [("default", {})] + compare_variants(args.compare)
    rounds = {name: [] for name, _ in variants}
    loads = []
    for r in range(args.rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for name, env in order:
            print(f"round {r + 1}: {name} ...", flush=True)
            loads.append(os.getloadavg()[0])
            out = run_json([sys.executable, os.path.abspath(__file__), "--job", job_path],
                           timeout=900, env=dict(os.environ, **env))
            if "error" in out:
                raise SystemExit(f"job ({name}): {out['error']}")
            rounds[name].append(out)
    loads.append(os.getloadavg()[0])
    l2 = stream_triad(1 << 16, 2000)      # 768 KiB: in L2, as the step's tensors
    dram = stream_triad(1 << 23, 20)      # 96 MiB: beyond the caches
    ir_ops = rounds["default"][0]["ir_ops"]
    least = {}
    for name, outs in rounds.items():
        table = {}
        for out in outs:
            for key, v in out["instructions"].items():
                if key not in table or v["us"] < table[key]["us"]:
                    table[key] = v
        least[name] = table
    rows = []
    for key, v in least["default"].items():
        index = int(key.rsplit("#", 1)[1])
        op = ir_ops[index] if index < len(ir_ops) else None
        if op and op["kernel"] != v["name"] and not (op["kernel"] == "fused_adam"
                                                      and v["name"] == "fused_adam"):
            op = None  # the IR does not line up with the program here
        row = {"instruction": key, "kernel": v["name"], "label": label(op) if op else v["name"],
               "us": {n: least[n].get(key, {}).get("us") for n in least},
               "out_bytes": v["bytes"]}
        if op:
            row.update(in_bytes=op["in_bytes"], bytes=op["in_bytes"] + op["out_bytes"],
                       flops=op["flops"])
        rows.append(row)
    rows.sort(key=lambda r: -r["us"]["default"])
    names = [n for n, _ in variants]
    totals = {n: sum(v["us"] for v in least[n].values()) for n in names}
    non_gemm = {n: sum(v["us"] for v in least[n].values()
                       if v["name"] not in ("matmul", "bmm")) for n in names}
    fused = {n: sum(v["us"] for v in least[n].values() if v["name"] == "fused")
             for n in names}
    lines = [f"# Rank 0 kernels of the 1-rank GPT step, per instruction ({time.strftime('%Y-%m-%d %H:%M:%S')})",
             "",
             f"GPT {cfg}, batch {args.batch}, {args.threads} thread(s); least time per "
             f"instruction over {args.profile_steps} profiled steps x {args.rounds} rounds, "
             f"variants alternated in every round; load average {min(loads):.1f}-"
             f"{max(loads):.1f} on {os.cpu_count()} CPUs.",
             "",
             f"One core: STREAM triad {l2['gb_per_s']:.1f} GB/s in L2 (3 x 256 KiB), "
             f"{dram['gb_per_s']:.1f} GB/s beyond the caches (3 x 32 MiB). Bytes: inputs + "
             "outputs, each once; flops: one per element of each arithmetic kernel of a "
             "group (exp, erf, div count one each), 2MNK per product.",
             "",
             "| variant | " + " | ".join(names) + " |",
             "|---|" + "---|" * len(names),
             "| rank 0 kernels, ms per step | " + " | ".join(f"{totals[n] / 1e3:.3f}" for n in names) + " |",
             "| without matmul/bmm, ms | " + " | ".join(f"{non_gemm[n] / 1e3:.3f}" for n in names) + " |",
             "| fused groups, ms | " + " | ".join(f"{fused[n] / 1e3:.3f}" for n in names) + " |",
             "| environment | " + " | ".join(
                 ",".join(f"{k}={v}" for k, v in env.items()) or "(defaults)" for _, env in variants) + " |",
             "",
             f"## Top {args.top} instructions by time (default)", "",
             "| # | instruction | kernel | " + " | ".join(f"us ({n})" for n in names)
             + " | KB moved | MFLOP | GB/s | GFLOP/s | % of L2 triad |",
             "|---|---|---|" + "---|" * len(names) + "---|---|---|---|---|"]
    for i, r in enumerate(rows[:args.top]):
        us = r["us"]["default"]
        gbs = r["bytes"] / us / 1e3 if r.get("bytes") else None
        gfs = r["flops"] / us / 1e3 if r.get("flops") else None
        cells = " | ".join("-" if r["us"][n] is None else f"{r['us'][n]:.1f}" for n in names)
        lines.append(
            f"| {i + 1} | {r['instruction'].split()[-1]} | {r['label']} | {cells} | "
            + (f"{r['bytes'] / 1024:.0f}" if r.get("bytes") else "-") + " | "
            + (f"{r['flops'] / 1e6:.2f}" if r.get("flops") else "-") + " | "
            + (f"{gbs:.1f}" if gbs else "-") + " | " + (f"{gfs:.1f}" if gfs else "-") + " | "
            + (f"{100 * gbs / l2['gb_per_s']:.0f}%" if gbs else "-") + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    write_table_and_json(args.out, text, {
        "time": time.strftime("%Y-%m-%d %H:%M:%S"), "config": cfg, "variants": dict(variants),
        "loads": loads, "stream_l2": l2, "stream_dram": dram, "totals_us": totals,
        "non_gemm_us": non_gemm, "fused_us": fused, "rows": rows})
    print(f"wrote {args.out}/table.md and results.json")


if __name__ == "__main__":
    main()
