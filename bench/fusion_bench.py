"""Fusion with generated kernels (issue 10 item 1), side by side in one run:

  (a) a cached N-op elementwise chain on 4 ranks, microseconds per op to its
      fetched result: DTorch fused, DTorch unfused (DTORCH_FUSION=0), JAX jit
      and JAX eager on arrays sharded over 4 host devices;
  (b) y = gelu(x*w+b)*s on 16M float32 on 1 rank, cached: effective
      bandwidth (x read + y written, over the time until the workers are
      done; best repetition per process, as STREAM reports), fused and
      unfused, next to a STREAM triad (bench/stream_triad.c, one thread)
      measured in the same run.

    python3 bench/fusion_bench.py [--out bench/results/fusion] [--ops 2000] [--n 16777216]

Writes table.md, results.json and fusion.png into --out. Every DTorch
measurement runs in a fresh interpreter (bench/fusion_children.py); the JAX
peers in build/torch-venv (bench/setup_torch.sh; --peer-python), a missing
one reads "not installed". Each measurement is repeated --runs times and
the median reported (the machine is shared and noisy). Not run by the tests
(test_fusion_bench.py runs it with tiny sizes).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench_support import (DEFAULT_PEER_PYTHON, add_peer_python_argument, git_rev,
                           load_averages, run_json, utc_date, write_table_and_json)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MAIN_PEER_PYTHON = "/work/main/build/torch-venv/bin/python"


def median_of(rows, key):
    values = [r[key] for r in rows if key in r]
    if not values:
        errors = [r.get("error") for r in rows if "error" in r]
        return {"error": errors[0] if errors else "no result"}
    out = dict(rows[[r.get(key) for r in rows].index(values[0])])
    out[key] = statistics.median(values)
    out["runs"] = values
    return out


def dtorch_once(kind, spec, fusion, timeout, extra_env=None):
    env = dict(os.environ)
    env["DTORCH_CACHE_DIR"] = ""
    env["DTORCH_FUSION"] = "1" if fusion else "0"
    env.update(extra_env or {})
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                          if p])
    print(f"  dtorch {kind} fusion={'on' if fusion else 'off'} {json.dumps(spec)} "
          f"{json.dumps(extra_env or {})}", flush=True)
    return run_json([sys.executable, os.path.join(HERE, "fusion_children.py"), kind,
                     json.dumps(spec)], timeout, env)


def dtorch_child(kind, spec, fusion, timeout, runs, key):
    return median_of([dtorch_once(kind, spec, fusion, timeout) for _ in range(runs)], key)


def peer(python, kind, spec, timeout, runs, key):
    if not python or not os.path.exists(python) or subprocess.run(
            [python, "-c", "import jax"], capture_output=True).returncode != 0:
        return {"error": "not installed"}
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    rows = []
    for _ in range(runs):
        print(f"  peer {kind}", flush=True)
        rows.append(run_json([python, os.path.join(HERE, "fusion_peers.py"), kind,
                              json.dumps(spec)], timeout, env))
    return median_of(rows, key)


def build_triad(folder):
    """Compiles bench/stream_triad.c into `folder`: (path, compiler) or (None, error)."""
    cc = next((c for c in ("clang-22", "cc", "gcc") if subprocess.run(
        ["sh", "-c", f"command -v {c}"], capture_output=True).returncode == 0), None)
    if not cc:
        return None, "no C compiler"
    exe = os.path.join(folder, "stream_triad")
    built = subprocess.run([cc, "-O3", "-march=native", "-pthread", "-o", exe,
                            os.path.join(HERE, "stream_triad.c")], capture_output=True, text=True)
    if built.returncode != 0:
        return None, "build failed: " + built.stderr[-200:]
    return exe, cc + " -O3 -march=native -pthread"


# (b)'s measurements, in the order each run makes them.
GELU_SYSTEMS = (
    ("stream_triad", None),
    # The triad on every CPU, as the fused kernel may use them.
    ("stream_triad_all_threads", None),
    ("dtorch_fused", {}),
    # The fused kernel on one thread, as before the row split (the A/B).
    ("dtorch_fused_1_thread", {"DTORCH_KERNEL_THREADS": "1"}),
    ("dtorch_unfused", None),
)


def gelu_runs(n, reps, runs, timeout):
    """The triad and DTorch's variants interleaved: each run starts one
    process of each, one after another, so that all see the same load."""
    rows = {name: [] for name, _ in GELU_SYSTEMS}
    spec = {"n": n, "reps": reps}
    with tempfile.TemporaryDirectory() as d:
        exe, compiler = build_triad(d)
        for _ in range(runs):
            for name, env in GELU_SYSTEMS:
                if name.startswith("stream_triad"):
                    threads = os.cpu_count() if name.endswith("all_threads") else 1
                    print(f"  stream triad, {threads} thread(s)", flush=True)
                    rows[name].append(run_json([exe, str(n), str(max(reps, 5)), str(threads)],
                                               timeout) if exe else {"error": compiler})
                else:
                    rows[name].append(dtorch_once("gelu", spec, name != "dtorch_unfused",
                                                  timeout, env))
    res = {name: median_of(r, "gb_per_s") for name, r in rows.items()}
    if exe:
        res["stream_triad"]["compiler"] = compiler
        res["stream_triad_all_threads"]["compiler"] = compiler
    # Per run, the fused bandwidth over the triad's of the same run.
    res["fused_over_triad_per_run"] = [
        ratio(f.get("gb_per_s"), t.get("gb_per_s"))
        for f, t in zip(rows["dtorch_fused"], rows["stream_triad"])]
    return res


def ratio(a, b):
    return a / b if a and b else None


def fmt(v, digits=2):
    return "n/a" if v is None else f"{v:.{digits}f}"


def table(res):
    a, b = res["chain"], res["gelu"]
    fused, plain = a["dtorch_fused"], a["dtorch_unfused"]
    jit, eager = a["jax_jit"], a["jax_eager"]
    lines = [f"# Fusion with generated kernels ({res['date']}, {res['git']})", "",
             f"## (a) cached {res['ops']}-op elementwise chain on 4 ranks, to its result", "",
             "| system | us per op | fused / system |", "|---|---|---|"]
    f = fused.get("cached_us_per_op")

    def row(name, r, key):
        v = r.get(key)
        note = r.get("error", "")
        lines.append(f"| {name} | {fmt(v)} {note} | {fmt(ratio(f, v))} |")

    row("DTorch fused", fused, "cached_us_per_op")
    row("DTorch unfused (DTORCH_FUSION=0)", plain, "cached_us_per_op")
    row("JAX jit (4 host devices)", jit, "cached_us_per_op")
    row("JAX eager, sharded arrays", eager, "us_per_op")
    if res.get("only") == "gelu":
        lines[-6:] = ["Not run (--only gelu)."]
    lines += [""]
    if res.get("only") != "gelu":
        lines += [f"DTorch fused: client recording {fmt(fused.get('cached_record_us_per_op'))} "
                  f"us/op of the total; {fused.get('fused_instructions', 'n/a')} fused "
                  f"instruction(s) in the program; cache miss (compile incl. kernel generation) "
                  f"{fmt(fused.get('miss_us_per_op'))} us/op (unfused "
                  f"{fmt(plain.get('miss_us_per_op'))}). Goal: <= 2 us/op cached: "
                  f"{'met' if f is not None and f <= 2 else 'not met'}.", ""]
    lines += [f"## (b) y = gelu(x*w+b)*s on {res['n']:,} float32, 1 rank, cached", "",
              "| what | GB/s | / STREAM triad |", "|---|---|---|"]
    tri = b["stream_triad"].get("gb_per_s")
    triad_all = b.get("stream_triad_all_threads", {"error": "not run"})
    for name, r in (("STREAM triad (1 thread, C)", b["stream_triad"]),
                    (f"STREAM triad ({triad_all.get('threads', '?')} threads, C)", triad_all),
                    ("DTorch fused", b["dtorch_fused"]),
                    ("DTorch fused, 1 kernel thread (DTORCH_KERNEL_THREADS=1)",
                     b.get("dtorch_fused_1_thread", {"error": "not run"})),
                    ("DTorch unfused (DTORCH_FUSION=0)", b["dtorch_unfused"])):
        v = r.get("gb_per_s")
        lines.append(f"| {name} | {fmt(v)} {r.get('error', '')} | {fmt(ratio(v, tri))} |")
    fb = ratio(b["dtorch_fused"].get("gb_per_s"), tri)
    lines += ["", f"Effective bandwidth counts x read and y written (8 bytes per element); "
              f"each process reports its best repetition (as STREAM does), the table the "
              f"median over processes. "
              f"Goal: fused >= 0.70 of the triad: {'met' if fb and fb >= 0.7 else 'not met'}. "
              f"Medians of {res['runs']} runs each; the runs interleave the four processes. "
              f"Fused / triad per run: "
              f"{', '.join(fmt(v) for v in b.get('fused_over_triad_per_run', []))}. "
              f"Fused / triad on every CPU: "
              f"{fmt(ratio(b['dtorch_fused'].get('gb_per_s'), triad_all.get('gb_per_s')))}. "
              f"The fused kernel splits its rows among the rank's threads "
              f"({res.get('cpus', '?')} CPUs here); load average at the start "
              f"{res.get('load', '?')}, at the end {res.get('load_end', '?')}.", ""]
    return "\n".join(lines)


def plot(res, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    a, b = res["chain"], res["gelu"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    names = ["DTorch\nfused", "DTorch\nunfused", "JAX jit", "JAX eager"]
    vals = [a["dtorch_fused"].get("cached_us_per_op"), a["dtorch_unfused"].get("cached_us_per_op"),
            a["jax_jit"].get("cached_us_per_op"), a["jax_eager"].get("us_per_op")]
    left.bar(names, [v or 0 for v in vals], color=["C0", "C7", "C2", "C3"])
    left.set_yscale("log")
    left.set_ylabel("us per op (log)")
    left.set_title(f"cached {res['ops']}-op chain, 4 ranks")
    names = ["triad\n1 thread", "triad\nall CPUs", "DTorch\nfused", "fused\n1 thread",
             "DTorch\nunfused"]
    vals = [b[k].get("gb_per_s") if k in b else None
            for k in ("stream_triad", "stream_triad_all_threads", "dtorch_fused",
                      "dtorch_fused_1_thread", "dtorch_unfused")]
    right.bar(names, [v or 0 for v in vals], color=["C1", "C1", "C0", "C9", "C7"])
    right.set_ylabel("GB/s")
    right.set_title("gelu(x*w+b)*s, 16M float32, 1 rank")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "fusion"))
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--n", type=int, default=16 << 20, help="elements of (b)")
    ap.add_argument("--reps", type=int, default=10, help="timed repetitions per process")
    ap.add_argument("--runs", type=int, default=3, help="processes per measurement (median)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--only", choices=["gelu"], default=None,
                    help="measure (b) only (the gelu chain against the triad)")
    default_peer = DEFAULT_PEER_PYTHON if os.path.exists(DEFAULT_PEER_PYTHON) else MAIN_PEER_PYTHON
    add_peer_python_argument(ap, default_peer)
    args = ap.parse_args()
    chain = {"world": 4, "ops": args.ops, "reps": args.reps}
    t = time.perf_counter()
    skipped = {"error": "not run (--only gelu)"}
    res = {"date": utc_date(),
           "git": git_rev(), "ops": args.ops, "n": args.n, "runs": args.runs,
           "cpus": os.cpu_count(), "load": load_averages(),
           "only": args.only,
           "chain": {name: skipped for name in
                     ("dtorch_fused", "dtorch_unfused", "jax_jit", "jax_eager")}
           if args.only == "gelu" else {
               "dtorch_fused": dtorch_child("chain", chain, True, args.timeout, args.runs,
                                            "cached_us_per_op"),
               "dtorch_unfused": dtorch_child("chain", chain, False, args.timeout, args.runs,
                                              "cached_us_per_op"),
               "jax_jit": peer(args.peer_python, "jax_jit", chain, args.timeout, args.runs,
                               "cached_us_per_op"),
               "jax_eager": peer(args.peer_python, "jax_eager", chain, args.timeout, args.runs,
                                 "us_per_op"),
           },
           "gelu": gelu_runs(args.n, args.reps, args.runs, args.timeout)}
    res["load_end"] = load_averages()
    res["seconds"] = time.perf_counter() - t
    text = table(res)
    write_table_and_json(args.out, text, res)
    plotted = plot(res, os.path.join(args.out, "fusion.png"))
    print(text)
    print(f"wrote {args.out}/table.md, results.json" + (", fusion.png" if plotted else ""))


if __name__ == "__main__":
    main()
