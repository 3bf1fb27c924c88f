"""The peers of bench/eager_graph_bench.py, run in the peers' virtual
environment (bench/setup_torch.sh makes build/torch-venv) as subprocesses:

    build/torch-venv/bin/python bench/eager_graph_peers.py KIND '{"ops": 2000, ...}'

prints one JSON object on its last line. KIND:
  dtensor_chain  torch DTensor on 4 gloo processes: the N-op elementwise
                 chain (the same ops and constants as dtorch's) to its full
                 tensor, per op
  jax_chain      jax.jit of the same chain over 4 host CPU devices (sharded
                 like dtorch's), compile + run per op, and the cached run
  torch_mlp      torch eager forward + backward + AdamW step of the MLP of
                 measurement (4): time per step and the aten ops it runs
"""
import json
import os
import statistics
import sys
import tempfile
import time


def chain_constants(rep):
    """As eager_graph_children.chain_constants: new constants per repetition."""
    return 1.0 + (rep + 1) * 1e-7, (rep + 1) * 1e-4


def chain(x, n, a, b):
    y = x
    for i in range(n):
        y = y * a if i % 2 == 0 else y + b
    return y


def _dtensor_worker(rank, world, init_file, spec, out_file):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    x = distribute_tensor(torch.ones(64, 16), mesh, [Shard(0)])
    n, reps = spec["ops"], spec["reps"]
    chain(x, 64, 1.5, 0.5).full_tensor()  # warm up
    times = []
    for rep in range(reps):
        a, b = chain_constants(rep)
        dist.barrier()
        t = time.perf_counter()
        chain(x, n, a, b).full_tensor()
        times.append(time.perf_counter() - t)
    if rank == 0:
        with open(out_file, "w") as f:
            json.dump({"us_per_op": statistics.median(times) / n * 1e6, "world": world,
                       "torch": torch.__version__}, f)
    dist.barrier()
    dist.destroy_process_group()


def dtensor_chain(spec):
    import torch.multiprocessing as mp
    world = spec.get("world", 4)
    with tempfile.TemporaryDirectory() as d:
        init_file, out_file = os.path.join(d, "init"), os.path.join(d, "out.json")
        mp.spawn(_dtensor_worker, args=(world, init_file, spec, out_file), nprocs=world,
                 join=True)
        with open(out_file) as f:
            return json.load(f)


def jax_chain(spec):
    world = spec.get("world", 4)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={world}")
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(jax.devices()[:world], ("x",))
    x = jax.device_put(jnp.ones((64, 16), jnp.float32), NamedSharding(mesh, PartitionSpec("x")))
    n, reps = spec["ops"], spec["reps"]

    def compiled(a, b):
        return jax.jit(lambda v: chain(v, n, a, b))  # constants baked in: a new program

    jax.block_until_ready(jax.jit(lambda v: chain(v, 64, 1.5, 0.5))(x))  # warm up
    misses = []
    for rep in range(reps):
        a, b = chain_constants(rep)
        f = compiled(a, b)
        t = time.perf_counter()
        jax.block_until_ready(f(x))
        misses.append(time.perf_counter() - t)
    hits = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(f(x))
        hits.append(time.perf_counter() - t)
    return {"compile_run_us_per_op": statistics.median(misses) / n * 1e6,
            "cached_us_per_op": statistics.median(hits) / n * 1e6, "world": world,
            "jax": jax.__version__}


def torch_mlp(spec):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode
    torch.set_num_threads(1)
    cfg = spec["mlp"]
    dims = [cfg["d_in"]] + [cfg["hidden"]] * cfg["layers"] + [cfg["classes"]]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(cfg["batch"], cfg["d_in"], generator=g)
    y = torch.randint(0, cfg["classes"], (cfg["batch"],), generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    class CountOps(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            CountOps.count += 1
            return func(*args, **(kwargs or {}))

    for _ in range(5):
        step()
    with CountOps():
        step()
    times = []
    for _ in range(spec["steps"]):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    wall = statistics.median(times)
    return {"step_us": wall * 1e6, "aten_ops_per_step": CountOps.count,
            "us_per_aten_op": wall / CountOps.count * 1e6, "torch": torch.__version__}


KINDS = {"dtensor_chain": dtensor_chain, "jax_chain": jax_chain, "torch_mlp": torch_mlp}

if __name__ == "__main__":
    kind, spec = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(KINDS[kind](spec)))
