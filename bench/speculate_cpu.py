"""Step time and CPU of the 1-rank synchronous GPT step with DTORCH_SPECULATE
on and off, alternated in child processes (one dtorch session each): median
and best step, CPU per step of all processes (client, controller, workers)
and of the client's main thread, and rank 0's speculation counters.

    python3 bench/speculate_cpu.py [--pairs 2] [--steps 30]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import train_bench  # noqa: E402


def child(job):
    dtorch, model, opt, next_batch = train_bench.gpt_step_session(job)

    step = train_bench.gpt_train_step(model, opt, next_batch)

    for _ in range(job["warmup"]):
        step()
    cpu0 = time.process_time() + train_bench._children_cpu_seconds()
    main0 = time.thread_time()
    times = []
    for _ in range(job["steps"]):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    n = job["steps"]
    cpu = (time.process_time() + train_bench._children_cpu_seconds() - cpu0) / n
    times.sort()
    print(json.dumps({"best_ms": times[0] * 1e3, "median_ms": times[n // 2] * 1e3,
                      "cpu_ms": cpu * 1e3, "main_cpu_ms": (time.thread_time() - main0) / n * 1e3,
                      "speculation": dtorch.memory_stats()[0]["speculation"]}))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:
        with open(args.job) as f:
            child(json.load(f))
        return
    cfg, workdir, data_path, weights = train_bench.prepare_gpt_step("spec_cpu_", 1)
    path = train_bench.write_job(workdir, {
        "cfg": cfg, "data": data_path, "weights": weights, "batch": 16, "threads": 1,
        "warmup": args.warmup, "steps": args.steps})
    for p in range(args.pairs):
        for value in ("1", "0"):
            load = os.getloadavg()[0]
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--job", path],
                                  env=dict(os.environ, DTORCH_SPECULATE=value),
                                  capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr[-3000:])
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"pair {p + 1} DTORCH_SPECULATE={value} load {load:.1f}: {json.dumps(out)}",
                  flush=True)


if __name__ == "__main__":
    main()
