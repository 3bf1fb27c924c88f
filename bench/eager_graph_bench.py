"""Every measurement of the Eager Graph issue, side by side in one run:

  (1) cache-miss cost per op of an N-op elementwise chain on 4 ranks, to its
      fetched result (new constants every repetition, so every run compiles),
      next to the cached cost, torch DTensor on 4 gloo processes and JAX jit
      compile + run (4 host devices);
  (2) compile cost of the same segment on 4, 64, 1024, 4096 ranks with
      simulated workers (backend="simulated");
  (3) controller cost of a cached training step (MLP, data parallel) with
      simulated workers on 8, 64, 512, 4096 ranks;
  (4) client cost per recorded op of forward + backward + AdamW step of a
      small MLP, next to torch eager;
  (5) a training loop that logs every loss with numpy_async(), next to one
      that never fetches and one that calls .item() every step.

    python3 bench/eager_graph_bench.py [--out bench/results/eager_graph] [--ops 2000]

Writes table.md, results.json and eager_graph.png into --out. Each dtorch
measurement runs in a fresh interpreter (bench/eager_graph_children.py, one
dtorch session per process), every world size in its own. The peers run in
build/torch-venv (bench/setup_torch.sh installs torch and jax there;
bench/eager_graph_peers.py); a missing peer reads "not installed". Where this
build has no simulated backend yet, sizes that fit run on the in-process one
(marked) and the others say why they are missing. Not run by the tests.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench_support import (add_peer_python_argument, git_rev, run_json, utc_date,
                           write_table_and_json)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The MLPs: (3) a step whose batch splits over every world size; (4) a
# small one, where the client's overhead dominates; (5) one with enough work
# that the workers are busy while the client records.
STEP_MLP = {"d_in": 32, "hidden": 64, "layers": 2, "classes": 10, "batch": 8192}
CLIENT_MLP = {"d_in": 32, "hidden": 64, "layers": 2, "classes": 10, "batch": 64}
LOOP_MLP = {"d_in": 64, "hidden": 256, "layers": 2, "classes": 10, "batch": 512}
INPROCESS_MAX_RANKS = 64  # the in-process fallback: a thread per rank


def dtorch_env(cache_dir=""):
    """This checkout's dtorch, whichever one was installed last, with the
    on-disk program cache in `cache_dir` (empty: disabled, so that a miss
    compiles whatever ran before)."""
    env = dict(os.environ)
    env["DTORCH_CACHE_DIR"] = cache_dir
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python")] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                          if p])
    return env


def child(kind, spec, timeout, cache_dir=""):
    print(f"  dtorch {kind} {json.dumps({k: v for k, v in spec.items() if k != 'mlp'})}",
          flush=True)
    return run_json([sys.executable, os.path.join(HERE, "eager_graph_children.py"), kind,
                     json.dumps(spec)], timeout, dtorch_env(cache_dir))


def disk_cache_runs(spec, timeout):
    """The same chain in two fresh processes over one on-disk program cache:
    the first compiles (and stores), the second loads it."""
    with tempfile.TemporaryDirectory() as d:
        first = child("disk", spec, timeout, cache_dir=d)
        second = child("disk", spec, timeout, cache_dir=d)
    return {"first": first, "second": second}


def peer_available(python, module):
    if not python or not os.path.exists(python):
        return False
    r = subprocess.run([python, "-c", f"import {module}"], capture_output=True)
    return r.returncode == 0


def peer(python, kind, spec, timeout, module):
    if not peer_available(python, module):
        return {"error": "not installed"}
    print(f"  peer {kind}", flush=True)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return run_json([python, os.path.join(HERE, "eager_graph_peers.py"), kind, json.dumps(spec)],
                    timeout, env)


def sweep(kind, sizes, spec, timeout):
    """One fresh process per world size; once a size fails by timing out,
    the larger ones are not tried (they would only take longer)."""
    rows, stop = [], None
    for world in sizes:
        if stop:
            rows.append({"world": world, "error": stop})
            continue
        out = child(kind, dict(spec, world=world), timeout)
        out.setdefault("world", world)
        if "timed out" in out.get("error", "") and kind == "step":
            out["error"] += " (the first steps, which compile, count)"
        if "timed out" in out.get("error", ""):
            stop = f"not tried: {world} ranks already {out['error']}"
        rows.append(out)
    return rows


def simulated_available():
    r = subprocess.run([sys.executable, "-c", "import dtorch; dtorch.init(world_size=2, "
                        "backend='simulated'); dtorch.shutdown()"], capture_output=True,
                       text=True, env=dtorch_env())
    return r.returncode == 0


def sweep_simulated(kind, sizes, spec, timeout, simulated):
    if simulated:
        return sweep(kind, sizes, dict(spec, backend="simulated"), timeout)
    fit = [s for s in sizes if s <= INPROCESS_MAX_RANKS]
    rows = sweep(kind, fit, dict(spec, backend="inprocess"), timeout)
    rows += [{"world": s, "error": "needs backend='simulated' (not in this build)"}
             for s in sizes if s > INPROCESS_MAX_RANKS]
    return rows


# ---- the report ------------------------------------------------------------------
def fmt(v, digits=2):
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def fmt_ratio(v):
    return "-" if v is None else f"{v:.3g}"


def goals(results):
    """(goal, measured, verdict) for each goal of the issue."""
    def verdict(ok, value, why=None):
        if value is None:
            return "not measured" + (f" ({why})" if why else "")
        return "met" if ok else "not met"

    rows = []
    miss = results["chain"]["dtorch"].get("miss_us_per_op")
    rows.append(("cache-miss cost <= 10 us/op (2,000-op chain, 4 ranks, to its result)",
                 f"{fmt(miss)} us/op" if miss is not None else "-",
                 verdict(miss is not None and miss <= 10, miss)))
    by_world = {r["world"]: r for r in results["compile"] if "error" not in r}
    sim = results["config"]["simulated_backend"]
    c4, c4096 = by_world.get(4, {}).get("compile_s"), by_world.get(4096, {}).get("compile_s")
    r = ratio(c4096, c4)
    def why_missing(rows, world):
        row = next((x for x in rows if x["world"] == world), None)
        if row is None:
            return f"{world} ranks not in the sweep"
        if "error" in row:
            return row["error"]
        return None if sim else "no simulated backend in this build"

    rows.append(("compile cost at 4,096 ranks <= 2x the cost at 4 (simulated workers)",
                 f"{fmt_ratio(r)}x" if r is not None else "-",
                 verdict(r is not None and r <= 2, r,
                         why_missing(results["compile"], 4096) or why_missing(
                             results["compile"], 4))))
    step = {r["world"]: r for r in results["step"] if "error" not in r}.get(4096, {})
    ctl = step.get("controller_ms") if sim else None
    rows.append(("controller cost of a cached step < 5 ms at 4,096 ranks (simulated workers)",
                 f"{fmt(ctl, 3)} ms" if ctl is not None else "-",
                 verdict(ctl is not None and ctl < 5, ctl, why_missing(results["step"], 4096))))
    cl, tm = results["client"]["dtorch"], results["client"]["torch_eager"]
    ours, theirs = cl.get("us_per_op"), tm.get("us_per_aten_op")
    per_step = ratio(cl.get("step_us"), tm.get("step_us"))
    rows.append(("client cost per recorded op below torch eager's per op (fwd+bwd+AdamW, "
                 "small MLP)",
                 f"{fmt(ours)} vs {fmt(theirs)} us/op (per step {fmt_ratio(per_step)}x)"
                 if ours is not None and theirs is not None else "-",
                 verdict(ours is not None and theirs is not None and ours < theirs,
                         None if ours is None or theirs is None else ours,
                         cl.get("error") or tm.get("error"))))
    lp = results["loop"]
    r = None if "error" in lp else ratio(lp["step_ms"]["numpy_async() every step"],
                                         lp["step_ms"]["never fetches"])
    rows.append(("loop logging every loss with numpy_async() within 10% of never fetching",
                 f"{fmt_ratio(r)}x" if r is not None else "-",
                 verdict(r is not None and r <= 1.10, r)))
    return rows


def backend_note(row):
    if "error" in row:
        return row["error"]
    return "in-process fallback" if row.get("backend") == "inprocess" else row.get("backend", "")


def table(results):
    cfg = results["config"]
    out = [f"# Eager Graph benchmark ({results['date']}, {results['git']})", "",
           f"Host: {results['host']}. Each dtorch number runs in a fresh process; medians of "
           f"{cfg['reps']} repetitions unless said otherwise.", ""]

    out += ["## Goals", "", "| goal | measured | |", "|---|---:|---|"]
    out += [f"| {g} | {m} | {v} |" for g, m, v in goals(results)]
    out.append("")

    c = results["chain"]
    d, dt_peer, jx = c["dtorch"], c["torch_dtensor"], c["jax"]
    miss = d.get("miss_us_per_op")
    out += [f"## (1) Cache-miss cost per op: {cfg['ops']}-op elementwise chain on 4 ranks, "
            "to its result", "",
            "| what | us/op | ratio to dtorch miss | note |", "|---|---:|---:|---|"]

    def line(name, v, note):
        out.append(f"| {name} | {fmt(v)} | {fmt_ratio(ratio(v, miss))} | {note} |")

    if "error" in d:
        line("dtorch", None, d["error"])
    else:
        line("dtorch, cache miss (record + compile + run + fetch)", miss,
             f"recording alone {fmt(d['miss_record_us_per_op'])} us/op; compiles per run "
             f"{d['compiles_per_miss']}; goal <= 10 us/op")
        line("dtorch, cached", d["cached_us_per_op"],
             f"recording alone {fmt(d['cached_record_us_per_op'])} us/op; compiles "
             f"{d['compiles_on_hits']}")
    disk = c.get("disk", {})
    first, second = disk.get("first", {}), disk.get("second", {})
    if "error" in second or "error" in first:
        line("dtorch, on-disk cache hit (a fresh process)", None,
             second.get("error", first.get("error")))
    elif second:
        if second.get("disk_hits") is None:
            note = "this build has no on-disk program cache (compiles: " \
                   f"{second['compiles']})"
        else:
            note = (f"disk hits {second['disk_hits']}, compiles {second['compiles']}; the "
                    f"process before it compiled and stored it in {fmt(first['us_per_op'])} "
                    "us/op")
        line("dtorch, on-disk cache hit (a fresh process)", second["us_per_op"], note)
    line("torch DTensor, 4 gloo processes", dt_peer.get("us_per_op"),
         dt_peer.get("error", "torch " + dt_peer.get("torch", "")))
    line("JAX jit, compile + run (4 host devices)", jx.get("compile_run_us_per_op"),
         jx.get("error", "jax " + jx.get("jax", "")))
    line("JAX jit, cached run", jx.get("cached_us_per_op"), jx.get("error", ""))

    rows = results["compile"]
    base = next((r.get("compile_s") for r in rows if r["world"] == rows[0]["world"]), None)
    out += ["", f"## (2) Compile cost of the same segment ({cfg['ops']} ops) by world size", "",
            "compile s: a miss minus a hit, each to a synchronized result; controller's "
            "compile s: the controller thread's own time compiling (`controller_stats`, where "
            "the build has it). Goal: at 4096 ranks at most 2x the cost at 4.", "",
            "| ranks | compile s | us/op | ratio to 4 ranks | controller's compile s | backend |",
            "|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['world']} | {fmt(r.get('compile_s'), 3)} | "
                   f"{fmt(r.get('compile_us_per_op'))} | "
                   f"{fmt_ratio(ratio(r.get('compile_s'), base))} | "
                   f"{fmt(r.get('controller_compile_s'), 3)} | {backend_note(r)} |")

    rows = results["step"]
    base = rows[0].get("step_ms") if rows else None
    out += ["", "## (3) Controller cost of a cached training step (MLP, data parallel)", "",
            "client: recording forward + backward + AdamW step; controller: from the cut to "
            "synchronized; controller's own hit: the controller thread's look-up and dispatch "
            "of the step (`controller_stats`, where the build has it). Goal: under 5 ms at "
            "4096 ranks.", "",
            "| ranks | step ms | client ms | controller ms | ratio to 8 ranks | controller's own "
            "hit ms | backend |",
            "|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['world']} | {fmt(r.get('step_ms'), 3)} | "
                   f"{fmt(r.get('client_ms'), 3)} | {fmt(r.get('controller_ms'), 3)} | "
                   f"{fmt_ratio(ratio(r.get('step_ms'), base))} | "
                   f"{fmt(r.get('controller_hit_ms'), 3)} | {backend_note(r)} |")

    cl, tm = results["client"]["dtorch"], results["client"]["torch_eager"]
    out += ["", "## (4) Client cost per recorded op: forward + backward + AdamW step of a "
            f"small MLP ({CLIENT_MLP['layers']} hidden layers of {CLIENT_MLP['hidden']}, "
            f"batch {CLIENT_MLP['batch']})", "",
            "| what | ops/step | us/step | us/op | ratio to torch eager (per step) | note |",
            "|---|---:|---:|---:|---:|---|"]
    if "error" in cl:
        out.append(f"| dtorch client | - | - | - | - | {cl['error']} |")
    else:
        out.append(f"| dtorch client (recording) | {cl['ops_per_step']} | {fmt(cl['step_us'])} | "
                   f"{fmt(cl['us_per_op'])} | "
                   f"{fmt_ratio(ratio(cl['step_us'], tm.get('step_us')))} | "
                   f"client thread CPU {fmt(cl['cpu_us_per_op'])} us/op; {backend_note(cl)} "
                   "workers |")
    if "error" in tm:
        out.append(f"| torch eager | - | - | - | - | {tm['error']} |")
    else:
        out.append(f"| torch eager (computes too) | {tm['aten_ops_per_step']} aten | "
                   f"{fmt(tm['step_us'])} | {fmt(tm['us_per_aten_op'])} | 1.00 | "
                   f"torch {tm.get('torch', '')}, 1 thread |")

    lp = results["loop"]
    out += ["", "## (5) A training loop that logs every loss", "",
            "Goal: numpy_async() every step within 10% of never fetching.", "",
            "| loop | ms/step | ratio to never fetching |", "|---|---:|---:|"]
    if "error" in lp:
        out.append(f"| - | - | {lp['error']} |")
    else:
        never = lp["step_ms"]["never fetches"]
        for name, v in lp["step_ms"].items():
            out.append(f"| {name} | {fmt(v, 3)} | {fmt_ratio(ratio(v, never))} |")
        out.append("")
        out.append(f"{lp['steps']} steps per loop, {lp['world']} ranks ({backend_note(lp)} "
                   f"workers), MLP {LOOP_MLP}; compiles during the timed loops: "
                   f"{lp['compiles_in_timed_steps']}.")
    return "\n".join(out) + "\n"


def plot(results, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    c = results["chain"]
    bars = [("dtorch\nmiss", c["dtorch"].get("miss_us_per_op")),
            ("dtorch\ncached", c["dtorch"].get("cached_us_per_op")),
            ("dtorch\ndisk hit", c.get("disk", {}).get("second", {}).get("us_per_op")),
            ("torch\nDTensor", c["torch_dtensor"].get("us_per_op")),
            ("JAX jit\ncompile+run", c["jax"].get("compile_run_us_per_op")),
            ("JAX jit\ncached", c["jax"].get("cached_us_per_op"))]
    ax = axes[0][0]
    ax.bar([b[0] for b in bars], [b[1] or 0 for b in bars],
           color=["C0", "C0", "C0", "C1", "C2", "C2"])
    ax.tick_params(axis="x", labelsize=8)
    ax.axhline(10, color="k", ls="--", lw=0.8, label="goal: miss <= 10 us/op")
    ax.set_yscale("log")
    ax.set_ylabel("us per op")
    ax.set_title(f"(1) {results['config']['ops']}-op chain, 4 ranks, to result")
    ax.legend(fontsize=8)
    for b_ax, key, ylabel, title in [
            (axes[0][1], "compile", "compile s", "(2) compile cost by world size"),
            (axes[0][2], "step", "ms per step", "(3) cached step by world size")]:
        rows = [r for r in results[key] if "error" not in r]
        field = "compile_s" if key == "compile" else "step_ms"
        if rows:
            b_ax.plot([r["world"] for r in rows], [r[field] for r in rows], "o-", label="total")
            if key == "step":
                b_ax.plot([r["world"] for r in rows], [r["controller_ms"] for r in rows], "s--",
                          label="controller")
                b_ax.axhline(5, color="k", ls="--", lw=0.8, label="goal at 4096: 5 ms")
            b_ax.legend(fontsize=8)
        b_ax.set_xscale("log", base=2)
        b_ax.set_xlabel("ranks")
        b_ax.set_ylabel(ylabel)
        b_ax.set_title(title + ("" if all(r.get("backend") == "simulated" for r in rows)
                                else "\n(in-process where simulated is missing)"))
    ax = axes[1][0]
    cl, tm = results["client"]["dtorch"], results["client"]["torch_eager"]
    ax.bar(["dtorch client\n(per recorded op)", "torch eager\n(per aten op)"],
           [cl.get("us_per_op") or 0, tm.get("us_per_aten_op") or 0], color=["C0", "C1"])
    ax.set_ylabel("us per op")
    ax.set_title("(4) fwd+bwd+AdamW of a small MLP, per op")
    ax = axes[1][1]
    lp = results["loop"]
    if "error" not in lp:
        names = list(lp["step_ms"])
        ax.bar([n.replace(" every step", "\nevery step") for n in names],
               [lp["step_ms"][n] for n in names], color=["C0", "C2", "C3"])
    ax.set_ylabel("ms per step")
    ax.set_title("(5) training loop, 4 ranks")
    axes[1][2].axis("off")
    lines = [f"{results['date']}, {results['git']}", results["host"], "", "Goals:"]
    short = ["miss <= 10 us/op", "compile 4096 <= 2x 4", "cached step 4096 < 5 ms",
             "client/op < torch eager", "numpy_async loop <= 1.1x"]
    for name, (_, m, v) in zip(short, goals(results)):
        lines.append(f"{name:<25} {m}")
        lines.append(f"{'':<25} {v if len(v) < 50 else v[:47] + '...'}")
    axes[1][2].text(0, 0.5, "\n".join(lines), fontsize=8, va="center", family="monospace")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "eager_graph"))
    ap.add_argument("--ops", type=int, default=2000, help="ops of the chain of (1) and (2)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--compile-sizes", default="4,64,1024,4096")
    ap.add_argument("--step-sizes", default="8,64,512,4096")
    ap.add_argument("--step-count", type=int, default=20, help="timed steps of (3) and (4)")
    ap.add_argument("--loop-steps", type=int, default=40, help="steps of each loop of (5)")
    ap.add_argument("--timeout", type=float, default=45, help="seconds per measurement process")
    add_peer_python_argument(ap)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    simulated = simulated_available()
    print(f"simulated backend: {'yes' if simulated else 'no (in-process fallback)'}", flush=True)
    chain_spec = {"ops": args.ops, "reps": args.reps}
    results = {
        "date": utc_date(),
        "git": git_rev(mark_modified=True), "host": f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}",
        "config": {"ops": args.ops, "reps": args.reps, "simulated_backend": simulated,
                   "step_mlp": STEP_MLP, "client_mlp": CLIENT_MLP, "loop_mlp": LOOP_MLP}}
    print("(1) chain", flush=True)
    results["chain"] = {
        "dtorch": child("chain", dict(chain_spec, world=4, backend="cluster"), args.timeout),
        "torch_dtensor": peer(args.peer_python, "dtensor_chain", dict(chain_spec, world=4),
                              3 * args.timeout, "torch.distributed.tensor"),
        "jax": peer(args.peer_python, "jax_chain", dict(chain_spec, world=4), 3 * args.timeout,
                    "jax"),
        "disk": disk_cache_runs({"ops": args.ops, "world": 4, "backend": "cluster"},
                                args.timeout)}
    print("(2) compile cost", flush=True)
    results["compile"] = sweep_simulated(
        "compile", [int(s) for s in args.compile_sizes.split(",")], chain_spec, args.timeout,
        simulated)
    print("(3) cached step", flush=True)
    results["step"] = sweep_simulated(
        "step", [int(s) for s in args.step_sizes.split(",")],
        {"mlp": STEP_MLP, "steps": args.step_count}, args.timeout, simulated)
    print("(4) client cost", flush=True)
    results["client"] = {
        "dtorch": child("client", {"world": 4, "backend": "simulated" if simulated else "cluster",
                                   "mlp": CLIENT_MLP, "steps": 5 * args.step_count},
                        args.timeout),
        "torch_eager": peer(args.peer_python, "torch_mlp",
                            {"mlp": CLIENT_MLP, "steps": 5 * args.step_count}, args.timeout,
                            "torch")}
    print("(5) training loop", flush=True)
    results["loop"] = child("loop", {"world": 4, "backend": "cluster", "mlp": LOOP_MLP,
                                     "steps": args.loop_steps, "rounds": 3}, args.timeout * 2)
    results["total_s"] = time.perf_counter() - t0
    text = table(results)
    write_table_and_json(args.out, text, results, indent=2)
    png = plot(results, os.path.join(args.out, "eager_graph.png"))
    print()
    print(text)
    print(f"wrote {args.out}/table.md, results.json" + (", eager_graph.png" if png else "") +
          f" in {results['total_s']:.0f} s")


if __name__ == "__main__":
    main()
