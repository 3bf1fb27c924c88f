"""Client cost per op: a chain of N small elementwise ops issued through
dtorch (the client returns without running anything) next to the same chain
in torch eager on one process, in the same run, reported as a ratio.

    python3 bench/client_bench.py [--ops 100000] [--json bench/results/client_bench.json]

Not run by the tests. Without torch installed, numpy eager stands in as the
peer and the table says so.
"""
import argparse
import json
import os
import time

import numpy as np


def time_chain(step, x, n):
    """Wall time per op in us (and the calling thread's CPU time per op)."""
    t, c = time.perf_counter(), time.thread_time()
    for _ in range(n):
        x = step(x)
    wall = (time.perf_counter() - t) / n * 1e6
    time_chain.cpu_us = (time.thread_time() - c) / n * 1e6
    return wall, x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=100_000)
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results",
                                                   "client_bench.json"))
    ap.add_argument("--backend", default="cluster")
    args = ap.parse_args()

    import dtorch
    from dtorch import Shard
    dtorch.init(world_size=4, backend=args.backend)
    mesh = dtorch.init_device_mesh("cpu", (4,))
    x = dtorch.ones(4, 4, device_mesh=mesh, placements=[Shard(0)])
    w = dtorch.ones(4, 4, device_mesh=mesh, placements=[Shard(1)]) * 0.25
    rows = []
    for name, step in [("mul by scalar", lambda y: y * 1.0001),
                       ("add tensor", lambda y: y + x),
                       ("relu", lambda y: y.relu()),
                       ("matmul", lambda y: y @ w)]:
        time_chain(step, x, 1000)  # warm up
        dtorch.synchronize()
        us, y = time_chain(step, x, args.ops)
        cpu = time_chain.cpu_us
        t = time.perf_counter()
        y.numpy()
        drain = time.perf_counter() - t
        rows.append({"op": name, "dtorch_us_per_op": us, "dtorch_client_cpu_us_per_op": cpu,
                     "dtorch_drain_s": drain})

    try:
        import torch
        peer = "torch eager"
        tx = torch.ones(4, 4)
        tw = torch.full((4, 4), 0.25)
        steps = [lambda y: y * 1.0001, lambda y: y + tx, lambda y: y.relu(), lambda y: y @ tw]
        with torch.no_grad():
            for row, step in zip(rows, steps):
                time_chain(step, tx, 1000)
                row["peer_us_per_op"], _ = time_chain(step, tx, args.ops)
    except ImportError:
        peer = "numpy eager (torch not installed)"
        nx = np.ones((4, 4), np.float32)
        nw = np.full((4, 4), 0.25, np.float32)
        steps = [lambda y: y * np.float32(1.0001), lambda y: y + nx, lambda y: np.maximum(y, 0),
                 lambda y: y @ nw]
        for row, step in zip(rows, steps):
            time_chain(step, nx, 1000)
            row["peer_us_per_op"], _ = time_chain(step, nx, args.ops)
    for row in rows:
        row["ratio"] = row["dtorch_us_per_op"] / row["peer_us_per_op"]

    print(f"client cost per op, chain of {args.ops} ops on a 4x4 tensor; peer: {peer}")
    print("dtorch: wall time of the issuing loop, and its thread's CPU time (the controller"
          " compiles and the workers run concurrently on the same cores)")
    print(f"{'op':<16}{'dtorch us/op':>14}{'client cpu':>12}{'peer us/op':>12}{'ratio':>8}"
          f"{'drain s':>10}")
    for r in rows:
        print(f"{r['op']:<16}{r['dtorch_us_per_op']:>14.2f}{r['dtorch_client_cpu_us_per_op']:>12.2f}"
              f"{r['peer_us_per_op']:>12.2f}{r['ratio']:>8.2f}{r['dtorch_drain_s']:>10.2f}")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"ops": args.ops, "peer": peer, "rows": rows}, f, indent=2)
    dtorch.shutdown()


if __name__ == "__main__":
    main()
