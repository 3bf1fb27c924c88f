"""Ring attention over a "cp" mesh dim (dtorch.distributed.tensor.
experimental.ring_attention) against numpy attention, forward and backward,
causal and not, contiguous and zig-zag splits, CP = 2 and 4; the key/value
blocks travel the ring point to point (no gather of the sequence); bad
sequence lengths raise at the call with the numbers."""
import math
import re

import numpy as np
import pytest

from conftest import assert_close
from dtorch import Replicate, Shard
from dtorch.distributed.tensor.experimental import ring_attention


def attention(q, k, v, causal):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True), s


def attention_grads(q, k, v, do, causal):
    """dq, dk, dv of sum(attention(q, k, v) * do)."""
    p, _ = attention(q, k, v, causal)
    scale = 1 / math.sqrt(q.shape[-1])
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    return ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, dv


@pytest.fixture(scope="module")
def meshes(dt):
    return {4: dt.init_device_mesh("cpu", (4,), mesh_dim_names=("cp",)),
            2: dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "cp"))}


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("causal,zigzag", [(False, False), (True, False), (True, True)])
def test_ring_attention_matches_full_attention_forward_and_backward(dt, meshes, cp, causal,
                                                                    zigzag):
    mesh = meshes[cp]
    rng = np.random.default_rng(cp * 10 + causal * 2 + zigzag)
    q, k, v, w = [rng.standard_normal((2, 2, 16, 4)).astype(np.float32) for _ in range(4)]
    split = [Replicate()] * mesh.ndim
    split[-1] = Shard(2)
    tq, tk, tv = [dt.distribute_tensor(a, mesh, split).requires_grad_() for a in (q, k, v)]
    out = ring_attention(tq, tk, tv, is_causal=causal, zigzag=zigzag)
    assert out.placements == tuple(split)
    p, _ = attention(q, k, v, causal)
    assert_close(out.numpy(), p @ v, tol=1e-5)
    (out * dt.distribute_tensor(w, mesh, split)).sum().backward()
    for got, want in zip((tq.grad, tk.grad, tv.grad), attention_grads(q, k, v, w, causal)):
        assert_close(got.numpy(), want, tol=1e-4)


def test_the_blocks_travel_the_ring_point_to_point(dt, meshes):
    mesh = meshes[4]
    rng = np.random.default_rng(1)
    q = dt.distribute_tensor(rng.standard_normal((1, 2, 8, 4)).astype(np.float32), mesh,
                             [Shard(2)])
    ring_attention(q, q, q, is_causal=True, zigzag=False).numpy()
    ops = re.findall(r"rank\.(all_gather|all_to_all|batch_send_recv)\b", dt.last_ir("rank"))
    # 3 ring steps, keys and values, in each of the program classes; no gather.
    assert "all_gather" not in ops and "all_to_all" not in ops
    assert ops.count("batch_send_recv") % 6 == 0 and ops


def test_sequences_that_do_not_split_raise_with_the_numbers(dt, meshes):
    mesh = meshes[4]
    x = dt.distribute_tensor(np.zeros((1, 1, 12, 2), np.float32), mesh, [Replicate()])
    with pytest.raises(ValueError, match=r"a sequence of 12 does not split into 8 zig-zag chunks "
                                         r"\(2 per rank\) over 4 ranks of 'cp' \(12 % 8 = 4\)"):
        ring_attention(x, x, x, is_causal=True)
    y = dt.distribute_tensor(np.zeros((1, 1, 6, 2), np.float32), mesh, [Replicate()])
    with pytest.raises(ValueError, match=r"a sequence of 6 does not split into 4 blocks"):
        ring_attention(y, y, y)
    with pytest.raises(ValueError, match="no dim named 'sp'"):
        ring_attention(x, x, x, mesh_dim="sp")


def test_context_parallel_runs_sdpa_as_ring_attention(dt, meshes):
    import dtorch.nn.functional as F
    from dtorch.distributed.tensor.experimental import context_parallel
    mesh = meshes[2]  # ("dp", "cp")
    rng = np.random.default_rng(7)
    q, k, v = [rng.standard_normal((2, 2, 8, 4)).astype(np.float32) for _ in range(3)]
    rep = [Replicate(), Replicate()]
    tq, tk, tv = [dt.distribute_tensor(a, mesh, rep).requires_grad_() for a in (q, k, v)]
    with context_parallel(mesh["cp"], buffers=[tq, tk, tv], seq_dims=[2, 2, 2]):
        assert tq.placements == (Shard(2),) and tq.device_mesh == mesh["cp"]
        out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
        out.numpy()
        assert "rank.batch_send_recv" in dt.last_ir("rank")
    assert tq.placements == (Replicate(), Replicate())  # restored
    p, _ = attention(q, k, v, True)
    assert_close(out.numpy(), p @ v, tol=1e-5)
    out.sum().backward()
    dq, _, _ = attention_grads(q, k, v, np.ones_like(q), True)
    assert_close(tq.grad.numpy(), dq, tol=1e-4)
    # Outside the block the ordinary attention runs again.
    assert F.scaled_dot_product_attention.__module__ == "dtorch._decompositions"
    with pytest.raises(ValueError, match="2 buffers but 1 seq_dims"):
        with context_parallel(mesh["cp"], buffers=[tq, tk], seq_dims=[2]):
            pass
