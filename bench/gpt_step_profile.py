"""Where the time of a 1-rank GPT training step goes, next to torch eager.

The GPT of bench/train_bench.py (same config, batch and AdamW step) on a
(1,) mesh: the median step time, then a profile (dtorch.profiler) of more
steps, from which the kernel time of rank 0 is summed per kernel name
(calls and milliseconds per step), and the torch eager step time of the same
model measured in the same run (bench/torch_peer.py in build/torch-venv).
Each side also reports its CPU time per step (dtorch: the client process and
its workers), which a busy shared host inflates far less than wall time.

    python3 bench/gpt_step_profile.py [--steps 20] [--profile-steps 5]
        [--compare DTORCH_FOLD_TRANSPOSE=0] [--label NAME]

`--compare` adds a dtorch run with other environment variables (a compiler
option turned off), shown side by side with the default. The variants and
torch run alternately for --rounds rounds and each keeps its fastest (a
shared, busy host slows them alike). Each dtorch measurement runs in a fresh
interpreter. Appends the result, under --label,
to bench/results/gpt_step_profile.json. Not run by the tests.
"""
import argparse
import json
import os
import statistics
import sys
import time


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, HERE)

from bench_support import parse_args_or_run_job, run_json  # noqa: E402
from train_bench import (DEFAULT_TORCH_PYTHON, _children_cpu_seconds,  # noqa: E402
                         compare_variants, gpt_step_job, gpt_step_session, run_torch)


def _instruction_minimum(trace):
    """Per kernel name: instructions and the sum over them of each one's least
    time (us) among the profiled steps. An instruction is (program, index);
    its least time is what it costs when no other process preempts it."""
    runs = sorted((e for e in trace["traceEvents"]
                   if e.get("cat") == "run" and e.get("pid") == 100),
                  key=lambda e: e["ts"])
    best = {}
    for e in dtorch_spans(trace):
        run = next((r for r in runs if r["ts"] <= e["ts"] <= r["ts"] + r["dur"]), None)
        key = ((run or {}).get("args", {}).get("detail"), e["args"].get("detail"))
        if key not in best or e["dur"] < best[key][1]:
            best[key] = (e["name"], e["dur"])
    kernels = {}
    for name, dur in best.values():
        k = kernels.setdefault(name, {"calls": 0, "ms": 0.0})
        k["calls"] += 1
        k["ms"] += dur / 1e3
    return kernels


def dtorch_spans(trace):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"
            and e.get("pid") == 100]


def dtorch_job(job):
    """Step times, CPU per step, the main thread's CPU per phase of the step
    and the kernels of rank 0 (least time per instruction), in this process."""
    dtorch, model, opt, next_batch = gpt_step_session(job)
    phases = {k: [] for k in ("batch", "forward", "backward", "optimizer", "fetch")}

    def step():
        c = [time.thread_time()]
        x, y = next_batch()
        c.append(time.thread_time())
        _, loss = model(x, y)
        c.append(time.thread_time())
        loss.backward()
        c.append(time.thread_time())
        opt.step()
        opt.zero_grad(set_to_none=True)
        c.append(time.thread_time())
        value = loss.item()
        c.append(time.thread_time())
        for name, a, b in zip(phases, c, c[1:]):
            phases[name].append((b - a) * 1e3)
        return value

    times = []
    for i in range(job["warmup"] + job["steps"]):
        if i == job["warmup"]:
            cpu = time.process_time() + _children_cpu_seconds()
            for v in phases.values():
                v.clear()
        t = time.perf_counter()
        step()
        if i >= job["warmup"]:
            times.append(time.perf_counter() - t)
    # CPU time of the client and the workers per step: the work done,
    # which a busy host inflates far less than it does wall time.
    cpu = (time.process_time() + _children_cpu_seconds() - cpu) / job["steps"]
    with dtorch.profiler.profile() as prof:
        for _ in range(job["profile_steps"]):
            step()
    n = job["profile_steps"]
    ops, controller = {}, {}
    for e in prof.trace["traceEvents"]:
        if e.get("ph") != "X":
            continue
        table = ops if (e.get("pid"), e.get("cat")) == (1, "op") else (
            controller if e.get("pid") == 2 else None)
        if table is not None:
            k = table.setdefault(e["name"], {"calls": 0, "ms": 0.0})
            k["calls"] += 1 / n
            k["ms"] += e["dur"] / 1e3 / n
    return {"seconds": statistics.median(times), "cpu_seconds": cpu,
            "phases_cpu_ms": {k: min(v) for k, v in phases.items()},
            "client_ops": ops, "controller": controller,
            "kernels": _instruction_minimum(prof.trace)}


def profile_markdown(result):
    """The measured breakdown of a run as markdown (bench/results/
    gpt_step_profile.md): step and CPU times, the client's CPU per phase,
    the controller, rank 0's kernels (least time per instruction) and
    torch's ops (self CPU) per step."""
    d = result["dtorch"]["default"]
    lines = [f"# GPT step profile: dtorch 1 rank next to torch eager ({result['time']})", "",
             f"Config {result['config']}, batch {result['batch']}, {result['threads']} "
             f"thread(s), same initial weights and batches; fastest of {result['rounds']} "
             f"interleaved rounds; load average {result['load_min']:.1f}-"
             f"{result['load_max']:.1f} on {os.cpu_count()} CPUs.", "",
             "| | dtorch | torch eager |", "|---|---|---|",
             f"| step ms (median of {result['steps']}) | {d['step_ms']:.2f} | "
             f"{fmt_ms(result['torch_eager_step_ms'])} |",
             f"| CPU ms per step, all processes | {d['cpu_ms_per_step']:.2f} | "
             f"{fmt_ms(result['torch_eager_cpu_ms'])} |",
             f"| rank 0 kernels ms per step (least per instruction) | "
             f"{d['kernel_ms_per_step']:.2f} | - |", "",
             "## dtorch client: main thread CPU ms per phase (least of the steps)", "",
             "| phase | ms |", "|---|---|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in d["client_phases_cpu_ms"].items()]
    lines += ["", "## dtorch controller thread per step", "", "| event | calls | ms |",
              "|---|---|---|"]
    lines += [f"| {k} | {v['calls']:.0f} | {v['ms']:.3f} |" for k, v in
              sorted(d["controller"].items(), key=lambda kv: -kv[1]["ms"])]
    ops = d["client_ops"]
    lines += ["", f"Ops recorded by the client per step: {sum(v['calls'] for v in ops.values()):.0f}"
              f" ({sum(v['ms'] for v in ops.values()):.2f} ms inside the session's op calls).",
              "", "## rank 0 kernels per step", "", "| kernel | calls | ms |", "|---|---|---|"]
    lines += [f"| {k} | {v['calls']:.0f} | {v['ms']:.3f} |" for k, v in
              sorted(d["kernels"].items(), key=lambda kv: -kv[1]["ms"])[:25]]
    lines += ["", "## torch eager: self CPU per step (torch.profiler)", "",
              "| op | calls | ms |", "|---|---|---|"]
    lines += [f"| {k} | {v['calls']:.0f} | {v['us'] / 1e3:.3f} |" for k, v in
              sorted(result["torch_ops_us_per_step"].items(), key=lambda kv: -kv[1]["us"])[:25]]
    return "\n".join(lines) + "\n"


def fmt_ms(x):
    return "-" if x is None else f"{x:.2f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="timed steps (median)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of every variant and torch, alternated; the fastest counts")
    ap.add_argument("--label", default="run")
    ap.add_argument("--compare", action="append", default=[], metavar="ENV=VALUE[,...]",
                    help="also run dtorch with these environment variables (e.g. "
                    "DTORCH_FOLD_TRANSPOSE=0), side by side with the default")
    ap.add_argument("--torch-python", default=DEFAULT_TORCH_PYTHON)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "gpt_step_profile.json"))
    args = parse_args_or_run_job(ap, argv, dtorch_job)
    if args is None:
        return
    cfg, workdir, job, job_path = gpt_step_job(
        "gpt_step_profile_", args.threads, batch=args.batch, warmup=args.warmup,
        steps=args.steps, profile_steps=args.profile_steps)
    # Each variant: its name and the environment it adds to the dtorch job.
    variants = compare_variants(args.compare) + [("default", {})]
    spec = {"gpt_step": dict(job, mode="eager", seed=0, lr=3e-3)}
    # Rounds alternate the variants and torch, so that a busy host slows
    # them alike; each keeps its fastest round (per kernel and op: its least
    # time).
    rounds = {name: [] for name, _ in variants}
    torch_rounds, missing, loads = [], None, []
    for r in range(args.rounds):
        for name, env in variants:
            print(f"round {r + 1}: dtorch, GPT on 1 rank ({name}) ...", flush=True)
            loads.append(os.getloadavg()[0])
            out = run_json([sys.executable, os.path.abspath(__file__), "--job", job_path],
                           timeout=600, env=dict(os.environ, **env))
            if "error" in out:
                raise SystemExit(f"dtorch job ({name}): {out['error']}")
            rounds[name].append(out)
        print(f"round {r + 1}: torch eager ...", flush=True)
        loads.append(os.getloadavg()[0])
        peer, missing = run_torch(args.torch_python, spec)
        if peer:
            torch_rounds.append(peer)

    def least(tables):
        out = {}
        for table in tables:
            for key, k in table.items():
                value = k.get("ms", k.get("us"))
                if key not in out or value < out[key].get("ms", out[key].get("us")):
                    out[key] = k
        return out

    torch_s = min(statistics.median(p["step_s"]) for p in torch_rounds) if torch_rounds else None
    torch_cpu = min(p["cpu_s"] for p in torch_rounds) if torch_rounds else None
    torch_ops = least(p["ops"] for p in torch_rounds) if torch_rounds else {}
    results = {}
    for name, outs in rounds.items():
        results[name] = {"seconds": min(o["seconds"] for o in outs),
                         "cpu_seconds": min(o["cpu_seconds"] for o in outs),
                         "round_seconds": [o["seconds"] for o in outs],
                         "kernels": least(o["kernels"] for o in outs),
                         "client_ops": least(o["client_ops"] for o in outs),
                         "controller": least(o["controller"] for o in outs),
                         "phases_cpu_ms": {k: min(o["phases_cpu_ms"][k] for o in outs)
                                           for k in outs[0]["phases_cpu_ms"]}}
    names = [n for n, _ in variants]
    print(f"\nGPT 1 rank, batch {args.batch}, {args.threads} thread(s), median of "
          f"{args.steps} steps, fastest of {args.rounds} rounds; kernels of rank 0 per "
          f"step from a profile of {args.profile_steps} steps (least per kernel)")
    print("torch eager step: " + ("-" if torch_s is None else f"{torch_s * 1e3:.2f} ms")
          + ("" if torch_cpu is None else f", {torch_cpu * 1e3:.2f} cpu ms")
          + (f" ({missing})" if missing else ""))
    width = max(22, max(len(n) for n in names) + 2)
    print(f"{'':22}" + "".join(f"{n:>{width}}" for n in names))
    print(f"{'step ms':22}" + "".join(
        f"{results[n]['seconds'] * 1e3:>{width}.2f}" for n in names))
    print(f"{'cpu ms per step':22}" + "".join(
        f"{results[n]['cpu_seconds'] * 1e3:>{width}.2f}" for n in names))
    if torch_s:
        print(f"{'ratio to torch eager':22}" + "".join(
            f"{results[n]['seconds'] / torch_s:>{width}.2f}" for n in names))
    print(f"{'kernels ms':22}" + "".join(
        f"{sum(k['ms'] for k in results[n]['kernels'].values()):>{width}.2f}" for n in names))
    every = sorted({k for n in names for k in results[n]["kernels"]},
                   key=lambda k: -max(results[n]["kernels"].get(k, {"ms": 0})["ms"]
                                      for n in names))
    for kernel in every:
        cells = []
        for n in names:
            k = results[n]["kernels"].get(kernel)
            cells.append("-" if k is None else f"{k['ms']:.3f} ms x{k['calls']:.0f}")
        print(f"{kernel:22}" + "".join(f"{c:>{width}}" for c in cells))

    result = {"label": args.label, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "threads": args.threads, "batch": args.batch, "steps": args.steps,
              "config": cfg, "rounds": args.rounds,
              "torch_eager_step_ms": None if torch_s is None else torch_s * 1e3,
              "torch_round_ms": [statistics.median(p["step_s"]) * 1e3 for p in torch_rounds],
              "torch_eager_cpu_ms": None if torch_cpu is None else torch_cpu * 1e3,
              "torch_ops_us_per_step": torch_ops,
              "load_min": min(loads), "load_max": max(loads),
              "torch_missing": missing,
              "dtorch": {n: {"environment": env, "step_ms": results[n]["seconds"] * 1e3,
                             "round_step_ms": [t * 1e3 for t in results[n]["round_seconds"]],
                             "cpu_ms_per_step": results[n]["cpu_seconds"] * 1e3,
                             "kernel_ms_per_step": sum(k["ms"] for k in
                                                       results[n]["kernels"].values()),
                             "kernels": results[n]["kernels"],
                             "client_phases_cpu_ms": results[n]["phases_cpu_ms"],
                             "client_ops": results[n]["client_ops"],
                             "controller": results[n]["controller"]}
                         for n, env in variants}}
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(profile_markdown(result))
    print(f"wrote {args.out} and {os.path.splitext(args.out)[0]}.md")
    runs = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            runs = json.load(f)
    runs = [r for r in runs if r.get("label") != args.label] + [result]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(runs, f, indent=1)

if __name__ == "__main__":
    main()
