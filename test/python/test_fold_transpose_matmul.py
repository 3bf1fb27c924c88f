"""--rank-fold-transpose-into-matmul: a transpose of the last two dims that
feeds a GEMM (or that a GEMM feeds) becomes the GEMM's trans_a / trans_b flag
and is not materialised. Every flag combination, every GEMM dtype, sharded
placements (a sharded contracted dim gives a Partial result) and batched
products are compared with numpy, and the rank IR is checked to read the
operands transposed with no transpose kernel left."""
import re

import ml_dtypes
import numpy as np
import pytest

from dtorch import Partial, Replicate, Shard

R, S0, S1 = Replicate(), Shard(0), Shard(1)

DTYPES = {"float32": np.float32, "float64": np.float64, "float16": np.float16,
          "bfloat16": ml_dtypes.bfloat16, "int32": np.int32, "int64": np.int64}
# Relative tolerance against a float64 product of the same (rounded) inputs.
TOL = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1.6e-2,
       "int32": 0, "int64": 0}


def _values(rng, shape, dtype):
    if dtype.startswith("int"):
        return rng.integers(-5, 6, size=shape).astype(DTYPES[dtype])
    return rng.standard_normal(shape).astype(DTYPES[dtype])


def _check(got, want, dtype):
    got = np.asarray(got).astype(np.float64)
    if TOL[dtype] == 0:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype])


def _gemms(ir):
    """(kernel, trans_a, trans_b) of every matmul/bmm kernel of the rank IR."""
    out = []
    for line in ir.splitlines():
        m = re.search(r'rank\.kernel "(matmul|bmm)"', line)
        if m:
            out.append((m.group(1), "trans_a = 1" in line, "trans_b = 1" in line))
    return out


def _transposes(ir):
    return re.findall(r'rank\.kernel "transpose"\([^)]*\) \{perm = array<i64: ([0-9, ]*)>', ir)


def _gemm_operands_from_transposes(ir):
    """The GEMM operands of the rank IR that a transpose kernel makes."""
    made_by_transpose = set(re.findall(r'(%[\w#]+) = rank\.kernel "transpose"', ir))
    out = []
    for operands in re.findall(r'rank\.kernel "(?:matmul|bmm)"\(([^)]*)\)', ir):
        out += [v.strip() for v in operands.split(",") if v.strip() in made_by_transpose]
    return out


def _op(t, transposed):
    return t.t() if transposed else t


# Transposed views are made inside the expression that reads them: a view
# held by a Python name when the segment is cut would be one of its results,
# and so materialised.
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_every_flag_combination_and_dtype(dt, meshes, dtype, ta, tb):
    """op(a) @ op(b) with the contracted dim sharded on both sides (the
    product is Partial(sum) before it is fetched), and its transpose."""
    mesh = meshes["4"]
    rng = np.random.default_rng(0)
    M, K, N = 6, 8, 5
    an = _values(rng, (K, M) if ta else (M, K), dtype)
    bn = _values(rng, (N, K) if tb else (K, N), dtype)
    # Shard the stored dim that becomes the contracted one.
    a = dt.tensor(an, device_mesh=mesh, placements=[S0 if ta else S1])
    b = dt.tensor(bn, device_mesh=mesh, placements=[S1 if tb else S0])
    y = _op(a, ta) @ _op(b, tb)
    assert y.placements == (Partial("sum"),)
    want = (an.T if ta else an).astype(np.float64) @ (bn.T if tb else bn).astype(np.float64)
    _check(y.numpy(), want, dtype)
    ir = dt.last_ir("rank")
    assert _gemms(ir) == [("matmul", ta, tb)]
    assert _transposes(ir) == []
    # Transposing the product swaps the operands and flips both flags.
    yt = (_op(a, ta) @ _op(b, tb)).t()
    _check(yt.numpy(), want.T, dtype)
    ir = dt.last_ir("rank")
    assert _gemms(ir) == [("matmul", not tb, not ta)]
    assert _transposes(ir) == []


PLACEMENTS = [R, S0, S1]


@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_every_placement_pair(dt, meshes, ta, tb):
    """Every pair of Replicate / Shard(0) / Shard(1) of the stored operands
    (so the transposed view is sharded on the swapped dim) on 4 ranks, with
    uneven pieces (7 rows over 4 ranks)."""
    mesh = meshes["4"]
    rng = np.random.default_rng(1)
    M, K, N = 7, 9, 6
    an = rng.standard_normal((K, M) if ta else (M, K))
    bn = rng.standard_normal((N, K) if tb else (K, N))
    want = (an.T if ta else an) @ (bn.T if tb else bn)
    for pa in PLACEMENTS:
        for pb in PLACEMENTS:
            a = dt.tensor(an, device_mesh=mesh, placements=[pa])
            b = dt.tensor(bn, device_mesh=mesh, placements=[pb])
            np.testing.assert_allclose((_op(a, ta) @ _op(b, tb)).numpy(), want, rtol=1e-12,
                                       atol=1e-12, err_msg=f"{pa} {pb}")
            # A transpose stays only where a collective separates it from the
            # product (the layout the sharding propagation chose for it).
            ir = dt.last_ir("rank")
            assert _gemm_operands_from_transposes(ir) == [], f"{pa} {pb}"
            if not re.search(r"rank\.(all_|reduce_scatter)", ir):
                assert _transposes(ir) == [], f"{pa} {pb}"


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_batched_products_on_a_2d_mesh(dt, meshes, dtype):
    """Attention's q @ k^T and its relatives on [B, H, T, E] sharded on the
    batch and heads dims, and on the contracted dim E (Partial result)."""
    mesh = meshes["2x2"]
    rng = np.random.default_rng(2)
    B, H, T, E = 4, 2, 5, 6
    qn, kn = _values(rng, (B, H, T, E), dtype), _values(rng, (B, H, T, E), dtype)
    q64, k64 = qn.astype(np.float64), kn.astype(np.float64)
    swap = (0, 1, 3, 2)
    for placements in ([S0, S1], [Shard(3), R], [R, Shard(2)]):
        q = dt.tensor(qn, device_mesh=mesh, placements=placements)
        k = dt.tensor(kn, device_mesh=mesh, placements=placements)
        cases = [
            (lambda: q @ k.transpose(-2, -1), q64 @ k64.transpose(swap), ("bmm", False, True)),
            (lambda: q.transpose(-2, -1) @ k, q64.transpose(swap) @ k64, ("bmm", True, False)),
            (lambda: (q.transpose(-2, -1) @ k).transpose(-2, -1),
             (q64.transpose(swap) @ k64).transpose(swap), ("bmm", True, False)),
        ]
        for make, want, gemm in cases:
            _check(make().numpy(), want, dtype)
            ir = dt.last_ir("rank")
            assert _gemm_operands_from_transposes(ir) == [], (placements, ir)
            # Batch and head shards need no communication: the flags are
            # exactly the expected ones. Elsewhere the propagation may move
            # an operand first (then the collective's output is the operand).
            if placements == [S0, S1]:
                assert set(_gemms(ir)) == {gemm}, (placements, ir)
                assert _transposes(ir) == [], placements


def test_three_dim_bmm_reads_transposed_operands(dt, meshes):
    mesh = meshes["4"]
    rng = np.random.default_rng(3)
    an, bn = rng.standard_normal((4, 3, 5)), rng.standard_normal((4, 7, 5))
    a = dt.tensor(an, device_mesh=mesh, placements=[S0])
    b = dt.tensor(bn, device_mesh=mesh, placements=[S0])
    y = dt.bmm(a, b.transpose(1, 2))
    np.testing.assert_allclose(y.numpy(), an @ bn.transpose(0, 2, 1), rtol=1e-12)
    assert _gemms(dt.last_ir("rank")) == [("bmm", False, True)]


def test_linear_forward_and_backward_materialise_no_transpose(dt, meshes):
    """A data- and tensor-parallel linear layer: x @ w^T forward, and its
    gradients g @ w, g^T x (through the transposes of the autograd
    formulas) read their operands transposed; values against numpy."""
    mesh = meshes["2x2"]
    F = dt.nn.functional
    rng = np.random.default_rng(4)
    B, T, C, O = 4, 3, 8, 6
    xn, wn, bn = rng.standard_normal((B, T, C)), rng.standard_normal((O, C)), rng.standard_normal(O)
    rn = rng.standard_normal((B, T, O))
    x = dt.tensor(xn, device_mesh=mesh, placements=[S0, R], requires_grad=True)
    w = dt.tensor(wn, device_mesh=mesh, placements=[R, S0], requires_grad=True)
    b = dt.tensor(bn, device_mesh=mesh, placements=[R, S0], requires_grad=True)
    r = dt.tensor(rn, device_mesh=mesh, placements=[S0, R])
    y = F.linear(x, w, b)
    (y * r).sum().backward()
    np.testing.assert_allclose(y.numpy(), xn @ wn.T + bn, rtol=1e-12)
    grads = [t.grad.numpy() for t in (x, w, b)]
    np.testing.assert_allclose(grads[0], rn @ wn, rtol=1e-12)
    np.testing.assert_allclose(grads[1], rn.reshape(-1, O).T @ xn.reshape(-1, C), rtol=1e-12)
    np.testing.assert_allclose(grads[2], rn.reshape(-1, O).sum(0), rtol=1e-12)
    ir = dt.last_ir("rank")
    gemms = _gemms(ir)
    assert gemms and all(ta or tb or kind == "matmul" for kind, ta, tb in gemms)
    assert _transposes(ir) == []
    assert "trans_b = 1" in ir and "trans_a = 1" in ir


def test_other_transposes_are_kept(dt, meshes):
    """A transpose that is not of the last two dims, or that something else
    reads, is computed as before."""
    mesh = meshes["4"]
    rng = np.random.default_rng(5)
    xn, wn = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5))
    x = dt.tensor(xn, device_mesh=mesh, placements=[R])
    w = dt.tensor(wn, device_mesh=mesh, placements=[S0])
    xt = x.transpose(0, 1)          # [3, 2, 4]: not the last two dims
    y = xt @ w
    np.testing.assert_allclose(y.numpy(), xn.transpose(1, 0, 2) @ wn, rtol=1e-12)
    assert set(_transposes(dt.last_ir("rank"))) == {"1, 0, 2"}
    wt = w.t()
    z, e = x.reshape(6, 4) @ wt.t(), wt.exp()
    np.testing.assert_allclose(z.numpy(), xn.reshape(6, 4) @ wn, rtol=1e-12)
    np.testing.assert_allclose(e.numpy(), np.exp(wn.T), rtol=1e-12)
