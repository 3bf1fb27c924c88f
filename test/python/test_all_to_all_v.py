"""dtensor.all_to_all_v end to end (issue 12): the exchange of counted rows
of fixed slots against a numpy model, its gradient (the exchange with the
counts transposed), bad input raising at the call with the numbers; and
dtorch.nn.MoE under ExpertParallel dispatching and combining through it:
the bytes each rank sends (from the profiler trace) are exactly the rows
the routing kept, no assignment under capacity is dropped, and the ones
over capacity are dropped as the dense reference drops them."""
import math

import numpy as np
import pytest

import dtorch
from conftest import assert_close
from dtorch import Replicate, Shard, profiler
from dtorch.distributed import all_to_all_v
from dtorch.distributed.tensor.parallel import ExpertParallel, parallelize_module
from dtorch.nn import MoE
from test_moe import make_moe, numpy_moe


def numpy_exchange(x, counts):
    """x [n, n*S*C, ...], counts [n, n*S]: the op's definition, slot by slot."""
    n, segments = counts.shape
    per = segments // n
    rows = x.shape[1] // segments
    out = np.zeros_like(x)
    for i in range(n):  # sender
        for j in range(n):  # receiver
            for s in range(per):
                c = counts[i, j * per + s]
                src = (j * per + s) * rows
                dst = (i * per + s) * rows
                out[j, dst:dst + c] = x[i, src:src + c]
    return out


def random_case(rng, n, per, rows, tail):
    x = rng.standard_normal((n, n * per * rows) + tail).astype(np.float32)
    counts = rng.integers(0, rows + 1, size=(n, n * per)).astype(np.int64)
    counts[0, 0] = rows  # a full segment
    counts[-1, -1] = 0  # an empty one
    return x, counts


@pytest.mark.parametrize("layout", ["ep4", "dp2xep2"])
def test_all_to_all_v_matches_numpy_and_its_gradient(dt, layout):
    rng = np.random.default_rng(7)
    if layout == "ep4":
        mesh = dt.init_device_mesh("cpu", (4,), mesh_dim_names=("ep",))
        n, x_place, c_place = 4, [Shard(0)], [Shard(0)]
    else:  # the exchange on the second mesh dim, a row dim split on the first
        mesh = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "ep"))
        n, x_place, c_place = 2, [Shard(2), Shard(0)], [Replicate(), Shard(0)]
    x, counts = random_case(rng, n, 2, 3, (4,))
    xs = dt.distribute_tensor(x, mesh, x_place).requires_grad_()
    cs = dt.distribute_tensor(counts, mesh, c_place)
    y = all_to_all_v(xs, cs, "ep")
    assert y.shape == x.shape
    assert y.placements[mesh.mesh_dim_names.index("ep")] == Shard(0)
    want = numpy_exchange(x, counts)
    assert_close(y.numpy(), want, tol=0)
    # Rows past a count are zero, not stale data.
    assert np.count_nonzero(want) < want.size
    w = rng.standard_normal(x.shape).astype(np.float32)
    (y * dt.distribute_tensor(w, mesh, x_place)).sum().backward()
    # d/dx sum(w * exchange(x)) = exchange back of w with the counts transposed.
    per = counts.shape[1] // n
    back_counts = counts.reshape(n, n, per).transpose(1, 0, 2).reshape(n, n * per)
    assert_close(xs.grad.numpy(), numpy_exchange(w, back_counts), tol=1e-6)
    # ...zero for the rows past a count (they stayed behind), and only there.
    sent = numpy_exchange(numpy_exchange(np.ones_like(x), counts), back_counts)
    assert np.all((xs.grad.numpy() != 0) == (sent != 0))


def test_all_to_all_v_takes_any_layout_and_lays_it_out(dt):
    mesh = dt.init_device_mesh("cpu", (4,), mesh_dim_names=("ep",))
    x, counts = random_case(np.random.default_rng(8), 4, 1, 2, (3,))
    y = all_to_all_v(dt.tensor(x, device_mesh=mesh), dt.tensor(counts, device_mesh=mesh), 0)
    assert y.placements == (Shard(0),)
    assert_close(y.numpy(), numpy_exchange(x, counts), tol=0)


def test_bad_all_to_all_v_input_raises_with_the_numbers(dt):
    mesh = dt.init_device_mesh("cpu", (4,), mesh_dim_names=("ep",))
    x = dt.zeros(4, 8, 2, device_mesh=mesh, placements=[Shard(0)])
    counts = dt.zeros(4, 4, device_mesh=mesh, placements=[Shard(0)]).long()
    with pytest.raises(TypeError, match="counts must be an int64 tensor, got float32"):
        all_to_all_v(x, counts.float(), "ep")
    with pytest.raises(ValueError, match=r"dim 0 of the rows \(2\) and of the counts \(4\) "
                       "must be the 4 positions of mesh dim 0"):
        all_to_all_v(dt.zeros(2, 8, 2, device_mesh=mesh), counts, "ep")
    with pytest.raises(ValueError, match="6 segments do not split over the 4 positions"):
        all_to_all_v(x, dt.zeros(4, 6, device_mesh=mesh).long(), "ep")
    with pytest.raises(ValueError, match="8 rows do not split into 16 segments"):
        all_to_all_v(x, dt.zeros(4, 16, device_mesh=mesh).long(), "ep")
    with pytest.raises(ValueError, match="no dim named 'tp'"):
        all_to_all_v(x, counts, "tp")


# ---- the MoE's dispatch and combine ------------------------------------------------

def kept_per_block_and_expert(x, state, k, cf, blocks):
    """The dense routing's kept assignments, counted per (token block,
    expert): what each block's dispatch must send to each expert."""
    n = x.shape[0]
    e = state["router.weight"].shape[0]
    logits = x @ state["router.weight"].T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    idx = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    cap = max(1, math.ceil(cf * n * k / e))
    taken = np.zeros(e, int)
    kept = np.zeros((blocks, e), int)
    for j in range(k):
        for t in range(n):
            ex = idx[t, j]
            if taken[ex] < cap:
                taken[ex] += 1
                kept[t // (n // blocks), ex] += 1
    return kept, cap


def exchanged_bytes_per_rank(trace, ranks):
    return [sum(ev["args"]["bytes"] for ev in profiler.spans(trace, r, "comm")
                if ev["name"] == "all_to_all_v") for r in range(ranks)]


@pytest.mark.parametrize("cf", [4.0, 1.0])
def test_moe_dispatch_sends_the_kept_rows_alone(dt, cf):
    """EP = 4 over 16 tokens: forward and backward move, per rank, exactly
    the rows the routing kept for the other ranks' experts (dispatch and
    combine forward, the same two backward), far less than the slot
    buffers; cf = 4 keeps every assignment (nothing under capacity
    dropped), cf = 1 drops the overflow of the favourite expert exactly as
    the dense reference does."""
    mesh = dt.init_device_mesh("cpu", (4,), mesh_dim_names=("ep",))
    k, d, n = 2, 8, 16
    moe, state = make_moe(3, k=k, cf=cf)
    parallelize_module(moe, mesh["ep"], ExpertParallel())
    x = np.random.default_rng(4).standard_normal((n, d)).astype(np.float32)
    want, aux, dropped = numpy_moe(x.astype(np.float64), state, k, cf)
    if cf == 4.0:
        assert dropped == 0
    else:
        assert dropped > 0
    kept, cap = kept_per_block_and_expert(x.astype(np.float64), state, k, cf, 4)
    assert kept.sum() == n * k - dropped
    xs = dt.distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
    dt.synchronize()
    with profiler.profile() as prof:
        out = moe(xs)
        got = out.numpy()
        (out.sum() + moe.aux_loss).backward()
        xs.grad.numpy()
    assert_close(got, want, tol=1e-5)
    assert_close(moe.aux_loss.item(), aux, tol=1e-5)
    # Rank r holds token block r and expert r (4 experts over 4 ranks): it
    # sends kept[r, e] rows to each other expert e and gets kept[s, r] back
    # from each other block s, d float32 each; four exchanges per step.
    row = d * 4
    for r, got_bytes in enumerate(exchanged_bytes_per_rank(prof.trace, 4)):
        dispatch = sum(kept[r, e] for e in range(4) if e != r) * row
        combine = sum(kept[s, r] for s in range(4) if s != r) * row
        assert got_bytes == 2 * (dispatch + combine), (r, got_bytes, kept)
        slots = 3 * min(cap, n // 4) * row  # one slot segment per other rank
        assert got_bytes < 4 * slots
