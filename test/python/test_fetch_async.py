"""Fetches that do not wait (numpy_async, item_async, await) and the
segment cuts of a training loop (optimizer.step() ends its segment)."""
import asyncio
import concurrent.futures
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import assert_close, backend_name, subprocess_env
from dtorch import Replicate, Shard


def test_numpy_async_gives_what_numpy_gives(dt, meshes):
    m = meshes["2x2"]
    a = dt.tensor(np.arange(48, dtype=np.float32).reshape(6, 8), device_mesh=m,
                  placements=[Shard(0), Shard(1)])
    b = dt.tensor(np.linspace(-1, 1, 40, dtype=np.float32).reshape(8, 5), device_mesh=m,
                  placements=[Replicate(), Shard(0)])
    cases = [a * 2 - 1, a @ b, (a @ b).sum(0), a.long() * 3, a > 20.0, (a @ b).relu()]
    futures = [c.numpy_async() for c in cases]
    assert all(isinstance(f, concurrent.futures.Future) for f in futures)
    for c, f in zip(cases, futures):
        got, want = f.result(timeout=60), c.numpy()
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert_close(futures[1].result(), a.numpy() @ b.numpy(), tol=1e-4)


def test_many_fetches_in_flight_while_the_client_records(dt, meshes):
    x = dt.ones(8, 4, device_mesh=meshes["4"], placements=[Shard(0)])
    futures, y = [], x
    for i in range(300):
        y = y * 1.01 + 0.5
        # A temporary: the tensor is dropped at once, its free follows the fetch.
        futures.append((y.sum() * 1.0).numpy_async())
    want, values = 1.0, []
    for f in futures:
        want = want * 1.01 + 0.5
        values.append(float(f.result(timeout=120)))
        assert_close(values[-1], 32 * want, tol=1e-3 * 32 * want)
    assert values == sorted(values)


def test_item_async(dt, meshes):
    x = dt.tensor(np.array([1.5, 2.5, 3.0, 4.0], dtype=np.float32), device_mesh=meshes["4"],
                  placements=[Shard(0)])
    f = x.sum().item_async()
    assert f.result(timeout=60) == 11.0 and isinstance(f.result(), float)
    assert x.long().max().item_async().result(timeout=60) == 4
    with pytest.raises(ValueError, match="one element"):
        x.item_async()


def test_await_in_asyncio(dt, meshes):
    x = dt.arange(16, device_mesh=meshes["4"], placements=[Shard(0)]).float()

    async def main():
        first = await (x * 2)
        rest = await asyncio.gather(*[(x + k).sum() for k in range(5)])  # awaitables
        return first, rest

    first, rest = asyncio.run(main())
    np.testing.assert_array_equal(first, np.arange(16) * 2.0)
    assert [float(v) for v in rest] == [120.0 + 16 * k for k in range(5)]


def test_await_inside_a_coroutine_with_other_tasks(dt, meshes):
    w = dt.ones(4, 4, device_mesh=meshes["2x2"], placements=[Shard(0), Replicate()])
    ticks = []

    async def ticker():
        for i in range(3):
            ticks.append(i)
            await asyncio.sleep(0)

    async def fetch():
        return await (w @ w)

    async def main():
        value, _ = await asyncio.gather(fetch(), ticker())
        return value

    np.testing.assert_array_equal(asyncio.run(main()), np.full((4, 4), 4.0))
    assert ticks == [0, 1, 2]


def test_a_worker_error_arrives_as_the_future_exception(dt, meshes):
    a = dt.tensor(np.array([1, 2, 3, 4]), device_mesh=meshes["4"])
    b = dt.tensor(np.array([1, -1, 3, 4]), device_mesh=meshes["4"])
    f = (a ** b).numpy_async()  # int64 power with a negative exponent fails on a worker
    err = f.exception(timeout=60)
    assert isinstance(err, dt.WorkerError) and "negative exponent" in str(err)
    with pytest.raises(dt.WorkerError):
        f.result()
    # The error was reported once; the session goes on.
    dt.synchronize()
    assert (a + b).numpy_async().result(timeout=60).tolist() == [2, 1, 6, 8]


def test_a_tensor_fetched_async_is_used_after_the_cut(dt, meshes):
    x = dt.full((4, 6), 2.0, device_mesh=meshes["2x2"], placements=[Shard(0), Shard(1)])
    y = x * 3
    f = y.numpy_async()
    assert dt._C.pending_ops() == 0  # the fetch cut the segment that makes y
    z = (y + 1).sum()  # y is an argument of the next segment
    g = y.numpy_async()  # the same tensor again
    assert dt._C.pending_ops() > 0  # y is on the workers: nothing was cut
    np.testing.assert_array_equal(f.result(timeout=60), np.full((4, 6), 6.0))
    np.testing.assert_array_equal(g.result(timeout=60), np.full((4, 6), 6.0))
    assert z.item() == 7.0 * 24


def test_fetching_an_earlier_value_leaves_later_ops_pending(dt, meshes):
    a = dt.ones(8, device_mesh=meshes["4"], placements=[Shard(0)]) * 5
    a.numpy()
    b = a
    for _ in range(50):
        b = b + 1
    pending = dt._C.pending_ops()
    assert pending >= 50
    # numpy() of a value already on the workers waits only for it: the ops
    # recorded after it are not cut, compiled or run.
    assert a.numpy().tolist() == [5.0] * 8
    assert a.local_shards()[0].tolist() == [5.0, 5.0]
    assert dt._C.pending_ops() == pending
    assert b.numpy().tolist() == [55.0] * 8
    assert dt._C.pending_ops() == 0


def _train(dt, mesh, opt_name, steps, fetch):
    rng = np.random.default_rng(3)
    model = dt.nn.Sequential(dt.nn.Linear(12, 16, device_mesh=mesh), dt.nn.ReLU(),
                             dt.nn.Linear(16, 3, device_mesh=mesh))
    for p, v in zip(model.parameters(), [rng.standard_normal(tuple(p.shape)).astype(np.float32)
                                         * 0.3 for p in model.parameters()]):
        p._assign(dt.tensor(v, device_mesh=mesh, placements=p.placements))
    opt = (dt.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if opt_name == "sgd"
           else dt.optim.AdamW(model.parameters(), lr=0.01))
    xs = dt.tensor(rng.standard_normal((10, 12)).astype(np.float32), device_mesh=mesh,
                   placements=[Shard(0), Replicate()])
    ys = dt.tensor(rng.integers(0, 3, size=10), device_mesh=mesh,
                   placements=[Shard(0), Replicate()])
    compiles, pending, losses = [], [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = dt.nn.functional.cross_entropy(model(xs), ys)
        loss.backward()
        opt.step()
        pending.append(dt._C.pending_ops())
        # The controller compiles on its own thread: count once it is done
        # (with nothing pending, synchronize() cuts nothing).
        dt.synchronize()
        compiles.append(dt._C.compile_count())
        if fetch == "item":
            losses.append(loss.item())
        elif fetch == "async":
            losses.append(loss.numpy_async())
    losses = [f.result(timeout=60) if hasattr(f, "result") else f for f in losses]
    return [p.numpy() for p in model.parameters()], compiles, pending, losses


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_a_loop_that_never_fetches_compiles_nothing_after_step_two(dt, meshes, opt_name):
    mesh = meshes["2x2"]
    dt.synchronize()
    params, compiles, pending, _ = _train(dt, mesh, opt_name, 8, fetch=None)
    assert pending == [0] * 8  # every step ended its segment
    assert compiles[2:] == [compiles[1]] * 6, compiles
    # The same loop cut by a fetch every step computes the same parameters.
    want, compiles_item, _, losses = _train(dt, mesh, opt_name, 8, fetch="item")
    assert compiles_item[2:] == [compiles_item[1]] * 6, compiles_item
    for got, ref in zip(params, want):
        assert_close(got, ref, tol=1e-5)
    # ... and so does the one that logs every loss without waiting.
    again, compiles_async, _, async_losses = _train(dt, mesh, opt_name, 8, fetch="async")
    assert compiles_async[2:] == [compiles_async[1]] * 6, compiles_async
    for got, ref in zip(again, want):
        assert_close(got, ref, tol=1e-5)
    assert_close(np.array(async_losses, dtype=np.float64), np.array(losses), tol=1e-5)


@pytest.mark.skipif(backend_name() != "cluster", reason="needs worker processes")
def test_a_dead_worker_fails_the_future_and_not_the_caller():
    script = textwrap.dedent("""
        import os, signal, subprocess
        import dtorch
        from dtorch import Shard
        mesh = dtorch.init_device_mesh("cpu", (4,))
        x = dtorch.ones(32, 32, device_mesh=mesh, placements=[Shard(0)])
        print("ok", (x @ x).sum().item_async().result(timeout=30))
        kids = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "dtorch-worker"],
                              capture_output=True, text=True).stdout.split()
        os.kill(max(int(k) for k in kids), signal.SIGKILL)
        y = x
        for _ in range(20):
            y = (y @ x) * 0.01
        fut = y.numpy_async()  # returns at once, although a worker is dead
        print("issued")
        err = fut.exception(timeout=30)
        print("error", type(err).__name__, isinstance(err, dtorch.WorkerError))
        dtorch.shutdown()
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=90, cwd="/", env=subprocess_env())
    out = r.stdout
    assert "ok 32768.0" in out, out + r.stderr
    assert "issued" in out, out + r.stderr
    assert "error" in out and out.split("error", 1)[1].split()[1] == "True", out + r.stderr


def test_a_fetch_that_cannot_start_raises_at_the_call(dt, meshes):
    lin = dt.nn.Linear(4, 3, device="meta", device_mesh=meshes["4"])
    with pytest.raises(ValueError, match="meta tensor has no value"):
        lin.weight.numpy_async()
    # Nothing was queued: the session goes on.
    assert (dt.ones(4, device_mesh=meshes["4"]) * 2).sum().item_async().result(timeout=60) == 8.0
