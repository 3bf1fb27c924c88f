"""A switch of the hand-off between the client, the controller and the
ranks, off (0) against on (1): DTORCH_PIN_RANKS (default off),
DTORCH_INLINE_SYNC, DTORCH_INLINE_CONTROLLER, DTORCH_DIRECT_SEND or
DTORCH_LOCAL_LINK (default on). The two settings are taken in turn every round (the order swapped each
round), so a host whose speed drifts slows both alike. Three measures, the
processes left on any CPU:

- GEMM: 1024^3 float32 on 1 rank (1 BLAS thread) against torch's
  single-thread GEMM, as gemm_bench's paired turns measure it (the median of
  the per-pair ratios, > 1: dtorch faster);
- hand-off: from the controller sending a cached GEMM's run to its rank
  starting it, and from the rank ending it to the client's synchronize
  returning (medians over --calls products, read from a profiler trace);
- tiny op: one `x + 1` on 8x8 then synchronize, on 1 rank and on 2 ranks
  (2 worker processes), back to back or --tiny-gap-ms apart (idle time
  lets the CPUs go idle, so each hand-off wakes one): the median round
  trip.

    python3 bench/handoff_switch_ab.py [--switch DTORCH_PIN_RANKS]
        [--rounds 4] [--pairs 60] [--tiny-gap-ms 0]
        [--out bench/results/<switch without DTORCH_, lower case>]

Writes table.md and results.json into --out.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gemm_bench  # noqa: E402
from bench_support import (add_peer_python_argument, git_rev,  # noqa: E402
                           load_averages, parse_args_or_run_job, run_job_file,
                           utc_date, write_table_and_json)
from gemm_bench import fmt  # noqa: E402

SETTINGS = ("0", "1")
SWITCHES = ("DTORCH_PIN_RANKS", "DTORCH_INLINE_SYNC", "DTORCH_INLINE_CONTROLLER",
            "DTORCH_DIRECT_SEND", "DTORCH_LOCAL_LINK")


def hand_off_gaps(events):
    """Per product, microseconds from the controller's "run send" to the
    rank's "run segment..." start, and from that span's end to the end of
    the client's "synchronize": the two lists."""
    spans = [e for e in events if e.get("ph") == "X"]
    sends = sorted(e["ts"] for e in spans if e["name"] == "run send")
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans
                  if e["name"].startswith("run segment"))
    syncs = sorted(e["ts"] + e["dur"] for e in spans if e["name"] == "synchronize")
    into, out_of = [], []
    for send in sends:
        run = next((r for r in runs if r[0] >= send), None)
        if run is None:
            continue
        done = next((s for s in syncs if s >= run[1]), None)
        if done is not None:
            into.append(run[0] - send)
            out_of.append(done - run[1])
    return into, out_of


def job_main(job):
    """The child side: starts dtorch with job["env"] set (its workers read it
    when they start) and measures job["kind"]."""
    os.environ.update(job["env"])
    import numpy as np
    import dtorch
    from dtorch import Replicate
    world = job["world"]
    dtorch.init(world_size=world, num_processes=world, cache_dir="")
    mesh = dtorch.init_device_mesh("cpu", (world,))
    try:
        if job["kind"] == "tiny":
            x = dtorch.randn(8, 8, device_mesh=mesh, placements=[Replicate()])
            times = []
            inlined = dtorch._C.controller_stats()["inline_requests"]
            for i in range(job["warmup"] + job["calls"]):
                if job["gap_s"]:
                    time.sleep(job["gap_s"])
                t = time.perf_counter()
                y = x + 1.0
                dtorch.synchronize()
                if i >= job["warmup"]:
                    times.append(time.perf_counter() - t)
            del y
            inlined = dtorch._C.controller_stats()["inline_requests"] - inlined
            return {"round_trip_us": statistics.median(times) * 1e6,
                    "inline_per_op": inlined / (job["warmup"] + job["calls"])}
        n = job["n"]
        x = dtorch.randn(n, n, device_mesh=mesh, placements=[Replicate()])
        w = dtorch.randn(n, n, device_mesh=mesh, placements=[Replicate()]) * (1.0 / np.sqrt(n))
        for _ in range(job["warmup"]):
            y = x @ w
            dtorch.synchronize()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            with dtorch.profiler.profile(path):
                for _ in range(job["calls"]):
                    y = x @ w
                    dtorch.synchronize()
            with open(path) as f:
                trace = json.load(f)
        del y
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        into, out_of = hand_off_gaps(events)
        if not into:
            return {"error": "no run found in the trace"}
        return {"in_us": statistics.median(into), "out_us": statistics.median(out_of)}
    finally:
        dtorch.shutdown()


def measure(setting, args):
    """Every measure with args.switch=setting."""
    env = {args.switch: setting, "DTORCH_BLAS_THREADS": "1"}
    row = {}
    base = {"n": args.n, "reps": 3}
    gemm = gemm_bench.paired(dict(base, world=1, op="matmul"), env, args.peer_python,
                             dict(base, threads=1, batch=1), args.pairs, 3, 0.03, args.timeout)
    row["gemm_ratio"] = gemm.get("ratio")
    row["gemm_error"] = gemm.get("error")
    row["gemm_gflops"] = gemm.get("gflops")
    row["torch_gflops"] = gemm.get("torch_gflops")
    row["blas"] = gemm.get("blas")
    me = os.path.abspath(__file__)
    common = {"env": env, "warmup": 5}
    try:
        row.update(run_job_file(me, dict(common, kind="gemm", world=1, n=args.n,
                                         calls=args.calls), args.timeout))
        for world in (1, 2):
            out = run_job_file(me, dict(common, kind="tiny", world=world,
                                        calls=args.tiny_calls, gap_s=args.tiny_gap_ms / 1e3),
                               args.timeout)
            row[f"tiny_{world}rank_us"] = out.get("round_trip_us")
            row[f"tiny_{world}rank_inline_per_op"] = out.get("inline_per_op")
    except RuntimeError as e:
        row["error"] = str(e)[-500:]
    return row


def median_of(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def table(results):
    measures = [("GEMM 1 rank, paired ratio to torch (> 1: faster)", "gemm_ratio", 3),
                ("hand-off into the rank (us)", "in_us", 0),
                ("hand-off back to the client (us)", "out_us", 0),
                ("tiny op round trip, 1 rank (us)", "tiny_1rank_us", 0),
                ("tiny op round trip, 2 ranks (us)", "tiny_2rank_us", 0)]
    rounds = results["rounds"]
    cfg = results["config"]
    gap = cfg.get("tiny_gap_ms") or 0
    lines = [f"# {cfg['switch']} A/B, {results['date']}, {results['git']}", "",
             f"{results['host']}; {len(rounds)} rounds, {cfg['pairs']} "
             f"GEMM pairs per setting and round; tiny ops "
             f"{f'{gap:g} ms apart' if gap else 'back to back'}. Medians over the rounds; "
             f"each round's value in brackets.", "",
             "| measure | 0 | 1 | 1 / 0 |", "|---|---|---|---|"]
    for label, key, digits in measures:
        per = {s: [r[s].get(key) for r in rounds] for s in SETTINGS}
        med = {s: median_of([r[s] for r in rounds], key) for s in SETTINGS}
        ratio = med["1"] / med["0"] if med["0"] and med["1"] is not None else None
        cells = [f"{fmt(med[s], digits)} ({', '.join(fmt(v, digits) for v in per[s])})"
                 for s in SETTINGS]
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {fmt(ratio, 2)} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--switch", choices=SWITCHES, default="DTORCH_PIN_RANKS")
    ap.add_argument("--out", help="default: bench/results/<the switch without DTORCH_, "
                                  "lower case> (rank_pinning for DTORCH_PIN_RANKS)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=60, help="GEMM pairs per setting and round")
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=30, help="traced GEMMs per setting and round")
    ap.add_argument("--tiny-calls", type=int, default=400)
    ap.add_argument("--tiny-gap-ms", type=float, default=0.0,
                    help="idle time before each tiny op (0: back to back)")
    ap.add_argument("--timeout", type=float, default=300)
    add_peer_python_argument(ap)
    args = parse_args_or_run_job(ap, argv, job_main)
    if args is None:
        return
    if args.out is None:
        name = args.switch[len("DTORCH_"):].lower()
        args.out = os.path.join(HERE, "results",
                                "rank_pinning" if name == "pin_ranks" else name)
    t0 = time.perf_counter()
    rounds = []
    for r in range(args.rounds):
        order = SETTINGS if r % 2 == 0 else SETTINGS[::-1]
        rounds.append({s: measure(s, args) for s in order})
        print(f"round {r + 1}/{args.rounds}: {json.dumps(rounds[-1])}", file=sys.stderr)
    results = {
        "date": utc_date(), "git": git_rev(),
        "host": f"{os.cpu_count()} CPUs, affinity {len(os.sched_getaffinity(0))}, "
                f"load {load_averages()}",
        "config": {k: v for k, v in vars(args).items() if k not in ("job", "out")},
        "rounds": rounds, "total_s": time.perf_counter() - t0,
    }
    text = table(results)
    write_table_and_json(args.out, text, results)
    print(text)


if __name__ == "__main__":
    main()
