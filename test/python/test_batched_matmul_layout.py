"""Batched matmul over several batch dims is one bmm: attention's
[batch, heads, T, hd] operands sharded on batch ("dp") and on heads ("tp")
multiply without any communication, forward and backward, instead of
merging batch and heads into one dim (which cannot keep both shardings and
cost an all_to_all per operand and an all_gather of the keys)."""
import numpy as np
import pytest

from dtorch import Replicate, Shard

R, S0, S1 = Replicate(), Shard(0), Shard(1)


def _comm_rows(dt):
    return [r for r in dt.explain() if any(r["bytes_per_rank"])]


@pytest.mark.parametrize("shape", [(4, 2, 6, 8), (2, 2, 2, 3, 5)])
def test_matmul_with_batch_and_head_shards_moves_nothing(dt, meshes, shape):
    mesh = meshes["2x2"]
    rng = np.random.default_rng(0)
    an = rng.standard_normal(shape)
    bn = rng.standard_normal(shape[:-2] + (shape[-1], 7))
    a = dt.tensor(an, device_mesh=mesh, placements=[S0, S1])
    b = dt.tensor(bn, device_mesh=mesh, placements=[S0, S1])
    y = a @ b
    assert y.shape == shape[:-1] + (7,)
    assert y.placements == (S0, S1)
    np.testing.assert_allclose(y.numpy(), an @ bn, rtol=1e-12)
    assert _comm_rows(dt) == []


def test_bmm_stays_three_dimensional_like_torch(dt, meshes):
    mesh = meshes["4"]
    a = dt.ones(2, 2, 3, 4, device_mesh=mesh)
    with pytest.raises(ValueError, match="bmm: expected 3-D"):
        dt.bmm(a, a.transpose(-2, -1))


def test_head_sharded_attention_needs_no_communication(dt, meshes):
    mesh = meshes["2x2"]
    F = dt.nn.functional
    rng = np.random.default_rng(1)
    B, H, T, E = 4, 2, 6, 8
    qn, kn, vn = (rng.standard_normal((B, H, T, E)) for _ in range(3))
    q, k, v = (dt.tensor(x, device_mesh=mesh, placements=[S0, S1], requires_grad=True)
               for x in (qn, kn, vn))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert y.placements == (S0, S1)
    # numpy attention
    s = qn @ kn.transpose(0, 1, 3, 2) / np.sqrt(E)
    s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(y.numpy(), p @ vn, rtol=1e-10)
    assert _comm_rows(dt) == []
    # The backward too (up to the scalar loss's own reduction).
    y.sum().backward()
    for t in (q, k, v):
        assert t.grad.placements == (S0, S1)
    dv = p.transpose(0, 1, 3, 2) @ np.ones((B, H, T, E))
    np.testing.assert_allclose(v.grad.numpy(), dv, rtol=1e-10)
    assert [r for r in _comm_rows(dt) if r["op"] in ("reshape", "bmm", "matmul")] == []
