"""`make demo`: a short distributed computation on a 2x2 mesh of 4 ranks in 2
worker processes, checked against numpy, with the collectives DTorch chose."""
import re
import time

import numpy as np

import dtorch
from dtorch import Replicate, Shard

t0 = time.time()
mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
print(f"cluster: {dtorch._C.world_size()} ranks on a {mesh.shape} mesh "
      f"(started in {time.time() - t0:.2f} s)")

dtorch.manual_seed(0)
# A batch sharded on "dp", a two-layer MLP sharded on "tp" (colwise, rowwise).
x = dtorch.randn(16, 32, device_mesh=mesh, placements=[Shard(0), Replicate()])
w1 = dtorch.randn(32, 64, device_mesh=mesh, placements=[Replicate(), Shard(1)])
w2 = dtorch.randn(64, 8, device_mesh=mesh, placements=[Replicate(), Shard(0)])

h = (x @ w1).relu()
y = h @ w2                       # contracting the sharded dim: a partial sum
loss = (y * y).mean()

print(f"h: {h.shape} {h.placements}")
print(f"y: {y.shape} {y.placements}")
print(f"loss placements: {loss.placements}")

value = loss.item()              # the first value fetch runs the segment
xn, w1n, w2n = x.numpy(), w1.numpy(), w2.numpy()
ref = float(((np.maximum(xn @ w1n, 0) @ w2n) ** 2).mean())
print(f"loss = {value:.6f}   numpy: {ref:.6f}   rel. error {abs(value - ref) / abs(ref):.2e}")

ir = dtorch.last_ir("redistributed")
steps = re.findall(r"dtensor\.(all_reduce|reduce_scatter|all_gather|all_to_all|local_slice|to_partial) ", ir)
print("collectives and local layout steps DTorch inserted:", ", ".join(steps) or "none")
for line in ir.splitlines():
    if any(f"dtensor.{s} " in line for s in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")):
        print("   ", line.strip()[:160])
dtorch.shutdown()
