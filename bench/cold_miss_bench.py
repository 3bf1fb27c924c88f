"""The whole cost of a cache miss per op: a chain of N elementwise adds on
4 ranks recorded, compiled, uploaded, run and its result fetched, each
repetition with a new shape so that every one compiles; next to the same
chain again, twice (cache hits).

    python3 bench/cold_miss_bench.py [--ops 2000] [--reps 8] [--backend cluster]
                                     [--json bench/results/cold_miss_bench.json]

Columns, us per op (min and median over the repetitions):

- miss_wall_us_per_op: the first run of the chain, wall time from the first
  recorded op to the fetched result (record, compile without fusion, upload,
  run, fetch).
- miss_process_cpu_us_per_op: the CPU time of this process over the same
  interval (client and controller threads; the workers are other
  processes), which a busy machine disturbs less.
- first_hit_wall_us_per_op: the second run, a cache hit of the unfused
  program. With the default fusion tier (DTORCH_FUSION unset) this is the
  run that compiles the segment again with generated kernels, and uploads
  that program, before it runs: it measures that recompile, not a hit's
  steady cost.
- steady_hit_wall_us_per_op: the third run, a cache hit once the fused
  program is in (nothing compiled or uploaded): what a repeated segment
  costs.
- miss_worker_cpu_us_per_op: over the miss, the CPU time of each local
  worker process (all its threads, from /proc/PID/task/*/schedstat), mean
  over the worker processes.
- miss_client_faults_per_op, miss_worker_faults_per_op: page faults (minor
  and major) of this process and of each worker process (mean) over the miss,
  per op: memory touched for the first time.

The compile alone, phase by phase: build/bin/compile_profile. Not run by the
tests.
"""
import argparse
import json
import os
import time


def worker_pids():
    """The pids of this process's child processes (the embedded cluster's
    workers)."""
    pids = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return pids


def process_cpu_ns(pid):
    """CPU nanoseconds of all threads of `pid` so far (0 when it is gone)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def process_faults(pid):
    """Minor plus major page faults of `pid` so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[7]) + int(fields[9])  # minflt, majflt (fields 10 and 12)


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
    miss_wall, miss_cpu, first_hit_wall, steady_hit_wall = [], [], [], []
    worker_cpu, client_faults, worker_faults = [], [], []
    pids = None
    for rep in range(args.reps):
        x = dtorch.ones(4, 4 + rep, device_mesh=mesh, placements=[Shard(0)])
        x.numpy()
        if pids is None:
            pids = worker_pids()
        compiles = dtorch._C.compile_count()
        w0 = [process_cpu_ns(p) for p in pids]
        f0 = [process_faults(p) for p in pids]
        cf0 = process_faults(os.getpid())
        t, c = time.perf_counter(), time.process_time()
        y = x
        for _ in range(n):
            y = y + x
        y.numpy()
        miss_wall.append((time.perf_counter() - t) / n * 1e6)
        miss_cpu.append((time.process_time() - c) / n * 1e6)
        client_faults.append((process_faults(os.getpid()) - cf0) / n)
        if pids:
            worker_cpu.append(sum(process_cpu_ns(p) - w for p, w in zip(pids, w0))
                              / len(pids) / n / 1e3)
            worker_faults.append(sum(process_faults(p) - f for p, f in zip(pids, f0))
                                 / len(pids) / n)
        assert dtorch._C.compile_count() == compiles + 1, "expected one compile"
        for hits in (first_hit_wall, steady_hit_wall):
            t = time.perf_counter()
            y = x
            for _ in range(n):
                y = y + x
            y.numpy()
            hits.append((time.perf_counter() - t) / n * 1e6)
            assert dtorch._C.compile_count() == compiles + 1, "expected a cache hit"
    dtorch.shutdown()

    def summary(values):
        values = sorted(values)
        return {"min": values[0], "median": values[len(values) // 2]}

    result = {"ops": n, "ranks": 4, "backend": args.backend, "reps": args.reps,
              "miss_wall_us_per_op": summary(miss_wall),
              "miss_process_cpu_us_per_op": summary(miss_cpu),
              "first_hit_wall_us_per_op": summary(first_hit_wall),
              "steady_hit_wall_us_per_op": summary(steady_hit_wall),
              "miss_client_faults_per_op": summary(client_faults),
              "worker_processes": len(pids or []),
              "load_average": os.getloadavg()}
    if worker_cpu:
        result["miss_worker_cpu_us_per_op"] = summary(worker_cpu)
        result["miss_worker_faults_per_op"] = summary(worker_faults)
    print(f"chain of {n} adds on 4 ranks ({args.backend}), us per op (min / median of {args.reps}):")
    for key in ("miss_wall_us_per_op", "miss_process_cpu_us_per_op", "miss_worker_cpu_us_per_op",
                "miss_client_faults_per_op", "miss_worker_faults_per_op",
                "first_hit_wall_us_per_op", "steady_hit_wall_us_per_op"):
        if key in result:
            print(f"  {key:28s} {result[key]['min']:8.2f} {result[key]['median']:8.2f}")
    print("  load average %.1f %.1f %.1f" % result["load_average"])
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
