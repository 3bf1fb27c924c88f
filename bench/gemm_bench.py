"""GEMM at BLAS speed (issue 10, item 5), side by side in one run:

  (1) a 1024^3 float32 matmul on 1 rank through dtorch (a cached segment,
      timed to its synchronized result and, separately, to its fetched
      value), with 1 BLAS thread, next to torch with 1 thread and numpy;
  (2) 2 ranks of one host (2 worker processes, one rank each, threads from
      the rank's core share: no DTORCH_BLAS_THREADS): a batch-sharded bmm
      [2,1024,1024] x [2,1024,1024], Shard(0) x Shard(0), so each rank runs
      one 1024^3 GEMM, next to torch with 2 threads on the same bmm; and
      1 rank alone on the host, whose share is every core, on one matmul;
  (3) the BLAS options of the runtime (DTORCH_BLAS=onednn | openblas | blis,
      and OpenBLAS forced to the Prescott kernels some VMs' generic CPU
      model gets) through the same 1-rank dtorch matmul.

    python3 bench/gemm_bench.py [--out bench/results/gemm] [--n 1024] [--rounds 3]

Every measurement runs in a fresh process, the rounds interleaved (the host
is shared: each number is the median over rounds of per-round medians).
Writes table.md, results.json and gemm.png into --out. torch runs in
build/torch-venv (bench/setup_torch.sh; --peer-python); a missing peer reads
"not installed". Not run by the tests (test_gemm_bench.py runs a tiny size).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from bench_support import run_json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_PEER_PYTHON = os.path.join(ROOT, "build", "torch-venv", "bin", "python")

# (label, environment) of the runtime's BLAS options.
BLAS_OPTIONS = [
    ("default (oneDNN sgemm)", {}),
    ("OpenBLAS, core type from CPUID", {"DTORCH_BLAS": "openblas"}),
    ("BLIS", {"DTORCH_BLAS": "blis"}),
    ("OpenBLAS forced to Prescott", {"DTORCH_BLAS": "openblas",
                                     "OPENBLAS_CORETYPE": "Prescott"}),
]


def gflops(flops, seconds):
    return flops / seconds / 1e9 if seconds else None


def timed(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


# ---- children: one measurement each, JSON on the last stdout line ---------

def child_dtorch(spec):
    import numpy as np
    import dtorch
    from dtorch import Shard, Replicate
    n, world = spec["n"], spec["world"]
    dtorch.init(world_size=world, num_processes=world, cache_dir="")
    mesh = dtorch.init_device_mesh("cpu", (world,))
    scale = 1.0 / np.sqrt(n)  # keeps repeated products in range
    if spec["op"] == "matmul":
        x = dtorch.randn(n, n, device_mesh=mesh, placements=[Replicate()])
        w = dtorch.randn(n, n, device_mesh=mesh, placements=[Replicate()]) * scale
        flops = 2.0 * n ** 3

        def step():
            return x @ w
    else:
        x = dtorch.randn(world, n, n, device_mesh=mesh, placements=[Shard(0)])
        w = dtorch.randn(world, n, n, device_mesh=mesh, placements=[Shard(0)]) * scale
        flops = 2.0 * world * n ** 3

        def step():
            return dtorch.bmm(x, w)
    dtorch.synchronize()
    held = []

    def to_sync():
        held.append(step())
        dtorch.synchronize()
        held.clear()

    def to_fetch():
        step().numpy()

    reps = spec["reps"]
    t_sync = timed(to_sync, reps)
    t_fetch = timed(to_fetch, max(3, reps // 2))
    # Numerics: the dtorch product against numpy's on the fetched operands.
    got = step().numpy().astype(np.float64)
    want = x.numpy().astype(np.float64) @ w.numpy().astype(np.float64)
    err = float(np.max(np.abs(got - want)) / max(1e-30, np.max(np.abs(want))))
    dtorch.shutdown()
    return {"sync_s": t_sync, "fetch_s": t_fetch, "gflops": gflops(flops, t_sync),
            "gflops_fetch": gflops(flops, t_fetch), "max_rel_err": err}


def child_peer(spec):
    import numpy as np
    n, threads, batch = spec["n"], spec["threads"], spec["batch"]
    out = {}
    try:
        import torch
        torch.set_num_threads(threads)
        a = torch.randn(batch, n, n) if batch > 1 else torch.randn(n, n)
        b = torch.randn(batch, n, n) if batch > 1 else torch.randn(n, n)
        t = timed(lambda: torch.matmul(a, b), spec["reps"])
        out["torch_s"] = t
        out["torch_gflops"] = gflops(2.0 * batch * n ** 3, t)
        out["torch"] = torch.__version__
    except ImportError:
        out["torch_error"] = "not installed"
    if spec.get("numpy"):
        a = np.random.rand(n, n).astype(np.float32)
        b = np.random.rand(n, n).astype(np.float32)
        t = timed(lambda: a @ b, spec["reps"])
        out["numpy_s"] = t
        out["numpy_gflops"] = gflops(2.0 * n ** 3, t)
        out["numpy"] = np.__version__
    return out


# ---- the parent ------------------------------------------------------------

def run_json_with_blas(cmd, timeout, env):
    """run_json, with the BLAS lines its worker processes print
    (DTORCH_BLAS_VERBOSE=1) in "blas"."""
    errors = []
    out = run_json(cmd, timeout, env, errors)
    blas = sorted(line.split(": ", 1)[1] for line in errors
                  if line.startswith("dtorch-worker (ranks") and ": " in line)
    if blas and "error" not in out:
        out["blas"] = blas
    return out


def dtorch_run(spec, extra_env, timeout):
    env = dict(os.environ)
    for name in ("DTORCH_BLAS", "OPENBLAS_CORETYPE", "DTORCH_BLAS_THREADS"):
        env.pop(name, None)
    env.update(extra_env)
    env["DTORCH_BLAS_VERBOSE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return run_json_with_blas([sys.executable, __file__, "--child", "dtorch", json.dumps(spec)], timeout, env)


def peer_run(python, spec, timeout):
    if not os.path.exists(python):
        return {"torch_error": "not installed", "numpy_error": "not installed"}
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(spec["threads"])
    env["MKL_NUM_THREADS"] = str(spec["threads"])
    return run_json_with_blas([python, __file__, "--child", "peer", json.dumps(spec)], timeout, env)


def median_of(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    return a / b if a and b else None


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def errors_of(rows):
    return sorted({r["error"] for r in rows if "error" in r})


def summarize(raw):
    s = {}
    for key, rows in raw.items():
        s[key] = {k: median_of(rows, k) for k in
                  ("gflops", "gflops_fetch", "sync_s", "fetch_s", "max_rel_err",
                   "torch_gflops", "numpy_gflops")}
        s[key]["errors"] = errors_of(rows)
        blas = [r.get("blas") for r in rows if r.get("blas")]
        s[key]["blas"] = blas[0] if blas else None
    return s


def goals(s):
    one = ratio(s["dtorch_1rank"]["gflops"], s["torch_1thread"]["torch_gflops"])
    two = ratio(s["dtorch_2ranks"]["gflops"], s["torch_2threads"]["torch_gflops"])
    return [
        ("1 rank >= 0.95x torch 1 thread, 1024^3 float32", one, one is not None and one >= 0.95),
        ("2 ranks >= 0.9x torch 2 threads, same total work", two, two is not None and two >= 0.9),
    ]


def table(results):
    s = results["summary"]
    cfg = results["config"]
    out = [f"# GEMM benchmark ({results['date']}, {results['git']})", "",
           f"Host: {results['host']}. {cfg['n']}^3 float32; each number is the median over "
           f"{cfg['rounds']} interleaved rounds of per-round medians ({cfg['reps']} repetitions); "
           "every measurement in a fresh process.", "", "## Goals", "",
           "| goal | ratio | met |", "|---|---|---|"]
    for name, value, ok in goals(s):
        out.append(f"| {name} | {fmt(value, 2)} | {'yes' if ok else 'no'} |")
    out += ["", "## Side by side", "",
            "| what | GFLOP/s (to result) | GFLOP/s (with fetch) | vs torch 1 thread | BLAS |",
            "|---|---|---|---|---|"]
    t1 = s["torch_1thread"]["torch_gflops"]
    t2 = s["torch_2threads"]["torch_gflops"]

    def row(name, g, gf, ref, blas=""):
        out.append(f"| {name} | {fmt(g)} | {fmt(gf)} | {fmt(ratio(g, ref), 2)} | {blas} |")

    row("dtorch, 1 rank, 1 BLAS thread", s["dtorch_1rank"]["gflops"],
        s["dtorch_1rank"]["gflops_fetch"], t1, (s["dtorch_1rank"]["blas"] or [""])[0])
    row("torch, 1 thread", t1, None, t1, "torch's own (MKL)")
    row("numpy (its own threads)", s["torch_1thread"]["numpy_gflops"], None, t1,
        "numpy's bundled OpenBLAS")
    out += ["", "| 2 ranks of one host, bmm [2,n,n] x [2,n,n] | GFLOP/s (both ranks) | "
            "GFLOP/s (with fetch) | vs torch 2 threads | BLAS per rank |", "|---|---|---|---|---|"]
    d2 = s["dtorch_2ranks"]
    out.append(f"| dtorch, 2 worker processes, 1 rank each | {fmt(d2['gflops'])} | "
               f"{fmt(d2['gflops_fetch'])} | {fmt(ratio(d2['gflops'], t2), 2)} | "
               f"{'; '.join(d2['blas'] or [])} |")
    out.append(f"| torch, 2 threads, same bmm | {fmt(t2)} | - | 1.00 | torch's own (MKL) |")
    d1 = s.get("dtorch_1rank_share")
    if d1:
        out.append(f"| dtorch, 1 rank alone, threads = its core share (one {cfg['n']}^3 matmul) | "
                   f"{fmt(d1['gflops'])} | {fmt(d1['gflops_fetch'])} | "
                   f"{fmt(ratio(d1['gflops'], t2), 2)} | {'; '.join(d1['blas'] or [])} |")
    out += ["", "## The runtime's BLAS options (dtorch, 1 rank, 1 thread)", "",
            "| DTORCH_BLAS option | GFLOP/s | vs torch 1 thread | max rel. error | BLAS |",
            "|---|---|---|---|---|"]
    for label, _ in BLAS_OPTIONS:
        o = s["option:" + label]
        out.append(f"| {label} | {fmt(o['gflops'])} | {fmt(ratio(o['gflops'], t1), 2)} | "
                   f"{fmt(o['max_rel_err'] or 0, 8)} | {(o['blas'] or [''])[0]} |")
    errs = [(k, v["errors"]) for k, v in s.items() if v["errors"]]
    if errs:
        out += ["", "Errors:", ""] + [f"- {k}: {'; '.join(e)}" for k, e in errs]
    return "\n".join(out) + "\n"


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    s = results["summary"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    ax = axes[0]
    names = ["dtorch\n1 rank", "torch\n1 thread", "numpy"]
    vals = [s["dtorch_1rank"]["gflops"], s["torch_1thread"]["torch_gflops"],
            s["torch_1thread"]["numpy_gflops"]]
    ax.bar(names, [v or 0 for v in vals], color=["C0", "C1", "C2"])
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"{results['config']['n']}^3 float32, 1 rank / 1 thread")
    ax = axes[1]
    vals = [s["dtorch_2ranks"]["gflops"], s["torch_2threads"]["torch_gflops"]]
    ax.bar(["dtorch\n2 ranks", "torch\n2 threads"], [v or 0 for v in vals], color=["C0", "C1"])
    ax.set_title("same total work: bmm [2,n,n]")
    ax = axes[2]
    labels = [label for label, _ in BLAS_OPTIONS]
    vals = [s["option:" + label]["gflops"] or 0 for label in labels]
    ax.barh([label.replace(", ", ",\n") for label in labels], vals, color="C0")
    ax.axvline(s["torch_1thread"]["torch_gflops"] or 0, color="C1", ls="--", label="torch 1 thread")
    ax.set_xlabel("GFLOP/s")
    ax.set_title("runtime BLAS options (1 rank)")
    ax.legend(loc="lower right")
    fig.suptitle(f"GEMM, {results['date']}, {results['git']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def git_rev():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        return "?"


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        spec = json.loads(sys.argv[3])
        fn = {"dtorch": child_dtorch, "peer": child_peer}[sys.argv[2]]
        print(json.dumps(fn(spec)))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "gemm"))
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--peer-python", default=os.environ.get("DTORCH_PEER_PYTHON",
                                                            DEFAULT_PEER_PYTHON))
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    n, reps = args.n, args.reps
    base = {"n": n, "reps": reps}
    runs = {
        "dtorch_1rank": lambda: dtorch_run(dict(base, world=1, op="matmul"),
                                           {"DTORCH_BLAS_THREADS": "1"}, args.timeout),
        "torch_1thread": lambda: peer_run(args.peer_python,
                                          dict(base, threads=1, batch=1, numpy=True), args.timeout),
        "dtorch_2ranks": lambda: dtorch_run(dict(base, world=2, op="bmm"), {}, args.timeout),
        # 1 rank alone on the host: its share is every core of the affinity.
        "dtorch_1rank_share": lambda: dtorch_run(dict(base, world=1, op="matmul"), {},
                                                 args.timeout),
        "torch_2threads": lambda: peer_run(args.peer_python,
                                           dict(base, threads=2, batch=2), args.timeout),
    }
    for label, env in BLAS_OPTIONS:
        runs["option:" + label] = (lambda env=env: dtorch_run(
            dict(base, world=1, op="matmul"), dict(env, DTORCH_BLAS_THREADS="1"), args.timeout))
    t0 = time.perf_counter()
    raw = {k: [] for k in runs}
    for r in range(args.rounds):
        for key, fn in runs.items():
            raw[key].append(fn())
            print(f"round {r + 1}/{args.rounds} {key}: "
                  f"{json.dumps({k: v for k, v in raw[key][-1].items() if k != 'blas'})}",
                  file=sys.stderr)
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "git": git_rev(),
        "host": f"{platform.node()}, {os.cpu_count()} CPUs, "
                f"affinity {len(os.sched_getaffinity(0))}, load {os.getloadavg()[0]:.2f}",
        "config": {"n": n, "rounds": args.rounds, "reps": reps,
                   "peer_python": args.peer_python},
        "raw": raw,
        "summary": summarize(raw),
        "total_s": time.perf_counter() - t0,
    }
    results["goals"] = [{"goal": g, "ratio": v, "met": ok} for g, v, ok in goals(results["summary"])]
    os.makedirs(args.out, exist_ok=True)
    text = table(results)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    plot(results, os.path.join(args.out, "gemm.png"))
    print(text)


if __name__ == "__main__":
    main()
