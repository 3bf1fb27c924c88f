"""The whole cost of a cache miss per op: a chain of N elementwise adds on
4 ranks recorded, compiled, uploaded, run and its result fetched, each
repetition with a new shape so that every one compiles; next to the same
chain again (a cache hit).

    python3 bench/cold_miss_bench.py [--ops 2000] [--reps 8] [--backend cluster]
                                     [--json bench/results/cold_miss_bench.json]

Reports wall time per op (min and median over the repetitions) and the CPU
time of this process (client and controller threads; the workers are other
processes) per op, which a busy machine disturbs less. The compile alone,
phase by phase: build/bin/compile_profile. Not run by the tests.
"""
import argparse
import json
import os
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--backend", default="cluster")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "cold_miss_bench.json"))
    args = ap.parse_args()

    # Every repetition must compile: no on-disk program cache.
    os.environ["DTORCH_CACHE_DIR"] = ""
    import dtorch
    from dtorch import Shard
    dtorch.init(world_size=4, backend=args.backend)
    mesh = dtorch.init_device_mesh("cpu", (4,))
    n = args.ops
    miss_wall, miss_cpu, hit_wall = [], [], []
    for rep in range(args.reps):
        x = dtorch.ones(4, 4 + rep, device_mesh=mesh, placements=[Shard(0)])
        x.numpy()
        compiles = dtorch._C.compile_count()
        t, c = time.perf_counter(), time.process_time()
        y = x
        for _ in range(n):
            y = y + x
        y.numpy()
        miss_wall.append((time.perf_counter() - t) / n * 1e6)
        miss_cpu.append((time.process_time() - c) / n * 1e6)
        assert dtorch._C.compile_count() == compiles + 1, "expected one compile"
        t = time.perf_counter()
        y = x
        for _ in range(n):
            y = y + x
        y.numpy()
        hit_wall.append((time.perf_counter() - t) / n * 1e6)
        assert dtorch._C.compile_count() == compiles + 1, "expected a cache hit"
    dtorch.shutdown()

    def summary(values):
        values = sorted(values)
        return {"min": values[0], "median": values[len(values) // 2]}

    result = {"ops": n, "ranks": 4, "backend": args.backend, "reps": args.reps,
              "miss_wall_us_per_op": summary(miss_wall),
              "miss_process_cpu_us_per_op": summary(miss_cpu),
              "hit_wall_us_per_op": summary(hit_wall)}
    print(f"chain of {n} adds on 4 ranks ({args.backend}), us per op (min / median of {args.reps}):")
    for key in ("miss_wall_us_per_op", "miss_process_cpu_us_per_op", "hit_wall_us_per_op"):
        print(f"  {key:28s} {result[key]['min']:8.1f} {result[key]['median']:8.1f}")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
