"""The program cache: a cached step is one lookup of the segment's structural
hash (built while recording) and one run message per worker process carrying
the step's random seeds; compiled programs persist on disk across processes;
the simulated backend runs the controller alone at any world size."""
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import assert_close, subprocess_env
from dtorch import Replicate, Shard

ALL_BITS = 2**64 - 1


def _segment(dt, x, scale):
    """One segment (cut by the fetch): a structure no other test uses."""
    y = (x * scale).tanh() + x
    return y.numpy()


def test_same_structure_with_new_seeds_hits_and_draws_new_numbers(dt, meshes):
    m = meshes["2x2"]
    dt.synchronize()

    def step():
        r = dt.randn(6, 10, device_mesh=m, placements=[Shard(0), Replicate()])
        return (r * 3.0 + 1.0).numpy()

    first = step()
    before = dt._C.compile_count()
    draws = [step() for _ in range(3)]
    assert dt._C.compile_count() == before  # fresh seeds, same program
    assert not np.array_equal(draws[0], draws[1])
    assert not np.array_equal(first, draws[0])
    # The seeds travel with the run: a manual seed replays the same numbers
    # through the cached program, whatever the placements.
    dt.manual_seed(1234)
    a = step()
    dt.manual_seed(1234)
    b = step()
    assert dt._C.compile_count() == before
    assert np.array_equal(a, b)
    dt.manual_seed(1234)
    full = (dt.randn(6, 10, device_mesh=m, placements=[Replicate(), Replicate()]) * 3.0 + 1.0).numpy()
    assert_close(a, full)


def test_shape_placement_scalar_and_mesh_ranks_are_part_of_the_key(dt, meshes):
    base = np.arange(48, dtype=np.float32).reshape(8, 6) / 48
    m = meshes["2x2"]
    x = dt.tensor(base, device_mesh=m, placements=[Shard(0), Replicate()])
    dt.synchronize()
    _segment(dt, x, 0.37)
    before = dt._C.compile_count()
    assert_close(_segment(dt, x, 0.37), np.tanh(base * 0.37) + base)
    assert dt._C.compile_count() == before  # hit

    cases = [
        ("shape", dt.tensor(base[:4], device_mesh=m, placements=[Shard(0), Replicate()]), 0.37,
         np.tanh(base[:4] * 0.37) + base[:4]),
        ("placement", dt.tensor(base, device_mesh=m, placements=[Replicate(), Shard(1)]), 0.37,
         np.tanh(base * 0.37) + base),
        ("scalar", x, 0.41, np.tanh(base * 0.41) + base),
    ]
    # The same shape over other ranks (reversed): other programs, other peers.
    rev = dt.DeviceMesh("cpu", [[3, 2], [1, 0]])
    cases.append(("mesh ranks", dt.tensor(base, device_mesh=rev, placements=[Shard(0), Replicate()]),
                  0.37, np.tanh(base * 0.37) + base))
    for what, t, scale, want in cases:
        dt.synchronize()
        before = dt._C.compile_count()
        assert_close(_segment(dt, t, scale), want)
        assert dt._C.compile_count() == before + 1, what
        assert_close(_segment(dt, t, scale), want)
        assert dt._C.compile_count() == before + 1, what + " (second time: a hit)"


def test_colliding_hashes_are_told_apart_by_the_structure(dt, meshes):
    m = meshes["4"]
    base = np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5)
    x = dt.tensor(base, device_mesh=m, placements=[Shard(0)])
    dt.synchronize()
    dt._C._set_segment_hash_mask(0)  # every segment has hash 0
    try:
        before = dt._C.compile_count()
        a1 = (x.exp() * 0.25).numpy()
        b1 = (x.sin() - 0.125).numpy()
        c1 = (x.exp() * 0.5).numpy()  # differs from the first by a scalar only
        assert dt._C.compile_count() == before + 3
        for _ in range(2):
            assert_close((x.exp() * 0.25).numpy(), a1)
            assert_close((x.sin() - 0.125).numpy(), b1)
            assert_close((x.exp() * 0.5).numpy(), c1)
        assert dt._C.compile_count() == before + 3
        assert_close(a1, np.exp(base) * 0.25)
        assert_close(b1, np.sin(base) - 0.125)
        assert_close(c1, np.exp(base) * 0.5)
    finally:
        dt._C._set_segment_hash_mask(ALL_BITS)


def test_a_cached_step_sends_one_run_message_per_worker_process(dt, meshes):
    if dt._C.messages_sent() == 0:
        pytest.skip("the in-process backend sends no messages")
    m = meshes["2x2"]  # 4 ranks on 2 worker processes
    x = dt.ones(8, 8, device_mesh=m, placements=[Shard(0), Shard(1)])
    dt.synchronize()
    z = x * 1.5
    dt.synchronize()  # compiled and uploaded
    # The segment's second run compiles it again with its generated kernel
    # and uploads that (the loop also holds if that ever moves later).
    for _ in range(500):
        z = x * 1.5
        dt.synchronize()
        if dt._C.controller_stats()["fused_recompiles"] >= 1:
            break
        time.sleep(0.01)
    before = dt._C.messages_sent()
    z2 = x * 1.5
    dt.synchronize()
    assert dt._C.messages_sent() - before == 2 + 2  # a run and a sync per process
    before = dt._C.messages_sent()
    del z, z2
    dt.synchronize()
    # Per process: the frees made since the last request go as one message
    # (DTORCH_BATCH_FREES=0: a free per tensor), then a sync.
    frees = 2 if os.environ.get("DTORCH_BATCH_FREES") == "0" else 1
    assert dt._C.messages_sent() - before == 2 * frees + 2
    assert_close((x * 1.5).numpy(), np.full((8, 8), 1.5))


def _run(script, *args, env=None):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args],
                         env=env or subprocess_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


SIMULATED = """
    import sys, numpy as np, dtorch
    from dtorch import Shard, Replicate
    world = int(sys.argv[1])
    dtorch.init(world_size=world, backend="simulated")
    side = int(round(world ** 0.5))
    mesh = dtorch.init_device_mesh("cpu", (side, world // side), mesh_dim_names=("dp", "tp"))
    w = dtorch.zeros(16, 4 * side, device_mesh=mesh, placements=[Replicate(), Shard(1)])
    dtorch.synchronize()
    def step():
        x = dtorch.randn(2 * side, 16, device_mesh=mesh, placements=[Shard(0), Replicate()])
        return (x @ w).relu().sum(1)
    step().numpy()
    # The second run switches to the fused programs (relu and the row sum
    # make one generated kernel), one upload more: measure the third.
    step().numpy()
    dtorch.synchronize()  # the free of the dropped result is counted before
    compiles = dtorch._C.compile_count()
    sent = dtorch._C.messages_sent()
    y = step()
    dtorch.synchronize()
    per_step = dtorch._C.messages_sent() - sent
    value = y.numpy()
    stats = dtorch._C.controller_stats()
    pieces = dtorch._C.fetch_local(y)  # zeros of each rank's local shape
    shapes = {tuple(np.asarray(p).shape) for p in pieces.values()}
    print(compiles, dtorch._C.compile_count(), per_step, "x".join(map(str, value.shape)),
          float(np.abs(value).sum()), stats["memory_hits"], len(pieces),
          ";".join(sorted("x".join(map(str, s)) for s in shapes)))
"""


@pytest.mark.parametrize("world", [64, 4096])
def test_simulated_backend_at_large_world_sizes(world):
    fields = _run(SIMULATED, str(world)).split()
    compiles, compiles_after, per_step = int(fields[0]), int(fields[1]), int(fields[2])
    assert compiles >= 1 and compiles_after == compiles  # the second step hit the cache
    processes = (world + 7) // 8
    assert per_step == 2 * processes  # one run and one sync per simulated process
    side = int(round(world ** 0.5))
    assert fields[3] == f"{2 * side}"  # fetch: zeros of the right global shape
    assert float(fields[4]) == 0.0
    assert int(fields[5]) >= 1
    assert int(fields[6]) == world  # a piece per rank, of its local shape: 2 rows
    assert fields[7] == "2"


def test_simulated_backend_answers_zeros_of_the_local_shape():
    out = _run("""
        import numpy as np, dtorch
        from dtorch import Shard, Partial
        dtorch.init(world_size=8, backend="simulated")
        mesh = dtorch.init_device_mesh("cpu", (8,))
        x = dtorch.ones(19, 3, device_mesh=mesh, placements=[Shard(0)])  # uneven
        y = x.sum(0)
        pieces = dtorch._C.fetch_local(x)
        rows = [np.asarray(pieces[r]).shape for r in range(8)]
        print(y.numpy().tolist(), rows, float(np.abs(np.asarray(pieces[0])).sum()))
    """)
    # torch.chunk's pieces: 3 rows on ranks 0-5, then 1, then 0.
    assert out.strip() == ("[0.0, 0.0, 0.0] [(3, 3), (3, 3), (3, 3), (3, 3), (3, 3), (3, 3), "
                           "(1, 3), (0, 3)] 0.0")


DISK = """
    import sys, numpy as np, dtorch
    from dtorch import Shard, Replicate
    dtorch.init(world_size=4, backend="inprocess", cache_dir=sys.argv[1])
    mesh = dtorch.init_device_mesh("cpu", (2, 2))
    dtorch.manual_seed(7)
    x = dtorch.randn(6, 8, device_mesh=mesh, placements=[Shard(0), Shard(1)])
    y = ((x @ x.t()) * 0.5 + 1.0).numpy()
    stats = dtorch._C.controller_stats()
    print(dtorch._C.compile_count(), stats["disk_hits"], repr(y.sum()), end=" ")
    print("rank.kernel" in dtorch.last_ir("rank"), dtorch._C.compile_count())
"""


def test_programs_persist_on_disk_across_processes(tmp_path):
    first = _run(DISK, str(tmp_path)).split()
    assert int(first[0]) >= 1 and int(first[1]) == 0
    files = sorted((tmp_path / "programs").glob("*.dtprog"))
    assert len(files) == int(first[0])
    # A second process compiles nothing: every segment comes from the disk,
    # with the same values; its IR is compiled again only when asked.
    second = _run(DISK, str(tmp_path)).split()
    assert int(second[0]) == 0 and int(second[1]) == int(first[0])
    assert second[2] == first[2]
    assert second[3] == "True" and int(second[4]) == 0
    # A corrupt file is ignored, compiled again and replaced.
    data = bytearray(files[-1].read_bytes())
    data[len(data) // 2] ^= 0xFF
    files[-1].write_bytes(bytes(data))
    files[0].write_bytes(files[0].read_bytes()[:20])  # truncated
    third = _run(DISK, str(tmp_path)).split()
    assert int(third[0]) == len({files[0], files[-1]}) and third[2] == first[2]
    fourth = _run(DISK, str(tmp_path)).split()
    assert int(fourth[0]) == 0 and fourth[2] == first[2]
    assert not list((tmp_path / "programs").glob("*.tmp.*"))  # atomic writes


def test_an_empty_cache_dir_turns_the_disk_cache_off(tmp_path):
    env = dict(subprocess_env(), DTORCH_CACHE_DIR="")
    script = DISK.replace('cache_dir=sys.argv[1]', 'cache_dir=None')
    for _ in range(2):
        assert int(_run(script, env=env).split()[0]) >= 1  # compiles every time
    env["DTORCH_CACHE_DIR"] = str(tmp_path)
    assert int(_run(script, env=env).split()[0]) >= 1
    assert int(_run(script, env=env).split()[0]) == 0  # the variable names the folder
    assert list((tmp_path / "programs").glob("*.dtprog"))
