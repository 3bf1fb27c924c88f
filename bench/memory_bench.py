"""Peak memory per rank of a GPT training step with and without buffer
planning and donation, side by side in one run.

The GPT of examples/gpt (a small config: vocabulary 64, context 32, 2
layers, 4 heads, width 64 unless given) trains a few AdamW steps (forward,
backward and update are one segment) on 1 rank, data parallel on 2 ranks
and fully_shard on 2 ranks, each three times: with neither buffer planning
nor donation (DTORCH_BUFFER_PLANNING=0 DTORCH_DONATION=0), with planning
alone (DTORCH_DONATION=0) and with both (the default), every measurement in
a fresh interpreter of its own. Donation lets the step write the new
parameters and Adam moments into the storage of the old ones (which only
the step holds), so a step does not hold both. After the last step each rank reports (dtorch.memory_stats()):

- peak: its memory during the last step's run: the tensors it holds before
  the run (parameters, gradients, moments, the batch), plus the arena of the
  planned temporaries, plus every buffer the run gave its own storage (its
  outputs; without planning every temporary as well);
- arena: the arena of the step's planned temporaries (0 without planning);
- held: the tensors it holds between steps;
- param+state: the bytes of the parameters and both moments per rank (what
  donation should save).

The losses of the three runs must be equal (neither changes a number).

    python3 bench/memory_bench.py [--steps 3] [--batch 16] [--out bench/results/memory]

Writes table.md, results.json and memory.png to the output folder. Not run
by the tests (test/python/test_buffer_planning.py runs a tiny version).
"""
import argparse
import json
import os
import subprocess
import sys
import time

from bench_support import write_table_and_json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))

SETUPS = [("1 rank", 1, "single"), ("DP=2", 2, "dp"), ("FSDP=2", 2, "fsdp")]
DEFAULT_CFG = dict(vocab_size=64, block_size=32, n_layer=2, n_head=4, d_model=64)


def measure(cfg, ranks, mode, steps, batch):
    """Runs in the child: trains and returns each rank's memory and the
    losses."""
    import gc

    import numpy as np

    import dtorch
    from dtorch import Shard
    from model import GPT, GPTConfig

    dtorch.init(world_size=ranks, num_processes=ranks)
    mesh = dtorch.init_device_mesh("cpu", (ranks,), mesh_dim_names=("dp",))
    dtorch.manual_seed(0)
    with dtorch.nn.default_device_mesh(mesh):
        model = GPT(GPTConfig(**cfg))
    if mode == "fsdp":
        from dtorch.distributed.fsdp import fully_shard
        for i in range(len(model.blocks)):
            fully_shard(model.blocks[i], mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = dtorch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        idx = rng.integers(0, cfg["vocab_size"], size=(batch, cfg["block_size"] + 1))
        x = dtorch.distribute_tensor(idx[:, :-1], mesh, [Shard(0)])
        y = dtorch.distribute_tensor(idx[:, 1:], mesh, [Shard(0)])
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
        del x, y, loss
    gc.collect()
    stats = dtorch.memory_stats()
    # Parameters and Adam moments on the busiest rank: each parameter's
    # first (largest) torch.chunk piece, three times.
    local = 0
    for p in model.parameters():
        shape = list(p.shape)
        for placement in p.placements:
            if isinstance(placement, Shard):
                shape[placement.dim] = -(-shape[placement.dim] // ranks)
        local += int(np.prod(shape)) * 4
    dtorch.shutdown()
    return {
        "losses": losses,
        "param_state_bytes": 3 * local,
        "ranks": [{key: r[key] for key in ("rank", "bytes", "arena_bytes",
                                           "last_run_arena_bytes",
                                           "last_run_peak_bytes", "peak_bytes")}
                  for r in stats],
    }


def run_child(cfg, ranks, mode, steps, batch, planning, donation=True):
    env = dict(os.environ)
    env["DTORCH_BUFFER_PLANNING"] = "1" if planning else "0"
    env["DTORCH_DONATION"] = "1" if donation else "0"
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    job = json.dumps(dict(cfg=cfg, ranks=ranks, mode=mode, steps=steps, batch=batch))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", job],
                       capture_output=True, text=True, timeout=600, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"child failed ({mode}, {ranks} ranks, planning={planning}, "
                           f"donation={donation}):\n"
                           + r.stdout[-2000:] + r.stderr[-4000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def compare(cfg, steps, batch, setups=SETUPS):
    """Every setup with neither planning nor donation ("off"), planning
    alone and both ("on", the default): one row per setup."""
    rows = []
    for name, ranks, mode in setups:
        off = run_child(cfg, ranks, mode, steps, batch, planning=False, donation=False)
        planned = run_child(cfg, ranks, mode, steps, batch, planning=True, donation=False)
        on = run_child(cfg, ranks, mode, steps, batch, planning=True, donation=True)
        peak_off = max(r["last_run_peak_bytes"] for r in off["ranks"])
        peak_planned = max(r["last_run_peak_bytes"] for r in planned["ranks"])
        peak_on = max(r["last_run_peak_bytes"] for r in on["ranks"])
        rows.append(dict(
            setup=name, ranks=ranks, mode=mode,
            peak_bytes_off=peak_off, peak_bytes_planned=peak_planned, peak_bytes_on=peak_on,
            ratio=peak_off / peak_on if peak_on else None,
            donation_saved_bytes=peak_planned - peak_on,
            param_state_bytes=on["param_state_bytes"],
            arena_bytes=max(r["last_run_arena_bytes"] for r in on["ranks"]),
            held_bytes_off=max(r["bytes"] for r in off["ranks"]),
            held_bytes_on=max(r["bytes"] for r in on["ranks"]),
            high_water_off=max(r["peak_bytes"] for r in off["ranks"]),
            high_water_on=max(r["peak_bytes"] for r in on["ranks"]),
            losses_equal=off["losses"] == on["losses"] == planned["losses"],
            losses=on["losses"], per_rank_off=off["ranks"], per_rank_on=on["ranks"]))
    return rows


def kib(b):
    return f"{b / 1024:,.1f}"


def table(rows, cfg, steps, batch):
    lines = [
        f"GPT {cfg}, batch {batch}, {steps} AdamW steps; peak memory per rank of the "
        "last step (the busiest rank), KiB.",
        "",
        "| setup | peak, neither | peak, planning | peak, planning + donation | ratio "
        "| donation saves | param+state | arena (planned temporaries) | held between steps "
        "| losses equal |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['setup']} | {kib(r['peak_bytes_off'])} | {kib(r['peak_bytes_planned'])} | "
            f"{kib(r['peak_bytes_on'])} | {r['ratio']:.2f}x | {kib(r['donation_saved_bytes'])} | "
            f"{kib(r['param_state_bytes'])} | {kib(r['arena_bytes'])} | "
            f"{kib(r['held_bytes_on'])} | {'yes' if r['losses_equal'] else 'NO'} |")
    return "\n".join(lines) + "\n"


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = np.arange(len(rows))
    ax.bar(xs - 0.27, [r["peak_bytes_off"] / 1024 for r in rows], 0.27,
           label="neither (DTORCH_BUFFER_PLANNING=0 DTORCH_DONATION=0)")
    ax.bar(xs, [r["peak_bytes_planned"] / 1024 for r in rows], 0.27,
           label="planning (DTORCH_DONATION=0)")
    ax.bar(xs + 0.27, [r["peak_bytes_on"] / 1024 for r in rows], 0.27,
           label="planning + donation")
    for x, r in zip(xs, rows):
        ax.text(x + 0.27, r["peak_bytes_on"] / 1024, f"{r['ratio']:.2f}x smaller",
                ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs, [r["setup"] for r in rows])
    ax.set_ylabel("peak KiB per rank (GPT training step)")
    ax.set_title("buffer planning and donation: peak memory per rank (lower is better)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--d-model", type=int, default=DEFAULT_CFG["d_model"])
    ap.add_argument("--block-size", type=int, default=DEFAULT_CFG["block_size"])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "memory"))
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    if args.child:
        job = json.loads(args.child)
        print(json.dumps(measure(job["cfg"], job["ranks"], job["mode"], job["steps"],
                                 job["batch"])))
        return 0
    cfg = dict(DEFAULT_CFG, d_model=args.d_model, block_size=args.block_size)
    start = time.time()
    rows = compare(cfg, args.steps, args.batch)
    text = table(rows, cfg, args.steps, args.batch)
    print(text)
    write_table_and_json(args.out, text, dict(config=cfg, steps=args.steps, batch=args.batch,
                                              rows=rows, seconds=time.time() - start))
    if not args.no_plot:
        plot(rows, os.path.join(args.out, "memory.png"))
    return 0 if all(r["losses_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
