"""MoE dispatch and combine under ExpertParallel: the exchange of counted
rows (dtensor.all_to_all_v, the default) next to the layer's other path
(capacity-sized buffers per expert that the compiler's collectives move
whole), in the same run on EP = 4.

For each variant and capacity factor: the bytes every rank's collectives
move per training step (forward and backward, from the profiler trace),
the rows the routing kept, and the cached step's wall time (best of N,
the variants interleaved). Writes table.md and results.json to
bench/results/moe_dispatch/.

    python3 bench/moe_dispatch_bench.py [--tokens 256] [--d-model 64] [--rounds 5]
"""
import argparse
import os
import time

import numpy as np

import dtorch
from bench_support import write_table_and_json
from dtorch import Shard, profiler
from dtorch.distributed.tensor.parallel import ExpertParallel, parallelize_module
from dtorch.nn import MoE

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "moe_dispatch")


def make(args, cf, mesh, exchanged):
    dtorch.manual_seed(0)
    moe = MoE(args.d_model, 2 * args.d_model, n_experts=args.experts, top_k=2,
              capacity_factor=cf)
    parallelize_module(moe, mesh["ep"], ExpertParallel())
    if not exchanged:  # the capacity-buffer path, as before the exchange existed
        moe._expert_parallel = lambda: None
    return moe


def step(moe, x):
    out = moe(x)
    loss = (out * out).mean() + moe.aux_loss * 0.01
    loss.backward()
    value = loss.item()
    for p in moe.parameters():
        p.grad = None
    return value


def comm_bytes(trace, ranks, name=None):
    per_rank = []
    for r in range(ranks):
        per_rank.append(sum(e["args"].get("bytes", 0) for e in profiler.spans(trace, r, "comm")
                            if name is None or e["name"] == name))
    return per_rank


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    dtorch.init(world_size=4, num_processes=2)
    mesh = dtorch.init_device_mesh("cpu", (4,), mesh_dim_names=("ep",))
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((args.tokens, args.d_model)).astype(np.float32)
    x = dtorch.distribute_tensor(x_np, mesh, [Shard(0)])
    results = []
    for cf in (1.0, 2.0):
        variants = {"all_to_all_v": make(args, cf, mesh, True),
                    "capacity buffers": make(args, cf, mesh, False)}
        losses, best, exchanged = {}, {}, {}
        for name, moe in variants.items():
            for _ in range(3):  # compile, then cached
                losses[name] = step(moe, x)
            dtorch.synchronize()
            with profiler.profile() as prof:
                step(moe, x)
            best[name] = (comm_bytes(prof.trace, 4), float("inf"))
            exchanged[name] = sum(comm_bytes(prof.trace, 4, "all_to_all_v"))
        for _ in range(args.rounds):
            for name, moe in variants.items():
                start = time.perf_counter()
                step(moe, x)
                elapsed = time.perf_counter() - start
                best[name] = (best[name][0], min(best[name][1], elapsed))
        assert abs(losses["all_to_all_v"] - losses["capacity buffers"]) <= 1e-4 * max(
            1.0, abs(losses["capacity buffers"])), losses
        for name, (per_rank, seconds) in best.items():
            results.append({"capacity_factor": cf, "variant": name,
                            "comm_bytes_per_rank": per_rank,
                            "comm_bytes_total": sum(per_rank),
                            "all_to_all_v_bytes_total": exchanged[name],
                            "step_ms_best": seconds * 1e3, "loss": losses[name]})
    load = os.getloadavg()[0]
    lines = [f"# MoE dispatch: EP = 4, {args.tokens} tokens, d_model {args.d_model}, "
             f"{args.experts} experts, top-2 (load {load:.1f})", "",
             "| capacity factor | variant | collective bytes per step (all ranks) "
             "| of which all_to_all_v | per rank | step ms (best of %d) |" % args.rounds,
             "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['capacity_factor']} | {r['variant']} | {r['comm_bytes_total']:,} | "
                     f"{r['all_to_all_v_bytes_total']:,} | "
                     f"{', '.join(f'{b:,}' for b in r['comm_bytes_per_rank'])} | "
                     f"{r['step_ms_best']:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    write_table_and_json(OUT, text, {"args": vars(args), "load": load, "results": results})


if __name__ == "__main__":
    main()
