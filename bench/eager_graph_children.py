"""The dtorch measurements of bench/eager_graph_bench.py, one per fresh
interpreter (one dtorch session per process):

    python3 bench/eager_graph_children.py KIND '{"world": 4, ...}'

prints one JSON object on its last line. KIND is one of chain, compile,
disk, compile, step, client, loop (see eager_graph_bench.py for what
each measures).
"""
import json
import statistics
import sys
import time

import numpy as np


def start(world, backend):
    """dtorch.init with `backend`; "simulated" falls back to "inprocess"
    (marked in the result) where this build does not have it yet. The
    simulated backend gets its default number of worker processes (the
    controller sends one run message per process); the cluster gets 2."""
    import dtorch
    used = backend
    try:
        if backend == "simulated":
            dtorch.init(world_size=world, backend=backend)
        else:
            dtorch.init(world_size=world, backend=backend, num_processes=min(2, world))
    except ValueError as e:
        if backend != "simulated" or "backend" not in str(e):
            raise
        used = "inprocess"
        dtorch.init(world_size=world, backend=used)
    return used


def controller_stats():
    """The controller's own counters and time (`_C.controller_stats`), where
    this build has them; else None."""
    from dtorch import _C
    fn = getattr(_C, "controller_stats", None)
    return dict(fn()) if fn else None


def stats_delta(before, after, key):
    if before is None or after is None or key not in after:
        return None
    return after[key] - before[key]


def chain(x, n, a, b):
    """n elementwise ops: alternately times a and plus b."""
    y = x
    for i in range(n):
        y = y * a if i % 2 == 0 else y + b
    return y


def check_chain_value(value, n, a, b):
    """Asserts that `value` (the chain of ones) is what chain() computes."""
    want = 1.0
    for i in range(n):
        want = want * a if i % 2 == 0 else want + b
    assert abs(float(value) - want) < 1e-3 * abs(want), (value, want)


def chain_constants(rep):
    """Constants that differ per repetition, so each chain's segment text
    (which holds them) is new to the program cache."""
    return 1.0 + (rep + 1) * 1e-7, (rep + 1) * 1e-4


def run_chain(args):
    """(1) An N-op elementwise chain on `world` ranks to its fetched result:
    every repetition a cache miss (new constants), then cache hits."""
    import dtorch
    from dtorch import Shard
    backend = start(args["world"], args.get("backend", "cluster"))
    n, reps = args["ops"], args["reps"]
    mesh = dtorch.init_device_mesh("cpu", (args["world"],))
    x = dtorch.ones(64, 16, device_mesh=mesh, placements=[Shard(0)])
    x.numpy()
    chain(x, 64, 1.5, 0.5).numpy()  # warm up: the compiler's first use
    misses, records, compiles = [], [], []
    for rep in range(reps):
        a, b = chain_constants(rep)
        before = dtorch._C.compile_count()
        t = time.perf_counter()
        y = chain(x, n, a, b)
        recorded = time.perf_counter()
        value = y.numpy()
        misses.append(time.perf_counter() - t)
        records.append(recorded - t)
        compiles.append(dtorch._C.compile_count() - before)
    check_chain_value(value[0, 0], n, a, b)
    hits, hit_records = [], []
    before = dtorch._C.compile_count()
    for _ in range(reps):
        t = time.perf_counter()
        y = chain(x, n, a, b)
        recorded = time.perf_counter()
        y.numpy()
        hits.append(time.perf_counter() - t)
        hit_records.append(recorded - t)
    hit_compiles = dtorch._C.compile_count() - before
    dtorch.shutdown()
    us = 1e6 / n
    return {"backend": backend, "world": args["world"], "ops": n,
            "miss_us_per_op": statistics.median(misses) * us,
            "miss_record_us_per_op": statistics.median(records) * us,
            "cached_us_per_op": statistics.median(hits) * us,
            "cached_record_us_per_op": statistics.median(hit_records) * us,
            "compiles_per_miss": compiles, "compiles_on_hits": hit_compiles}


def run_disk(args):
    """(1) The chain of repetition 0 once, to its result, in a fresh process:
    run twice over one on-disk program cache ($DTORCH_CACHE_DIR), the second
    process finds the program on disk."""
    import dtorch
    from dtorch import Shard
    backend = start(args["world"], args.get("backend", "cluster"))
    n = args["ops"]
    mesh = dtorch.init_device_mesh("cpu", (args["world"],))
    x = dtorch.ones(64, 16, device_mesh=mesh, placements=[Shard(0)])
    x.numpy()
    a, b = 1.0 + 5e-6, 5e-3  # constants no other measurement uses
    stats0 = controller_stats()
    before = dtorch._C.compile_count()
    t = time.perf_counter()
    chain(x, n, a, b).numpy()
    wall = time.perf_counter() - t
    compiles = dtorch._C.compile_count() - before
    disk_hits = stats_delta(stats0, controller_stats(), "disk_hits")
    dtorch.shutdown()
    return {"backend": backend, "world": args["world"], "ops": n, "us_per_op": wall / n * 1e6,
            "compiles": compiles, "disk_hits": disk_hits}


def run_compile(args):
    """(2) The same chain's compile cost on `world` ranks: the time to a
    synchronized result of a miss minus that of a hit."""
    import dtorch
    from dtorch import Shard
    backend = start(args["world"], args.get("backend", "simulated"))
    n, reps = args["ops"], args["reps"]
    mesh = dtorch.init_device_mesh("cpu", (args["world"],))
    x = dtorch.ones(8192, 4, device_mesh=mesh, placements=[Shard(0)])
    dtorch.synchronize()
    chain(x, 8, 1.5, 0.5)
    dtorch.synchronize()  # warm up: the compiler's first use
    misses = []
    stats0 = controller_stats()
    for rep in range(reps):
        a, b = chain_constants(rep)
        t = time.perf_counter()
        y = chain(x, n, a, b)
        dtorch.synchronize()
        misses.append(time.perf_counter() - t)
    own = stats_delta(stats0, controller_stats(), "compile_seconds")
    hits = []
    for _ in range(reps):
        t = time.perf_counter()
        y = chain(x, n, a, b)
        dtorch.synchronize()
        hits.append(time.perf_counter() - t)
    del y
    compiles = dtorch._C.compile_count()
    dtorch.shutdown()
    miss, hit = statistics.median(misses), statistics.median(hits)
    return {"backend": backend, "world": args["world"], "ops": n, "miss_s": miss, "hit_s": hit,
            "compile_s": miss - hit, "compile_us_per_op": (miss - hit) / n * 1e6,
            "compiles": compiles,
            "controller_compile_s": None if own is None else own / reps}


def make_mlp(mesh, cfg):
    import dtorch.nn as nn
    dims = [cfg["d_in"]] + [cfg["hidden"]] * cfg["layers"] + [cfg["classes"]]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1], device_mesh=mesh))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def mlp_setup(world, cfg):
    """A data-parallel MLP on a (world,) "dp" mesh: batch Shard(0),
    parameters replicated, AdamW."""
    import dtorch
    from dtorch import Shard
    mesh = dtorch.init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    dtorch.manual_seed(0)
    model = make_mlp(mesh, cfg)
    opt = dtorch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = dtorch.tensor(rng.standard_normal((cfg["batch"], cfg["d_in"])).astype(np.float32),
                      device_mesh=mesh, placements=[Shard(0)])
    y = dtorch.tensor(rng.integers(0, cfg["classes"], size=cfg["batch"]), device_mesh=mesh,
                      placements=[Shard(0)])
    return model, opt, x, y


def train_step(model, opt, x, y):
    import dtorch.nn.functional as F
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()  # ends the segment
    return loss


def run_step(args):
    """(3) A cached training step on `world` ranks: the client's recording,
    then the controller (look-up, run messages) until synchronized."""
    import dtorch
    backend = start(args["world"], args.get("backend", "simulated"))
    model, opt, x, y = mlp_setup(args["world"], args["mlp"])
    for _ in range(3):  # compile the first and the steady step
        train_step(model, opt, x, y)
        dtorch.synchronize()
    before = dtorch._C.compile_count()
    stats0 = controller_stats()
    totals, records = [], []
    for _ in range(args["steps"]):
        t = time.perf_counter()
        train_step(model, opt, x, y)
        recorded = time.perf_counter()
        dtorch.synchronize()
        totals.append(time.perf_counter() - t)
        records.append(recorded - t)
    compiles = dtorch._C.compile_count() - before
    own = stats_delta(stats0, controller_stats(), "hit_seconds")
    dtorch.shutdown()
    total, record = statistics.median(totals), statistics.median(records)
    return {"backend": backend, "world": args["world"], "step_ms": total * 1e3,
            "client_ms": record * 1e3, "controller_ms": (total - record) * 1e3,
            "controller_hit_ms": None if own is None else own / args["steps"] * 1e3,
            "compiles_in_timed_steps": compiles}


def run_client(args):
    """(4) Client cost per recorded op of forward + backward + AdamW step."""
    import dtorch
    from dtorch import _C
    from dtorch.autograd import no_grad
    import dtorch.nn.functional as F
    backend = start(args["world"], args.get("backend", "simulated"))
    model, opt, x, y = mlp_setup(args["world"], args["mlp"])
    for _ in range(3):
        train_step(model, opt, x, y)
    dtorch.synchronize()
    # Ops per step: what the step records before optimizer.step() cuts it.
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    with no_grad():
        for group in opt.param_groups:
            opt._step_group(group)
    ops = _C.pending_ops()
    _C.cut_segment()
    dtorch.synchronize()
    walls, cpus = [], []
    for _ in range(args["steps"]):
        t, c = time.perf_counter(), time.thread_time()
        train_step(model, opt, x, y)
        walls.append(time.perf_counter() - t)
        cpus.append(time.thread_time() - c)
        if len(walls) % 10 == 0:
            dtorch.synchronize()  # keep the queue short (not timed)
    dtorch.shutdown()
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    return {"backend": backend, "world": args["world"], "ops_per_step": ops,
            "step_us": wall * 1e6, "step_cpu_us": cpu * 1e6, "us_per_op": wall / ops * 1e6,
            "cpu_us_per_op": cpu / ops * 1e6}


def settle(step, quiet_steps=5, most=400):
    """Runs `step` until the controller has switched every segment to its
    fused programs (controller_stats()["fused_recompiles"] unchanged over
    `quiet_steps` steps), so that no background compile runs while timing."""
    import dtorch
    last, quiet = None, 0
    for _ in range(most):
        step()
        now = dtorch._C.controller_stats().get("fused_recompiles", 0)
        quiet = quiet + 1 if now == last else 0
        last = now
        if quiet >= quiet_steps:
            return
        time.sleep(0.005)


def run_loop(args):
    """(5) A training loop that logs every loss with numpy_async(), one that
    never fetches, one that calls .item() every step (real workers)."""
    import dtorch
    backend = start(args["world"], args.get("backend", "cluster"))
    model, opt, x, y = mlp_setup(args["world"], args["mlp"])
    for _ in range(5):
        train_step(model, opt, x, y).item()
    # The steady state: the step's fused compile (started in the background
    # by its first cache hit) is done and in use.
    settle(lambda: train_step(model, opt, x, y).item())
    steps = args["steps"]

    def never():
        for _ in range(steps):
            train_step(model, opt, x, y)
        dtorch.synchronize()

    def logs_async():
        futures = [train_step(model, opt, x, y).numpy_async() for _ in range(steps)]
        losses = [float(f.result()) for f in futures]
        assert len(losses) == steps and all(np.isfinite(losses))

    def item():
        losses = [train_step(model, opt, x, y).item() for _ in range(steps)]
        assert all(np.isfinite(losses))

    variants = {"never fetches": never, "numpy_async() every step": logs_async,
                ".item() every step": item}
    times = {name: [] for name in variants}
    before = dtorch._C.compile_count()
    names = list(variants)
    for r in range(args["rounds"]):
        for name in names[r % 3:] + names[:r % 3]:  # each variant first once
            t = time.perf_counter()
            variants[name]()
            times[name].append((time.perf_counter() - t) / steps)
    compiles = dtorch._C.compile_count() - before
    dtorch.shutdown()
    out = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    return {"backend": backend, "world": args["world"], "steps": steps,
            "step_ms": out, "compiles_in_timed_steps": compiles}


KINDS = {"chain": run_chain, "disk": run_disk, "compile": run_compile, "step": run_step,
         "client": run_client,
         "loop": run_loop}

if __name__ == "__main__":
    kind, spec = sys.argv[1], json.loads(sys.argv[2])
    result = KINDS[kind](spec)
    print(json.dumps(result))
