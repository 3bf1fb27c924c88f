"""Client main-thread CPU of the GPT step's forward, fast paths on and off.

The 1-rank GPT step of bench/train_bench.py --gpt-step (same model, weights,
batches and AdamW step). Each step is timed whole, but only its forward
(``model(x, y)``, the recording of about 236 ops) is measured, in CPU time
of the main thread (``time.thread_time``), which a busy host inflates far
less than wall time.

Within one process the one-call C++ recordings of the functional operators
(DTORCH_FAST_FUNCTIONAL) are switched on and off step by step, alternately,
so both sides see the same machine state. The module attribute mirror
(DTORCH_FAST_MODULE_ATTRS) is fixed at import, so it is compared across
fresh interpreters, one per variant, alternating for --rounds rounds.

    python3 bench/forward_client_cpu.py [--steps 200] [--rounds 3]

Prints, per variant, the least and the median forward CPU per step (ms)
over all rounds, with the load average. Not run by the tests.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, HERE)

from train_bench import gpt_step_session, prepare_gpt_step, write_job  # noqa: E402


def child(job_path):
    with open(job_path) as f:
        job = json.load(f)
    dtorch, model, opt, next_batch = gpt_step_session(job)
    from dtorch import _decompositions as dec
    times = {True: [], False: []}
    for i in range(job["warmup"] + 2 * job["steps"]):
        fast = i % 2 == 0
        dec._FAST = fast
        x, y = next_batch()
        start = time.thread_time()
        _, loss = model(x, y)
        spent = time.thread_time() - start
        dec._FAST = True
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        if i >= job["warmup"]:
            times[fast].append(spent * 1e3)
    print("RESULT " + json.dumps({"fast": times[True], "python": times[False]}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        return child(args.job)
    cfg, workdir, data, weights = prepare_gpt_step("fwd_cpu_", args.threads)
    job = {"cfg": cfg, "data": data, "weights": weights, "batch": 16,
           "threads": args.threads, "steps": args.steps, "warmup": args.warmup}
    path = write_job(workdir, job)
    variants = [("module attrs on", {}), ("module attrs off", {"DTORCH_FAST_MODULE_ATTRS": "0"})]
    results, loads = {}, []
    for r in range(args.rounds):
        for name, env in variants:
            loads.append(os.getloadavg()[0])
            done = subprocess.run([sys.executable, os.path.abspath(__file__), "--job", path],
                                  capture_output=True, text=True, env=dict(os.environ, **env),
                                  timeout=600)
            if done.returncode != 0:
                sys.exit(done.stdout[-2000:] + done.stderr[-4000:])
            line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")][-1]
            out = json.loads(line[len("RESULT "):])
            for side, label in (("fast", "functional fast"), ("python", "functional python")):
                results.setdefault(f"{name}, {label}", []).extend(out[side])
            print(f"round {r + 1}/{args.rounds}: {name} done", flush=True)
    print(f"\nforward CPU of the client's main thread per GPT step, ms "
          f"({args.rounds} rounds x {args.steps} steps per side, load "
          f"{min(loads):.1f}-{max(loads):.1f})")
    print("| variant | least | median |\n|---|---|---|")
    for name, values in results.items():
        print(f"| {name} | {min(values):.3f} | {statistics.median(values):.3f} |")


if __name__ == "__main__":
    main()
