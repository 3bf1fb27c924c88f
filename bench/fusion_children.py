"""Measurements of bench/fusion_bench.py that need a dtorch session, one per
process: `python3 bench/fusion_children.py KIND 'JSON'` prints one JSON
object on its last line. DTORCH_FUSION in the environment turns fusion on
(default) or off (0). KIND: chain (a cached N-op elementwise chain on
`world` ranks, to its fetched result) or gelu (y = gelu(x*w+b)*s on `n`
float32 elements on 1 rank, cached, time per step until the workers are
done; bandwidth over the best repetition, the median's alongside)."""
import json
import statistics
import sys
import time

import numpy as np

from eager_graph_children import chain, check_chain_value


def run_chain(args):
    import dtorch
    from dtorch import Shard
    world, n, reps = args["world"], args["ops"], args["reps"]
    dtorch.init(world_size=world, num_processes=min(2, world))
    mesh = dtorch.init_device_mesh("cpu", (world,))
    x = dtorch.ones(64, 16, device_mesh=mesh, placements=[Shard(0)])
    x.numpy()
    a, b = 1.0 + 1e-7, 1e-4
    t = time.perf_counter()
    value = chain(x, n, a, b).numpy()  # the miss: compiles
    miss = time.perf_counter() - t
    check_chain_value(value[0, 0], n, a, b)
    hits, records = [], []
    before = dtorch._C.compile_count()
    for _ in range(reps):
        t = time.perf_counter()
        y = chain(x, n, a, b)
        recorded = time.perf_counter()
        y.numpy()
        hits.append(time.perf_counter() - t)
        records.append(recorded - t)
    assert dtorch._C.compile_count() == before
    ir = dtorch.last_ir("rank")
    fused = sum(1 for line in ir.splitlines() if line.startswith("    %") and "rank.fused" in line)
    dtorch.shutdown()
    us = 1e6 / n
    return {"world": world, "ops": n, "miss_us_per_op": miss * us,
            "cached_us_per_op": statistics.median(hits) * us,
            "cached_record_us_per_op": statistics.median(records) * us,
            "fused_instructions": fused}


def run_gelu(args):
    import dtorch
    from dtorch import Replicate
    n, reps, cols = args["n"], args["reps"], 1024
    rows = n // cols
    dtorch.init(world_size=1, num_processes=1)
    mesh = dtorch.init_device_mesh("cpu", (1,))
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((rows, cols), dtype=np.float32)
    wv = rng.standard_normal(cols, dtype=np.float32)
    bv = rng.standard_normal(cols, dtype=np.float32)
    x = dtorch.tensor(xv, device_mesh=mesh, placements=[Replicate()])
    w = dtorch.tensor(wv, device_mesh=mesh, placements=[Replicate()])
    b = dtorch.tensor(bv, device_mesh=mesh, placements=[Replicate()])
    s = 0.75

    def step():
        return (x * w + b).gelu() * s

    y = step()
    got = y.numpy()  # the miss, and a check of the values
    z = xv * wv + bv
    from math import erf, sqrt
    probe = rng.integers(0, rows, 16)
    for r in probe:
        want = np.array([0.5 * v * (1 + erf(v / sqrt(2))) * s for v in z[r, :64]])
        np.testing.assert_allclose(got[r, :64], want, rtol=1e-4, atol=1e-5)
    del y, got
    dtorch.synchronize()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        y = step()
        dtorch.synchronize()
        times.append(time.perf_counter() - t)
        del y
    dtorch.shutdown()
    median = statistics.median(times)
    # Read x, write y (w, b and s are negligible).
    moved = 2 * 4 * rows * cols
    # Best of the repetitions, as STREAM reports (the triad does the same):
    # the machine is shared, and a neighbour's burst only slows a run down.
    return {"n": rows * cols, "median_s": median, "best_s": min(times),
            "gb_per_s": moved / min(times) / 1e9, "gb_per_s_median": moved / median / 1e9}


KINDS = {"chain": run_chain, "gelu": run_gelu}

if __name__ == "__main__":
    print(json.dumps(KINDS[sys.argv[1]](json.loads(sys.argv[2]))))
