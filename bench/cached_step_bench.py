"""The controller's cost of a cached step, and the client + controller cost
per op of a cached elementwise chain.

    python3 bench/cached_step_bench.py            # both tables
    python3 bench/cached_step_bench.py simulated  # an MLP step on simulated workers
    python3 bench/cached_step_bench.py chain      # 2,000-op chain on 4 real ranks

`simulated`: a small MLP training step (forward, backward, SGD update; the
input and target drawn on the workers, so a step moves no data) on a 1-D
mesh of 8, 64, 512 and 4,096 simulated ranks, each in a fresh process. It
reports per step the controller's lookup + dispatch time of the cached
segment (`controller_stats()["hit_seconds"]`), the requests it handled (the
run, the frees of dropped values, the synchronize) and its busy time over
all of them (`busy_seconds`), the compile time of the first step, and the
wall time of a whole step (client, controller and frees; the
simulated workers cost nothing). `chain`: 2,000 multiplications by a Python
number on a (4,) mesh, fetched: the first time (compile) and cached.
Writes bench/results/cached_step.json.
"""
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

SIMULATED_STEP = r"""
import json, sys, time
import dtorch, dtorch.nn as nn
from dtorch import Replicate, Shard
world = int(sys.argv[1])
dtorch.init(world_size=world, backend="simulated", cache_dir="")
mesh = dtorch.init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
model = nn.Sequential(nn.Linear(32, 64, device_mesh=mesh), nn.Tanh(),
                      nn.Linear(64, 64, device_mesh=mesh), nn.Tanh(),
                      nn.Linear(64, 8, device_mesh=mesh))
opt = dtorch.optim.SGD(model.parameters(), lr=0.01)
def step():
    x = dtorch.randn(4 * world, 32, device_mesh=mesh, placements=[Shard(0)])
    t = dtorch.randn(4 * world, 8, device_mesh=mesh, placements=[Shard(0)])
    loss = ((model(x) - t) ** 2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    dtorch.synchronize()  # the step's cut (simulated workers answer at once)
    return loss
t0 = time.perf_counter()
for _ in range(3):
    step()
first = time.perf_counter() - t0
warm = dtorch._C.controller_stats()
steps = 50 if world < 4096 else 20
t0 = time.perf_counter()
for _ in range(steps):
    step()
dtorch.synchronize()
wall = (time.perf_counter() - t0) / steps
s = dtorch._C.controller_stats()
hits = s["memory_hits"] - warm["memory_hits"]
segments = s["segments"] - warm["segments"]
print(json.dumps({
    "world": world, "segments_per_step": segments / steps,
    "compiles_in_steady_state": s["compiles"] - warm["compiles"],
    "controller_ms_per_step": 1e3 * (s["hit_seconds"] - warm["hit_seconds"]) / steps,
    "controller_busy_ms_per_step": 1e3 * (s["busy_seconds"] - warm["busy_seconds"]) / steps,
    "requests_per_step": (s["requests"] - warm["requests"]) / steps,
    "wall_ms_per_step": 1e3 * wall, "first_3_steps_s": first,
    "compile_s": warm["compile_seconds"], "compiles": warm["compiles"]}))
"""

CHAIN = r"""
import json, time, numpy as np
import dtorch
from dtorch import Shard
dtorch.init(world_size=4, backend="cluster", num_processes=2, cache_dir="")
mesh = dtorch.init_device_mesh("cpu", (4,))
x = dtorch.ones(64, 64, device_mesh=mesh, placements=[Shard(0)])
dtorch.synchronize()
N = 2000
def chain():
    y = x
    for _ in range(N):
        y = y * 1.0001
    return y.numpy()
t0 = time.perf_counter(); chain(); first = time.perf_counter() - t0
times = []
for _ in range(10):
    t0 = time.perf_counter(); chain(); times.append(time.perf_counter() - t0)
t0 = time.perf_counter()
y = x
for _ in range(N):
    y = y * 1.0001
client = time.perf_counter() - t0
y.numpy()
print(json.dumps({"ops": N, "first_us_per_op": 1e6 * first / N,
                  "cached_us_per_op": 1e6 * min(times) / N,
                  "cached_median_us_per_op": 1e6 * sorted(times)[len(times) // 2] / N,
                  "client_record_us_per_op": 1e6 * client / N,
                  "compile_s": dtorch._C.controller_stats()["compile_seconds"]}))
"""


def run(script, *args):
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                         timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(out.stdout + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv):
    which = argv[1:] or ["simulated", "chain"]
    results = {}
    if "simulated" in which:
        rows = [run(SIMULATED_STEP, str(w)) for w in (8, 64, 512, 4096)]
        results["simulated_mlp_step"] = rows
        print(f"{'ranks':>6} {'segments':>8} {'lookup+dispatch ms':>19} {'requests':>8} "
              f"{'controller busy ms':>19} {'wall ms/step':>13} {'compile s':>10}")
        for r in rows:
            print(f"{r['world']:>6} {r['segments_per_step']:>8.1f} "
                  f"{r['controller_ms_per_step']:>19.3f} {r['requests_per_step']:>8.1f} "
                  f"{r['controller_busy_ms_per_step']:>19.3f} {r['wall_ms_per_step']:>13.3f} "
                  f"{r['compile_s']:>10.2f}")
    if "chain" in which:
        r = run(CHAIN)
        results["chain_4_ranks"] = r
        print(f"2,000-op chain on 4 ranks: first {r['first_us_per_op']:.1f} us/op, cached "
              f"{r['cached_us_per_op']:.2f} us/op (median {r['cached_median_us_per_op']:.2f}; "
              f"recording alone {r['client_record_us_per_op']:.2f})")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    path = os.path.join(HERE, "results", "cached_step.json")
    if os.path.exists(path):  # keep the table that was not run this time
        with open(path) as f:
            results = {**json.load(f), **results}
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv)
