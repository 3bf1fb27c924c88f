"""The optimizer step of SGD with momentum on the GPT model's parameters:
the multi-tensor update (dtensor.fused_sgd, the default) against the per-op
one (DTORCH_FUSED_SGD=0), interleaved in one process.

The GPT of bench/train_bench.py (--d-model, --layers; 2 layers, d_model 64
by default, 37 parameters) on a (1,) mesh, or with --dp 2 replicated on a
(2,) mesh. Every parameter gets a fixed gradient; a step is `opt.step()`
(SGD, momentum 0.9, Nesterov, weight decay 1e-4) then `synchronize()`.
The two variants have their own model copy and optimizer and alternate
round by round (--rounds); per variant the report gives the median and
least step wall time over all rounds, the client's CPU time of `opt.step()`
(least), and rank 0's kernel time and kernel calls per step (a profile of
--profile-steps steps, least time per instruction), with the ratios
fused / per-op and the load average.

    PYTHONPATH=$PWD/python python3 bench/sgd_step_bench.py [--rounds 5]
        [--steps 30] [--out bench/results/sgdfused]

Prints a markdown table; with --out DIR writes DIR/sgd_step_bench.json and
DIR/sgd_step_bench.md (with --label L: sgd_step_bench_L.json and .md). Not run by the tests.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, os.path.join(ROOT, "python"))

VARIANTS = [("per-op", "0"), ("fused", "1")]


def build(dtorch, mesh, cfg, seed):
    """A GPT on `mesh`, its SGD optimizer and one gradient per parameter."""
    import numpy as np
    from model import GPT, parallelize
    dtorch.manual_seed(seed)
    with dtorch.nn.default_device_mesh(mesh):
        model = parallelize(GPT(cfg), mesh)
    params = list(model.parameters())
    rng = np.random.default_rng(seed)
    grads = [dtorch.distribute_tensor(
        (rng.standard_normal(tuple(p.shape)) * 1e-2).astype(np.float32), p.device_mesh,
        p.placements) for p in params]
    opt = dtorch.optim.SGD(params, lr=1e-2, momentum=0.9, nesterov=True, weight_decay=1e-4)
    return params, grads, opt


def kernels_per_step(trace, steps):
    """Rank 0's compute kernels of a profile: calls and least-time sum per
    step (the least duration of each (run, instruction) among the steps)."""
    from dtorch import profiler
    spans = profiler.spans(trace, 0, "compute")
    kernels = [e for e in spans if e.get("cat") == "kernel"]
    best = {}
    for e in kernels:
        key = (e["name"], e["args"].get("detail"))
        best.setdefault(key, []).append(e["dur"])
    calls = len(kernels) / steps
    ms = sum(min(v) * len(v) for v in best.values()) / 1e3 / steps
    names = {}
    for e in kernels:
        names[e["name"]] = names.get(e["name"], 0) + 1 / steps
    return calls, ms, names


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per round")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dp", type=int, default=1, help="ranks (parameters replicated)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="folder for sgd_step_bench[_LABEL].json and .md")
    ap.add_argument("--label", default="", help="suffix of the output files' names")
    args = ap.parse_args(argv)
    for name in ("DTORCH_BLAS_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(args.threads)
    os.environ["DTORCH_CACHE_DIR"] = ""  # no programs from an earlier run
    import dtorch
    from dtorch import profiler
    from model import GPTConfig

    dtorch.init(world_size=args.dp, num_processes=1)
    mesh = dtorch.init_device_mesh("cpu", (args.dp,), mesh_dim_names=("dp",))
    cfg = GPTConfig(vocab_size=65, block_size=32, n_layer=args.layers, n_head=4,
                    d_model=args.d_model)
    sides = {name: build(dtorch, mesh, cfg, seed) for seed, (name, _) in enumerate(VARIANTS)}
    n_params = len(sides["fused"][0])
    n_elements = sum(int(math.prod(p.shape)) for p in sides["fused"][0])
    walls = {name: [] for name, _ in VARIANTS}
    cpus = {name: [] for name, _ in VARIANTS}
    loads = [os.getloadavg()[0]]

    def step(name):
        params, grads, opt = sides[name]
        for p, g in zip(params, grads):
            p.grad = g
        t = time.perf_counter()
        c = time.thread_time()
        opt.step()
        c = time.thread_time() - c
        dtorch.synchronize()
        return time.perf_counter() - t, c

    for _ in range(args.rounds):
        for name, switch in VARIANTS:
            os.environ["DTORCH_FUSED_SGD"] = switch
            for i in range(args.warmup + args.steps):
                wall, cpu = step(name)
                if i >= args.warmup:
                    walls[name].append(wall * 1e3)
                    cpus[name].append(cpu * 1e3)
        loads.append(os.getloadavg()[0])
    profiles = {}
    for name, switch in VARIANTS:
        os.environ["DTORCH_FUSED_SGD"] = switch
        step(name)
        with profiler.profile() as prof:
            for _ in range(args.profile_steps):
                step(name)
        profiles[name] = kernels_per_step(prof.trace, args.profile_steps)
    ir = {}
    for name, switch in VARIANTS:
        os.environ["DTORCH_FUSED_SGD"] = switch
        step(name)
        ir[name] = dtorch.last_ir("input").count(" = dtensor.")
    dtorch.shutdown()

    rows = []
    for name, _ in VARIANTS:
        calls, kms, names = profiles[name]
        rows.append({"variant": name, "wall_ms_median": statistics.median(walls[name]),
                     "wall_ms_min": min(walls[name]), "client_cpu_ms_min": min(cpus[name]),
                     "client_cpu_ms_median": statistics.median(cpus[name]),
                     "rank0_kernel_ms": kms, "rank0_kernel_calls": calls,
                     "recorded_ops": ir[name],
                     "rank0_kernels": {k: round(v, 2) for k, v in names.items()}})
    a, b = rows
    ratio = {k: b[k] / a[k] for k in ("wall_ms_median", "wall_ms_min", "client_cpu_ms_min",
                                      "rank0_kernel_ms") if a[k]}
    result = {"time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
              "config": dict(d_model=args.d_model, layers=args.layers, dp=args.dp,
                             threads=args.threads, rounds=args.rounds, steps=args.steps),
              "parameters": n_params, "elements": n_elements,
              "load_average": {"min": min(loads), "max": max(loads)},
              "rows": rows, "ratio_fused_over_per_op": ratio}
    md = [f"# SGD (momentum 0.9, Nesterov, weight decay) step on the GPT's parameters "
          f"({result['time']} UTC)", "",
          f"GPT d_model {args.d_model}, {args.layers} layers: {n_params} parameters, "
          f"{n_elements} elements, on {args.dp} rank(s), {args.threads} thread(s); "
          f"variants interleaved over {args.rounds} rounds of {args.steps} steps; "
          f"load average {min(loads):.2f}-{max(loads):.2f}.", "",
          "| variant | step wall median (ms) | step wall least (ms) | client CPU of "
          "opt.step() least (ms) | rank 0 kernel time (ms) | rank 0 kernel calls | "
          "ops recorded |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['variant']} | {r['wall_ms_median']:.3f} | {r['wall_ms_min']:.3f} | "
                  f"{r['client_cpu_ms_min']:.3f} | {r['rank0_kernel_ms']:.3f} | "
                  f"{r['rank0_kernel_calls']:.0f} | {r['recorded_ops']} |")
    md.append("| fused / per-op | " + " | ".join(
        f"{ratio[k]:.2f}" if k in ratio else "-"
        for k in ("wall_ms_median", "wall_ms_min", "client_cpu_ms_min", "rank0_kernel_ms"))
        + " | | |")
    text = "\n".join(md) + "\n"
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        stem = "sgd_step_bench" + (f"_{args.label}" if args.label else "")
        with open(os.path.join(args.out, stem + ".json"), "w") as f:
            json.dump(result, f, indent=1)
        with open(os.path.join(args.out, stem + ".md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
