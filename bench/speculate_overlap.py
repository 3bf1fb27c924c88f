"""How much of the worker's run time of the 1-rank synchronous GPT step
overlaps the client's recording, with DTORCH_SPECULATE on and off: a profiled
run of --steps steps (after warm-up) in a child process per setting. From the
trace: each step's recording window (from its first recorded op to its
segment cut, on the client lane) and rank 0's run and speculate spans; the
share is the span time inside recording windows over all span time.

    python3 bench/speculate_overlap.py [--steps 10]
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


def overlap_share(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") in ("X", "i", "I")]
    client = sorted((e for e in events if e.get("pid") == 1), key=lambda e: e["ts"])
    windows, start = [], None
    for e in client:
        if e.get("cat") == "op" and start is None:
            start = e["ts"]
        elif e.get("name") == "segment cut" and start is not None:
            windows.append((start, e["ts"]))
            start = None
    spans = [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in events
             if e.get("ph") == "X" and e.get("pid") == 100 and e.get("cat") == "run"]
    total = sum(b - a for a, b, _ in spans)
    inside = sum(max(0.0, min(b, wb) - max(a, wa)) for a, b, _ in spans for wa, wb in windows)
    speculative = sum(b - a for a, b, n in spans if n.startswith("speculate"))
    return {"run_ms": total / 1e3, "inside_recording_ms": inside / 1e3,
            "share": inside / total if total else 0.0, "speculate_span_ms": speculative / 1e3,
            "windows": len(windows)}


def child(job):
    dtorch, model, opt, next_batch = train_bench.gpt_step_session(job)

    step = train_bench.gpt_train_step(model, opt, next_batch)

    for _ in range(job["warmup"]):
        step()
    with dtorch.profiler.profile() as prof:
        t = time.perf_counter()
        for _ in range(job["steps"]):
            step()
        seconds = (time.perf_counter() - t) / job["steps"]
    out = overlap_share(prof.trace)
    out["step_ms"] = seconds * 1e3
    print(json.dumps(out))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:
        with open(args.job) as f:
            child(json.load(f))
        return
    cfg, workdir, data_path, weights = train_bench.prepare_gpt_step("spec_overlap_", 1)
    job = {"cfg": cfg, "data": data_path, "weights": weights, "batch": 16, "threads": 1,
           "warmup": args.warmup, "steps": args.steps}
    path = train_bench.write_job(workdir, job)
    results = {}
    for r in range(args.rounds):
        for value in ("1", "0"):
            env = dict(os.environ, DTORCH_SPECULATE=value)
            load = os.getloadavg()[0]
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--job", path],
                                  env=env, capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr[-3000:])
            out = json.loads(proc.stdout.strip().splitlines()[-1])
            out["load"] = load
            results.setdefault(f"DTORCH_SPECULATE={value}", []).append(out)
            print(f"round {r + 1} DTORCH_SPECULATE={value}: {out}", flush=True)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
