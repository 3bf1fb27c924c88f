"""The peers of bench/fusion_bench.py, run in build/torch-venv:
`python bench/fusion_peers.py KIND 'JSON'` prints one JSON object. KIND:
jax_jit (the N-op chain jitted over `world` host devices, cached) or
jax_eager (the same chain op by op on arrays sharded over the devices)."""
import json
import os
import statistics
import sys
import time


def chain(x, n, a, b):
    y = x
    for i in range(n):
        y = y * a if i % 2 == 0 else y + b
    return y


def setup(world):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={world}")
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    mesh = Mesh(jax.devices()[:world], ("x",))
    x = jax.device_put(jnp.ones((64, 16), jnp.float32), NamedSharding(mesh, PartitionSpec("x")))
    return jax, x


def jax_jit(spec):
    jax, x = setup(spec["world"])
    n, reps = spec["ops"], spec["reps"]
    f = jax.jit(lambda v: chain(v, n, 1.0 + 1e-7, 1e-4))
    jax.block_until_ready(f(x))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.device_get(f(x))
        times.append(time.perf_counter() - t)
    return {"cached_us_per_op": statistics.median(times) / n * 1e6, "jax": jax.__version__}


def jax_eager(spec):
    jax, x = setup(spec["world"])
    n, reps = spec["ops"], max(1, spec["reps"] // 2)
    jax.device_get(chain(x, 64, 1.0 + 1e-7, 1e-4))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.device_get(chain(x, n, 1.0 + 1e-7, 1e-4))
        times.append(time.perf_counter() - t)
    return {"us_per_op": statistics.median(times) / n * 1e6, "jax": jax.__version__}


KINDS = {"jax_jit": jax_jit, "jax_eager": jax_eager}

if __name__ == "__main__":
    print(json.dumps(KINDS[sys.argv[1]](json.loads(sys.argv[2]))))
