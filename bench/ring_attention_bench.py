"""Ring attention's memory: each rank's peak memory during a forward and
backward of causal attention over a (cp,) "cp" mesh, ring attention (the
sequence split over "cp", key/value blocks passed around the ring) next to
full attention (every rank holds the whole sequence), at the same sequence
length. Each setting runs in a fresh interpreter (a rank's peak is a
high-water mark of its process); the peak counted is the rise over what the
rank held before the step.

Writes table.md and results.json to bench/results/ring_attention/. Not run
by the tests (test_ring_attention_bench.py runs a tiny setting).

    python3 bench/ring_attention_bench.py [--cp 4] [--seq 1024] [--heads 4] [--dim 32]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_support import parse_args_or_run_job, run_job_file, write_table_and_json  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_job(job):
    import dtorch
    import dtorch.nn.functional as F
    from dtorch import Replicate, Shard
    from dtorch.distributed.tensor.experimental import ring_attention

    cp, t, h, d = job["cp"], job["seq"], job["heads"], job["dim"]
    dtorch.init(world_size=cp)
    mesh = dtorch.init_device_mesh("cpu", (cp,), mesh_dim_names=("cp",))
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((1, h, t, d)).astype(np.float32) for _ in range(3)]
    layout = [Shard(2)] if job["kind"] == "ring" else [Replicate()]
    q, k, v = [dtorch.distribute_tensor(a, mesh, layout).requires_grad_() for a in arrays]
    dtorch.synchronize()
    before = [r["bytes"] for r in dtorch.memory_stats()]
    if job["kind"] == "ring":
        out = ring_attention(q, k, v, is_causal=True)
    else:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.sum().backward()
    loss = float(q.grad.numpy().sum())
    stats = dtorch.memory_stats()
    dtorch.shutdown()
    return dict(job, peak_rise=[s["peak_bytes"] - b for s, b in zip(stats, before)],
                check=loss)


def run_in_fresh_interpreter(job):
    return run_job_file(__file__, job)


def measure(cp, seq, heads, dim):
    return [run_in_fresh_interpreter(dict(kind=kind, cp=cp, seq=seq, heads=heads, dim=dim))
            for kind in ("full", "ring")]


def table(results):
    full = max(next(r for r in results if r["kind"] == "full")["peak_rise"])
    lines = ["| attention | cp | sequence | peak per rank (MiB, max over ranks) | "
             "ratio to full | 1/cp |", "|---|---|---|---|---|---|"]
    for r in results:
        peak = max(r["peak_rise"])
        lines.append(f"| {r['kind']} | {r['cp']} | {r['seq']} | {peak / 2 ** 20:.2f} | "
                     f"{peak / full:.2f} | {1 / r['cp']:.2f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cp", type=int, default=4)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "ring_attention"))
    args = parse_args_or_run_job(parser, None, run_job)
    if args is None:
        return
    results = measure(args.cp, args.seq, args.heads, args.dim)
    text = table(results)
    print(text)
    write_table_and_json(args.out, text + "\n", results)


if __name__ == "__main__":
    main()
