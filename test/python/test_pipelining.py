"""Moving tensors between pipeline stages (dtorch.distributed.pipelining.
transfer): point-to-point messages that the controller schedules, against
numpy, forward and backward, and the errors at the call."""
import numpy as np
import pytest

import dtorch
from conftest import assert_close
from dtorch import Replicate, Shard
from dtorch.distributed.pipelining import transfer


def moved(x, n, sources, destinations, dim=0):
    """numpy: block destinations[k] of the result is x's block sources[k]
    (blocks of dim `dim`, n of them), the others zero."""
    blocks = np.split(x, n, axis=dim)
    out = [np.zeros_like(b) for b in blocks]
    for s, d in zip(sources, destinations):
        out[d] = blocks[s]
    return np.concatenate(out, axis=dim)


@pytest.fixture(scope="module")
def pp4(dt):
    return dt.init_device_mesh("cpu", (4,), mesh_dim_names=("pp",))


@pytest.fixture(scope="module")
def pp_dp(dt):
    return dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))


def test_transfer_moves_blocks_between_stages(dt, pp4):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 3)).astype(np.float32)
    x = dt.distribute_tensor(a, pp4, [Shard(0)])
    # Stage 0 -> 1 only; a forward shift through every stage; a ring in
    # which every stage sends and receives (one batched exchange each).
    for src, dst in [([0], [1]), ([0, 1, 2], [1, 2, 3]), ([0, 1, 2, 3], [1, 2, 3, 0]),
                     ([3, 1], [0, 2])]:
        y = transfer(x, "pp", src, dst)
        assert y.placements == (Shard(0),) and y.shape == (8, 3)
        assert_close(y.numpy(), moved(a, 4, src, dst), tol=0)
    ir = dt.last_ir("rank")
    assert "rank.batch_send_recv" in ir or "rank.send" in ir


def test_a_stage_computes_on_what_the_previous_one_sent(dt, pp4):
    # Each stage scales its block and hands it on: three hops carry stage
    # 0's rows to stage 3 through stages 1 and 2, computing on the way.
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    w = rng.standard_normal((5, 5)).astype(np.float32)
    x = dt.distribute_tensor(a, pp4, [Shard(0)])
    wt = dt.distribute_tensor(w, pp4, [Replicate()])
    h = x
    want = a.copy()
    for stage in range(3):
        h = transfer((h @ wt).relu(), "pp", [stage], [stage + 1])
        want = moved(np.maximum(want @ w, 0), 4, [stage], [stage + 1])
    assert_close(h.numpy(), want, tol=1e-5)
    text = dt.last_ir("rank")
    assert "rank.send" in text and "rank.recv" in text


def test_stages_that_are_data_parallel_inside(dt, pp_dp):
    # pp x dp: each stage's block is split again by "dp" along another dim;
    # the ranks of one dp coordinate exchange with each other.
    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 8)).astype(np.float32)
    x = dt.distribute_tensor(a, pp_dp, [Shard(0), Shard(1)])
    y = transfer(x, "pp", [0], [1])
    assert y.placements == (Shard(0), Shard(1))
    assert_close(y.numpy(), moved(a, 2, [0], [1]), tol=0)
    back = transfer(y * 2.0, 0, [1], [0])
    assert_close(back.numpy(), moved(2 * moved(a, 2, [0], [1]), 2, [1], [0]), tol=0)
    # On a sub-mesh view the dim is named by the view.
    z = dt.distribute_tensor(a, pp_dp["pp"], [Shard(1)])
    assert_close(transfer(z, "pp", [1], [0]).numpy(), moved(a, 2, [1], [0], dim=1), tol=0)


def test_gradient_goes_back_along_the_reversed_pairs(dt, pp4):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 2)).astype(np.float32)
    c = rng.standard_normal((4, 2)).astype(np.float32)
    x = dt.distribute_tensor(a, pp4, [Shard(0)]).requires_grad_()
    cw = dt.distribute_tensor(c, pp4, [Shard(0)])
    src, dst = [0, 1, 2], [1, 2, 3]
    loss = (transfer(x, "pp", src, dst) * cw).sum()
    loss.backward()
    assert_close(loss.item(), float((moved(a, 4, src, dst) * c).sum()), tol=1e-5)
    # d loss / d x: c moved back from each destination to its source.
    assert_close(x.grad.numpy(), moved(c, 4, dst, src), tol=0)


def test_bad_transfers_raise_at_the_call_with_the_numbers(dt, pp4, pp_dp):
    a = np.zeros((8, 3), np.float32)
    x = dt.distribute_tensor(a, pp4, [Shard(0)])
    with pytest.raises(ValueError, match="must be Shard"):
        transfer(dt.distribute_tensor(a, pp4, [Replicate()]), "pp", [0], [1])
    with pytest.raises(ValueError, match="dim 0 of size 6 does not split evenly over 4"):
        transfer(dt.distribute_tensor(np.zeros((6, 3), np.float32), pp4, [Shard(0)]),
                 "pp", [0], [1])
    with pytest.raises(ValueError, match="position 4 is out of range for mesh dim 0 of size 4"):
        transfer(x, "pp", [0], [4])
    with pytest.raises(ValueError, match="pair 1 moves block 2 onto itself"):
        transfer(x, "pp", [0, 2], [1, 2])
    with pytest.raises(ValueError, match="position 1 appears twice among the destinations"):
        transfer(x, "pp", [0, 2], [1, 1])
    with pytest.raises(ValueError, match="got 2 and 1"):
        transfer(x, "pp", [0, 2], [1])
    with pytest.raises(ValueError, match="no dim named 'tp'"):
        transfer(x, "tp", [0], [1])
    nested = dt.distribute_tensor(a, pp_dp, [Shard(0), Shard(0)])
    with pytest.raises(ValueError, match="tensor dim 0 is also sharded by mesh dim 1"):
        transfer(nested, "pp", [0], [1])
    # Nothing was queued by the failed calls: the session still works.
    assert_close(transfer(x, "pp", [0], [1]).numpy(), a, tol=0)
