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
        [--pairs 60] [--turn-calls 3] [--gap-ms 30]

The goals (1 rank >= 0.95x torch with 1 thread, once with both sides on one
CPU and once with both on any CPU; 2 ranks >= 0.9x torch with 2 threads) are
measured call by call: dtorch and torch each run in a
long-lived process and take turns of --turn-calls products, --pairs times,
and each goal's ratio is the median of the pairs' ratios. On a shared VM the
host's speed drifts by 10-15% over seconds (an FMA loop measured 84-136
GFLOP/s on one core within a minute); pairs a fraction of a second apart see
the same host, so the drift does not pick a side. The other rows (numpy, a
rank alone with every core, the BLAS options) run every measurement in a
fresh process, the rounds interleaved; each number there is the median over
rounds of per-round medians.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

from bench_support import (LockStepChild, add_peer_python_argument, git_rev, run_json,
                           serve_lock_step, utc_date, write_table_and_json)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

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

def dtorch_gemm(spec):
    """Starts dtorch with spec["world"] ranks and makes the operands; returns
    (step, flops, x, w): step() records one product (a 1-rank matmul, or a
    batch-sharded bmm giving each rank one n^3 GEMM)."""
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
        return (lambda: x @ w), 2.0 * n ** 3, x, w
    x = dtorch.randn(world, n, n, device_mesh=mesh, placements=[Shard(0)])
    w = dtorch.randn(world, n, n, device_mesh=mesh, placements=[Shard(0)]) * scale
    return (lambda: dtorch.bmm(x, w)), 2.0 * world * n ** 3, x, w


def dtorch_error(step, x, w):
    """Largest error of a dtorch product relative to its largest element,
    against numpy's float64 product of the fetched operands."""
    import numpy as np
    got = step().numpy().astype(np.float64)
    want = x.numpy().astype(np.float64) @ w.numpy().astype(np.float64)
    return float(np.max(np.abs(got - want)) / max(1e-30, np.max(np.abs(want))))


def synchronized(step):
    """One product timed to its synchronized result (the result is held
    until then, so that the run is not dropped)."""
    import dtorch
    held = []

    def run():
        held.append(step())
        dtorch.synchronize()
        held.clear()
    return run


def child_dtorch(spec):
    import dtorch
    step, flops, x, w = dtorch_gemm(spec)
    dtorch.synchronize()
    to_sync = synchronized(step)

    def to_fetch():
        step().numpy()

    reps = spec["reps"]
    t_sync = timed(to_sync, reps)
    t_fetch = timed(to_fetch, max(3, reps // 2))
    err = dtorch_error(step, x, w)
    dtorch.shutdown()
    return {"sync_s": t_sync, "fetch_s": t_fetch, "gflops": gflops(flops, t_sync),
            "gflops_fetch": gflops(flops, t_fetch), "max_rel_err": err}


def torch_gemm(spec):
    """torch with spec["threads"] threads and operands of spec["batch"]
    n x n matrices; returns (call, flops)."""
    import torch
    n, batch = spec["n"], spec["batch"]
    torch.set_num_threads(spec["threads"])
    a = torch.randn(batch, n, n) if batch > 1 else torch.randn(n, n)
    b = torch.randn(batch, n, n) if batch > 1 else torch.randn(n, n)
    return (lambda: torch.matmul(a, b)), 2.0 * batch * n ** 3


def child_peer(spec):
    import numpy as np
    n = spec["n"]
    out = {}
    try:
        call, flops = torch_gemm(spec)
        import torch
        t = timed(call, spec["reps"])
        out["torch_s"] = t
        out["torch_gflops"] = gflops(flops, t)
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


def last_cpu(stat_path):
    """The CPU a thread last ran on (field 39 of /proc/.../stat), or None."""
    try:
        with open(stat_path) as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return None


def rank_thread_stat():
    """The stat file of the "dtorch-rank" thread of this process's worker
    child (the rank of a 1-rank session), or None."""
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[1] != me:
                    continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    if f.read().strip() == "dtorch-rank":
                        return f"/proc/{pid}/task/{tid}/stat"
        except (OSError, IndexError):
            continue
    return None


def timed_turn(fn, command, stat_path=None):
    """One turn of a lock-step child: "run K" times K calls back to back
    (the operands stay in cache as in a loop of steps); returns their times
    and, given the stat file of the thread that computes, the CPU it ran
    the turn's last call on."""
    parts = command.split()
    calls = int(parts[1]) if len(parts) > 1 else 1
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    out = {"s": times}
    if stat_path:
        out["cpu"] = last_cpu(stat_path)
    return out


def serve_dtorch(spec):
    """Lock-step child (bench_support.serve_lock_step): each "run" times one
    product to its synchronized result; "end" checks the numerics."""
    def setup():
        import dtorch
        step, flops, x, w = dtorch_gemm(spec)
        dtorch.synchronize()
        run = synchronized(step)
        rank = rank_thread_stat() if spec["world"] == 1 else None

        def end():
            err = dtorch_error(step, x, w)
            dtorch.shutdown()
            return {"flops": flops, "max_rel_err": err}
        return (lambda command: timed_turn(run, command, rank)), end
    serve_lock_step(setup)


def serve_peer(spec):
    """Lock-step child: each "run" times one torch product."""
    def setup():
        import torch
        call, flops = torch_gemm(spec)
        me = "/proc/thread-self/stat" if spec["threads"] == 1 else None
        return (lambda command: timed_turn(call, command, me)), (lambda: {"flops": flops,
                                                                          "torch": torch.__version__})
    serve_lock_step(setup)


# ---- the parent ------------------------------------------------------------

def blas_lines(stderr_lines):
    """What each worker process says of its BLAS (DTORCH_BLAS_VERBOSE=1)."""
    return sorted(line.split(": ", 1)[1] for line in stderr_lines
                  if line.startswith("dtorch-worker (ranks") and ": " in line)


def run_json_with_blas(cmd, timeout, env):
    """run_json, with the BLAS lines its worker processes print
    (DTORCH_BLAS_VERBOSE=1) in "blas"."""
    errors = []
    out = run_json(cmd, timeout, env, errors)
    blas = blas_lines(errors)
    if blas and "error" not in out:
        out["blas"] = blas
    return out


def dtorch_run(spec, extra_env, timeout):
    return run_json_with_blas([sys.executable, __file__, "--child", "dtorch", json.dumps(spec)],
                              timeout, dtorch_env(extra_env))


def peer_run(python, spec, timeout):
    if not os.path.exists(python):
        return {"torch_error": "not installed", "numpy_error": "not installed"}
    return run_json_with_blas([python, __file__, "--child", "peer", json.dumps(spec)], timeout,
                              peer_env(spec["threads"]))


def dtorch_env(extra_env):
    env = dict(os.environ)
    for name in ("DTORCH_BLAS", "OPENBLAS_CORETYPE", "DTORCH_BLAS_THREADS"):
        env.pop(name, None)
    env.update(extra_env)
    env["DTORCH_BLAS_VERBOSE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def peer_env(threads):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    return env


def paired(dtorch_spec, dtorch_extra_env, python, peer_spec, pairs, calls, gap_s, timeout,
           cpus=None):
    """dtorch and torch, each in a long-lived child, called in turn: a turn
    of `calls` dtorch products back to back, then a turn of torch products
    (the order swapped every pair), with `gap_s` of idle host before each
    turn (the OpenMP threads of a 2-thread torch spin for a while after a
    product; they must not share the cores with dtorch's turn). A turn's time
    is its median call; a pair gives torch's time over dtorch's, i.e.
    dtorch's speed as a share of torch's, measured within a fraction of a
    second. Returns the per-pair ratios, their median and quartiles, the
    ratio of the median and of the least turn times, and each side's
    GFLOP/s at its median turn. `cpus` confines both children (and dtorch's
    workers, which inherit it) to those CPUs."""
    if not os.path.exists(python):
        return {"error": "torch not installed"}
    me = os.path.abspath(__file__)
    try:
        with LockStepChild([sys.executable, me, "--serve", "dtorch", json.dumps(dtorch_spec)],
                           dtorch_env(dtorch_extra_env), timeout, cpus) as d, \
                LockStepChild([python, me, "--serve", "peer", json.dumps(peer_spec)],
                              peer_env(peer_spec["threads"]), timeout, cpus) as t:
            d.call(f"run {calls}")  # warm-up
            t.call(f"run {calls}")
            td, tt, cd, ct = [], [], [], []
            for i in range(pairs):
                order = (((d, td, cd), (t, tt, ct)) if i % 2 == 0
                         else ((t, tt, ct), (d, td, cd)))
                for child, times, cpus_of in order:
                    time.sleep(gap_s)
                    answer = child.call(f"run {calls}")
                    times.append(statistics.median(answer["s"]))
                    cpus_of.append(answer.get("cpu"))
            d_end, t_end = d.close(), t.close()
            blas = blas_lines(d.stderr_lines())
    except RuntimeError as e:
        return {"error": str(e)}
    if not d_end or not t_end:
        return {"error": "a child gave no final answer"}
    ratios = [b / a for a, b in zip(td, tt)]
    quart = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    return {
        "pairs": pairs, "dtorch_s": td, "torch_s": tt, "pair_ratios": ratios,
        "ratio": statistics.median(ratios),
        "ratio_quartiles": [quart[0], quart[2]],
        "ratio_of_medians": statistics.median(tt) / statistics.median(td),
        "ratio_of_least": min(tt) / min(td),
        "gflops": gflops(d_end["flops"], statistics.median(td)),
        "torch_gflops": gflops(t_end["flops"], statistics.median(tt)),
        "max_rel_err": d_end["max_rel_err"], "blas": blas, "torch": t_end.get("torch"),
        "cpus": sorted(cpus) if cpus else None,
        "dtorch_cpu": cd, "torch_cpu": ct, "by_cpu": by_cpu(td, cd, tt, ct),
    }


def cpu_note(label, p):
    """One line on where a paired row's turns ran, or None when the CPUs
    were not recorded."""
    cd, ct = p.get("dtorch_cpu") or [], p.get("torch_cpu") or []
    if not any(c is not None for c in cd + ct):
        return None
    same = sum(1 for a, b in zip(cd, ct) if a is not None and a == b)
    per = "; ".join(f"CPU {cpu}: {fmt(v['ratio'], 2)} ({v['dtorch_turns']} dtorch turns, "
                    f"{v['torch_turns']} torch turns)"
                    for cpu, v in (p.get("by_cpu") or {}).items())
    return (f"{label}: both sides on the same CPU in {same} of {len(cd)} pairs; "
            f"{per or 'no CPU ran turns of both sides'}")


def by_cpu(td, cd, tt, ct):
    """Per CPU that both sides ran turns on: each side's median turn time
    there and their ratio (torch's over dtorch's), so that a run in which
    one CPU was slower than the other, and the two sides sat on different
    CPUs, shows as such. {} when the CPUs were not recorded."""
    out = {}
    for cpu in sorted({c for c in cd + ct if c is not None}):
        mine = [s for s, c in zip(td, cd) if c == cpu]
        theirs = [s for s, c in zip(tt, ct) if c == cpu]
        if mine and theirs:
            out[str(cpu)] = {"dtorch_turns": len(mine), "torch_turns": len(theirs),
                             "ratio": statistics.median(theirs) / statistics.median(mine)}
    return out


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


# The paired rows behind the goals, in the order of goals().
GOAL_ROWS = ("1rank", "1rank_any_cpu", "2ranks")


def goals(results):
    """The issue's GEMM goals, from the call-by-call pairs: 1 rank with both
    sides on one CPU and with both left on any CPU (each >= 0.95x), and 2
    ranks (>= 0.9x)."""
    p = results.get("paired", {})
    one, anywhere, two = (p.get(k, {}).get("ratio") for k in GOAL_ROWS)
    n = results.get("config", {}).get("n", 1024)
    return [
        (f"1 rank >= 0.95x torch 1 thread, {n}^3 float32, both on one CPU", one,
         one is not None and one >= 0.95),
        (f"1 rank >= 0.95x torch 1 thread, {n}^3 float32, each side on any CPU", anywhere,
         anywhere is not None and anywhere >= 0.95),
        ("2 ranks >= 0.9x torch 2 threads, same total work", two, two is not None and two >= 0.9),
    ]


def table(results):
    s = results["summary"]
    cfg = results["config"]
    out = [f"# GEMM benchmark ({results['date']}, {results['git']})", "",
           f"Host: {results['host']}. {cfg['n']}^3 float32.", "", "## Goals", "",
           f"Each goal's ratio is the median over {cfg['pairs']} pairs of turns: "
           f"{cfg['turn_calls']} dtorch products back to back (each to its synchronized result) "
           f"and {cfg['turn_calls']} torch products, each side in its own long-lived process, "
           f"taking turns ({cfg['gap_ms']:.0f} ms idle before each turn, the order swapped every "
           "pair). A pair's ratio is torch's median call over dtorch's, so both sides of a pair "
           "see the host at the same speed. The 1-rank goal is measured twice: with both "
           "processes (and dtorch's worker) on one CPU, the same for both sides, and with the "
           "same pairs left to the scheduler on any CPU (on a VM whose CPUs run at different "
           "speeds over minutes, the two sides can then sit on different CPUs for a whole run, "
           "and every hand-off between dtorch's threads can wake an idle CPU). The row below "
           "the goals, for reference, keeps dtorch's rank thread and worker on one CPU of "
           "their own by `DTORCH_PIN_RANKS=1` (torch's process still on any).", "",
           "| goal | ratio (median of pairs) | quartiles | ratio of median times | "
           "ratio of least times | dtorch GFLOP/s | torch GFLOP/s | met |",
           "|---|---|---|---|---|---|---|---|"]
    paired_rows = [results.get("paired", {}).get(k, {}) for k in GOAL_ROWS]
    for (name, value, ok), p in zip(goals(results), paired_rows):
        q = p.get("ratio_quartiles") or [None, None]
        out.append(f"| {name} | {fmt(value, 2)} | {fmt(q[0], 2)}-{fmt(q[1], 2)} | "
                   f"{fmt(p.get('ratio_of_medians'), 2)} | {fmt(p.get('ratio_of_least'), 2)} | "
                   f"{fmt(p.get('gflops'))} | {fmt(p.get('torch_gflops'))} | "
                   f"{'yes' if ok else 'no'}{' (' + p['error'] + ')' if 'error' in p else ''} |")
    for key, label in (("1rank_pinned_rank", "1 rank, any CPU, dtorch's rank pinned "
                                             "(`DTORCH_PIN_RANKS=1`)"),):
        anywhere = results.get("paired", {}).get(key)
        if not anywhere:
            continue
        q = anywhere.get("ratio_quartiles") or [None, None]
        out.append(f"| (reference) {label} | {fmt(anywhere.get('ratio'), 2)} "
                   f"| {fmt(q[0], 2)}-{fmt(q[1], 2)} | "
                   f"{fmt(anywhere.get('ratio_of_medians'), 2)} | "
                   f"{fmt(anywhere.get('ratio_of_least'), 2)} | {fmt(anywhere.get('gflops'))} | "
                   f"{fmt(anywhere.get('torch_gflops'))} | - |")
    notes = [cpu_note(label, results.get("paired", {}).get(key, {}))
             for key, label in (("1rank_any_cpu", "each side on any CPU"),
                                ("1rank_pinned_rank", "dtorch's rank pinned"))]
    notes = [n for n in notes if n]
    if notes:
        out += ["", "Where the 1-rank turns ran (the CPU of each turn's last call), and "
                "each side's median turn per CPU as a ratio (torch's over dtorch's):", ""]
        out += [f"- {n}" for n in notes]
    out += ["", "## Side by side, each measurement in a fresh process", "",
            f"Each number is the median over {cfg['rounds']} interleaved rounds of per-round "
            f"medians ({cfg['reps']} repetitions); rounds are seconds apart, so a host whose "
            "speed drifts shows here as spread between rows that the pairs above do not have.",
            "",
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
    p = results.get("paired", {})
    ax = axes[0]
    one, anywhere = p.get("1rank", {}), p.get("1rank_any_cpu", {})
    ax.bar(["dtorch\none CPU", "torch\none CPU", "dtorch\nany CPU", "torch\nany CPU"],
           [one.get("gflops") or 0, one.get("torch_gflops") or 0,
            anywhere.get("gflops") or 0, anywhere.get("torch_gflops") or 0],
           color=["C0", "C1", "C0", "C1"])
    ax.set_ylabel("GFLOP/s (median turn of the pairs)")
    ax.set_title(f"{results['config']['n']}^3 float32, 1 rank / 1 thread: "
                 f"{fmt(one.get('ratio'), 2)}x, any CPU {fmt(anywhere.get('ratio'), 2)}x")
    ax = axes[1]
    two = p.get("2ranks", {})
    ax.bar(["dtorch\n2 ranks", "torch\n2 threads"],
           [two.get("gflops") or 0, two.get("torch_gflops") or 0], color=["C0", "C1"])
    ax.set_title(f"same total work, bmm [2,n,n]: {fmt(two.get('ratio'), 2)}x")
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


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "--child":
        spec = json.loads(sys.argv[3])
        fn = {"dtorch": child_dtorch, "peer": child_peer}[sys.argv[2]]
        print(json.dumps(fn(spec)))
        return
    if len(sys.argv) >= 4 and sys.argv[1] == "--serve":
        {"dtorch": serve_dtorch, "peer": serve_peer}[sys.argv[2]](json.loads(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "gemm"))
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    add_peer_python_argument(ap)
    ap.add_argument("--pairs", type=int, default=60,
                    help="pairs of calls (dtorch, torch) behind each goal")
    ap.add_argument("--turn-calls", type=int, default=3,
                    help="products back to back in each side's turn of a pair")
    ap.add_argument("--gap-ms", type=float, default=30.0,
                    help="idle time before each turn of a pair")
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
    one_rank = (dict(base, world=1, op="matmul"), {"DTORCH_BLAS_THREADS": "1"},
                args.peer_python, dict(base, threads=1, batch=1), args.pairs, args.turn_calls,
                args.gap_ms / 1e3, args.timeout)
    paired_results = {
        # Both sides on one CPU: on a VM whose CPUs run at different speeds
        # from minute to minute (host neighbours), two processes left to the
        # scheduler can sit on different CPUs for a whole run.
        "1rank": paired(*one_rank, cpus={max(os.sched_getaffinity(0))}),
        "1rank_any_cpu": paired(*one_rank),
        # The same, with dtorch's rank thread (and its worker) kept on one
        # CPU of its choosing (DTORCH_PIN_RANKS=1); torch's left alone.
        "1rank_pinned_rank": paired(one_rank[0], dict(one_rank[1], DTORCH_PIN_RANKS="1"),
                                    *one_rank[2:]),
        "2ranks": paired(dict(base, world=2, op="bmm"), {}, args.peer_python,
                         dict(base, threads=2, batch=2), args.pairs, args.turn_calls,
                         args.gap_ms / 1e3, args.timeout),
    }
    for key, p in paired_results.items():
        print(f"paired {key}: " + (p["error"] if "error" in p else
                                   f"ratio {p['ratio']:.3f} (of medians {p['ratio_of_medians']:.3f},"
                                   f" of least {p['ratio_of_least']:.3f})"), file=sys.stderr)
    raw = {k: [] for k in runs}
    for r in range(args.rounds):
        for key, fn in runs.items():
            raw[key].append(fn())
            print(f"round {r + 1}/{args.rounds} {key}: "
                  f"{json.dumps({k: v for k, v in raw[key][-1].items() if k != 'blas'})}",
                  file=sys.stderr)
    results = {
        "date": utc_date(),
        "git": git_rev(unknown="?"),
        "host": f"{platform.node()}, {os.cpu_count()} CPUs, "
                f"affinity {len(os.sched_getaffinity(0))}, load {os.getloadavg()[0]:.2f}",
        "config": {"n": n, "rounds": args.rounds, "reps": reps, "pairs": args.pairs,
                   "turn_calls": args.turn_calls, "gap_ms": args.gap_ms,
                   "peer_python": args.peer_python},
        "paired": paired_results,
        "raw": raw,
        "summary": summarize(raw),
        "total_s": time.perf_counter() - t0,
    }
    results["goals"] = [{"goal": g, "ratio": v, "met": ok} for g, v, ok in goals(results)]
    text = table(results)
    write_table_and_json(args.out, text, results)
    plot(results, os.path.join(args.out, "gemm.png"))
    print(text)


if __name__ == "__main__":
    main()
