"""The torch operators built from dialect ops (DTensorDecompositions.td),
against numpy on the full tensors, with sharded and Partial inputs, on
meshes (4,) and (2, 2)."""
import math

import numpy as np
import pytest

import dtorch
import dtorch.nn.functional as F
from dtorch import Partial, Replicate, Shard

from conftest import assert_close

rng = np.random.default_rng(7)


def layouts(mesh, ndim):
    if mesh.ndim == 1:
        return [[Replicate()], [Shard(0)], [Shard(ndim - 1)]]
    return [[Shard(0), Shard(ndim - 1)], [Replicate(), Shard(0)], [Shard(ndim - 1), Replicate()]]


def np_softmax(x, dim):
    e = np.exp(x - x.max(dim, keepdims=True))
    return e / e.sum(dim, keepdims=True)


def np_log_softmax(x, dim):
    m = x.max(dim, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(dim, keepdims=True))


@pytest.fixture(params=["4", "2x2"])
def mesh(request, meshes):
    return meshes[request.param]


def each_layout(dt, mesh, x):
    for p in layouts(mesh, x.ndim):
        yield dt.distribute_tensor(x, mesh, p)


def test_softmax_log_softmax_logsumexp(dt, mesh):
    x = rng.standard_normal((7, 5)).astype(np.float32)
    for t in each_layout(dt, mesh, x):
        for dim in (0, 1, -1):
            assert_close(dt.softmax(t, dim).numpy(), np_softmax(x, dim))
            assert_close(F.log_softmax(t, dim).numpy(), np_log_softmax(x, dim), tol=1e-5)
        m = x.max(1, keepdims=True)
        assert_close(dt.logsumexp(t, 1).numpy(),
                     (np.log(np.exp(x - m).sum(1, keepdims=True)) + m)[:, 0])
        assert_close(t.logsumexp([0, 1], keepdim=True).numpy(),
                     np.log(np.exp(x).sum(keepdims=True)))


def test_var_std_with_correction(dt, mesh):
    x = rng.standard_normal((7, 5)).astype(np.float32)
    for t in each_layout(dt, mesh, x):
        assert_close(dt.var(t, 1).numpy(), x.var(1, ddof=1), tol=1e-5)
        assert_close(t.var(0, correction=0, keepdim=True).numpy(), x.var(0, ddof=0, keepdims=True))
        assert_close(dt.std(t).numpy(), x.std(ddof=1), tol=1e-5)


def test_square(dt, mesh):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    for t in each_layout(dt, mesh, x):
        assert_close(dt.square(t).numpy(), x * x)
        assert_close(t.square().numpy(), x * x)


def test_clamp_masked_fill_where_scalars(dt, mesh):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    for t in each_layout(dt, mesh, x):
        assert_close(dt.clamp(t, -0.5, 0.5).numpy(), np.clip(x, -0.5, 0.5))
        assert_close(t.clamp(min=0.1).numpy(), np.maximum(x, 0.1))
        mask = t > 0.3
        assert_close(t.masked_fill(mask, -1.0).numpy(), np.where(x > 0.3, -1.0, x))
        assert_close(dt.where(mask, t, 0.0).numpy(), np.where(x > 0.3, x, 0.0))


def test_max_min_with_dim_return_values_and_indices(dt, mesh):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    for t in each_layout(dt, mesh, x):
        v, i = t.max(1)
        assert_close(v.numpy(), x.max(1))
        assert (i.numpy() == x.argmax(1)).all()
        v, i = dt.min(t, 0, keepdim=True)
        assert_close(v.numpy(), x.min(0, keepdims=True))
        assert (i.numpy() == x.argmin(0)[None]).all()
        assert_close(t.max().numpy(), x.max())
        assert (dt.argmax(t).numpy() == x.argmax())


def test_one_hot(dt, mesh):
    labels = rng.integers(0, 5, (8,))
    for t in each_layout(dt, mesh, labels):
        assert (F.one_hot(t, 5).numpy() == np.eye(5, dtype=np.int64)[labels]).all()
    assert F.one_hot(dt.distribute_tensor(labels, mesh, [Replicate()] * mesh.ndim)).shape == \
        (8, labels.max() + 1)


def test_dropout_is_placement_independent_and_scaled(dt, mesh):
    x = np.ones((16, 8), dtype=np.float32)
    outs = []
    for t in each_layout(dt, mesh, x):
        dt.manual_seed(3)
        outs.append(F.dropout(t, 0.25).numpy())
    for o in outs[1:]:
        assert (o == outs[0]).all()
    kept = outs[0] != 0
    assert_close(outs[0][kept], np.full(kept.sum(), 1 / 0.75, dtype=np.float32))
    assert 0.5 < kept.mean() < 0.95
    t = dt.distribute_tensor(x, mesh, [Replicate()] * mesh.ndim)
    assert F.dropout(t, 0.5, training=False) is t


def test_layer_norm_rms_norm(dt, mesh):
    x = rng.standard_normal((6, 8)).astype(np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    mu, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    want_ln = (x - mu) / np.sqrt(var + 1e-5) * w + b
    want_rms = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-6) * w
    for t in each_layout(dt, mesh, x):
        tw = dt.distribute_tensor(w, mesh, [Replicate()] * mesh.ndim)
        tb = dt.distribute_tensor(b, mesh, [Replicate()] * mesh.ndim)
        assert_close(F.layer_norm(t, (8,), tw, tb).numpy(), want_ln, tol=1e-4)
        assert_close(F.rms_norm(t, [8], tw, eps=1e-6).numpy(), want_rms, tol=1e-4)
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(t, (7,))


def test_cross_entropy_ignore_index_and_label_smoothing(dt, mesh):
    logits = rng.standard_normal((8, 5)).astype(np.float32)
    target = rng.integers(0, 5, (8,))
    target[2] = -100
    logp = np_log_softmax(logits, 1)
    valid = target != -100
    nll = -logp[np.arange(8), np.where(valid, target, 0)]
    for eps in (0.0, 0.1):
        per = (1 - eps) * nll + eps * (-logp.mean(1))
        want = per[valid].mean()
        for t in each_layout(dt, mesh, logits):
            y = dt.distribute_tensor(target, mesh, [Replicate()] * mesh.ndim)
            got = F.cross_entropy(t, y, label_smoothing=eps)
            assert_close(got.numpy(), np.float32(want), tol=1e-5)
            assert_close(F.cross_entropy(t, y, reduction="sum", label_smoothing=eps).numpy(),
                         np.float32(per[valid].sum()), tol=1e-4)


def test_mse_loss(dt, mesh):
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((6, 5)).astype(np.float32)
    for t in each_layout(dt, mesh, a):
        u = dt.distribute_tensor(b, mesh, [Replicate()] * mesh.ndim)
        assert_close(F.mse_loss(t, u).numpy(), np.float32(((a - b) ** 2).mean()))
        assert_close(F.mse_loss(t, u, reduction="none").numpy(), (a - b) ** 2)


def np_sdpa(q, k, v, mask=None, causal=False):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool))
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return np_softmax(s, -1) @ v


def test_scaled_dot_product_attention(dt, mesh):
    q = rng.standard_normal((2, 4, 6, 8)).astype(np.float32)
    k = rng.standard_normal((2, 4, 6, 8)).astype(np.float32)
    v = rng.standard_normal((2, 4, 6, 8)).astype(np.float32)
    p = [Shard(0)] + [Shard(1)] * (mesh.ndim - 1)
    tq, tk, tv = (dt.distribute_tensor(a, mesh, p) for a in (q, k, v))
    assert_close(F.scaled_dot_product_attention(tq, tk, tv).numpy(), np_sdpa(q, k, v), tol=1e-4)
    assert_close(F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).numpy(),
                 np_sdpa(q, k, v, causal=True), tol=1e-4)
    mask = rng.random((6, 6)) < 0.7
    np.fill_diagonal(mask, True)
    tm = dt.distribute_tensor(mask, mesh, [Replicate()] * mesh.ndim)
    assert_close(F.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm).numpy(),
                 np_sdpa(q, k, v, mask=mask), tol=1e-4)


def test_linear_embedding_stack_and_indexing(dt, mesh):
    x = rng.standard_normal((6, 4)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    for t in each_layout(dt, mesh, x):
        tw = dt.distribute_tensor(w, mesh, [Replicate()] * mesh.ndim)
        tb = dt.distribute_tensor(b, mesh, [Replicate()] * mesh.ndim)
        assert_close(F.linear(t, tw, tb).numpy(), x @ w.T + b, tol=1e-5)
        assert_close(dt.stack([t, t], 1).numpy(), np.stack([x, x], 1))
        assert_close(t[1:5:2, None, ..., -1].numpy(), x[1:5:2, None, ..., -1])
        assert_close(t[-1].numpy(), x[-1])
        assert_close(t.narrow(1, 1, 2).numpy(), x[:, 1:3])
        for got, want in zip(t.split(4, 0), np.split(x, [4], 0)):
            assert_close(got.numpy(), want)
        for got, want in zip(dt.chunk(t, 2, 1), np.split(x, 2, 1)):
            assert_close(got.numpy(), want)
    table = rng.standard_normal((10, 4)).astype(np.float32)
    ids = rng.integers(0, 10, (3, 5))
    for p in layouts(mesh, 2):
        tt = dt.distribute_tensor(table, mesh, p)
        ti = dt.distribute_tensor(ids, mesh, [Replicate()] * mesh.ndim)
        assert_close(F.embedding(ti, tt).numpy(), table[ids])
    # A vocab-sharded table gives a Partial(sum) lookup, no table movement
    # (when the table is larger than the rows looked up, as in a model).
    vocab = rng.standard_normal((64, 4)).astype(np.float32)
    tt = dt.distribute_tensor(vocab, mesh, [Shard(0)] * mesh.ndim)
    rows = dt.index_select(tt, 0, dt.distribute_tensor(ids[0], mesh, [Replicate()] * mesh.ndim))
    assert any(q.is_partial() for q in rows.placements)
    assert_close(rows.numpy(), vocab[ids[0]])


def test_bad_calls_raise_at_the_call_and_the_session_stays_usable(dt, mesh):
    t = dt.distribute_tensor(np.zeros((4, 3), np.float32), mesh, [Replicate()] * mesh.ndim)
    with pytest.raises(IndexError, match="out of bounds"):
        t[4]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(TypeError, match="int64"):
        dt.gather(t, 1, t)
    with pytest.raises(ValueError, match="sizes of tensors must match"):
        dt.cat([t, t.t()], 0)
    with pytest.raises(ValueError, match="out of range"):
        dt.argmax(t, 5)
    with pytest.raises(TypeError, match="bool"):
        dt.where(t, t, t)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        dt.tril(t[0])
    assert_close((t + 1).numpy(), np.ones((4, 3), np.float32))


def test_topk(dt, mesh):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    for t in each_layout(dt, mesh, x):
        v, i = dt.topk(t, 3)
        want = -np.sort(-x, 1)[:, :3]
        assert_close(v.numpy(), want)
        assert (i.numpy() == np.argsort(-x, 1, kind="stable")[:, :3]).all()
        v, i = t.topk(2, dim=0, largest=False)
        assert_close(v.numpy(), np.sort(x, 0)[:2])
    with pytest.raises(IndexError, match="out of range"):
        dt.topk(t, 9, 1)


def test_matmul_broadcasts_batch_dims_and_vectors(dt, mesh):
    a = rng.standard_normal((2, 1, 3, 4)).astype(np.float32)
    b = rng.standard_normal((5, 4, 2)).astype(np.float32)
    v = rng.standard_normal(4).astype(np.float32)
    for t in each_layout(dt, mesh, a):
        tb = dt.distribute_tensor(b, mesh, [Replicate()] * mesh.ndim)
        tv = dt.distribute_tensor(v, mesh, [Replicate()] * mesh.ndim)
        assert_close((t @ tb).numpy(), a @ b, tol=1e-5)
        assert_close((t @ tv).numpy(), a @ v, tol=1e-5)
        assert_close((tv @ tb).numpy(), v @ b, tol=1e-5)
        assert_close(dt.matmul(tv, tv).numpy(), v @ v, tol=1e-5)
    with pytest.raises(ValueError, match="cannot be multiplied"):
        t @ t


@pytest.mark.parametrize("dtype,tol", [("float16", 4e-3), ("bfloat16", 3e-2), ("float64", 1e-12)])
def test_decompositions_in_other_float_dtypes(dt, mesh, dtype, tol):
    """16-bit floats are stored in 16 bits and computed in float32 per op."""
    x = rng.standard_normal((6, 8)).astype(np.float32)
    x64 = x.astype(getattr(np, "float16") if dtype == "float16" else np.float64)
    if dtype == "bfloat16":
        import ml_dtypes
        x64 = x.astype(ml_dtypes.bfloat16)
    x64 = x64.astype(np.float64)
    p = [Shard(0)] + [Shard(1)] * (mesh.ndim - 1)
    t = dt.tensor(x, device_mesh=mesh, placements=p, dtype=getattr(dt, dtype))
    m = x64.max(1, keepdims=True)
    cases = [
        (F.softmax(t, -1), np_softmax(x64, 1)),
        (F.layer_norm(t, (8,)), (x64 - x64.mean(1, keepdims=True))
         / np.sqrt(x64.var(1, keepdims=True) + 1e-5)),
        (t.logsumexp(1), (np.log(np.exp(x64 - m).sum(1, keepdims=True)) + m)[:, 0]),
        (t.var(1), x64.var(1, ddof=1)),
    ]
    for got, want in cases:
        assert got.dtype == getattr(dt, dtype)
        np.testing.assert_allclose(np.asarray(got.numpy()).astype(np.float64), want,
                                   rtol=tol, atol=4 * tol)
