"""dtorch.nn.MoE (top-k routing with softmax gates, capacity with token
dropping, the load-balancing loss) against a dense numpy implementation of
the same routing, and ExpertParallel (experts Shard(0) on "ep", EP = 2 and
4) against the same layer unsharded: outputs, auxiliary loss and every
gradient; a top_k larger than the experts raises at the call."""
import math

import numpy as np
import pytest

import dtorch
from conftest import assert_close
from dtorch import Replicate, Shard
from dtorch.distributed.tensor.parallel import ExpertParallel, parallelize_module
from dtorch.nn import MoE

_erf = np.vectorize(math.erf)


def gelu(z):
    return 0.5 * z * (1 + _erf(z / math.sqrt(2)))


def numpy_moe(x, p, k, capacity_factor):
    """Token by token, first choices before second ones: (out, aux, dropped)."""
    n, _ = x.shape
    e = p["router.weight"].shape[0]
    logits = x @ p["router.weight"].T
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    idx = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    vals = np.take_along_axis(probs, idx, -1)
    gates = vals / vals.sum(-1, keepdims=True)
    cap = max(1, math.ceil(capacity_factor * n * k / e))
    out = np.zeros_like(x)
    taken = np.zeros(e, int)
    dropped = 0
    for j in range(k):
        for t in range(n):
            ex = idx[t, j]
            if taken[ex] < cap:
                h = gelu(x[t] @ p["w1"][ex] + p["b1"][ex])
                out[t] += gates[t, j] * (h @ p["w2"][ex] + p["b2"][ex])
                taken[ex] += 1
            else:
                dropped += 1
    fraction = np.bincount(idx.T.reshape(-1), minlength=e) / (n * k)
    return out, e * float((fraction * probs.mean(0)).sum()), dropped


def make_moe(seed, d=8, ff=12, e=4, k=2, cf=1.0):
    dtorch.manual_seed(seed)
    moe = MoE(d, ff, n_experts=e, top_k=k, capacity_factor=cf)
    rng = np.random.default_rng(seed)
    # A router that prefers some experts, so some expert overflows.
    state = {n: v.numpy() for n, v in moe.state_dict().items()}
    state["router.weight"] = rng.standard_normal((e, d)).astype(np.float32)
    state["router.weight"][0] += 1.0
    state["b1"] = (rng.standard_normal((e, ff)) * 0.1).astype(np.float32)
    state["b2"] = (rng.standard_normal((e, d)) * 0.1).astype(np.float32)
    moe.load_state_dict(state)
    return moe, state


@pytest.mark.parametrize("k,cf", [(1, 1.0), (2, 1.0), (2, 2.0)])
def test_moe_matches_a_dense_numpy_routing(dt, k, cf):
    moe, state = make_moe(1, k=k, cf=cf)
    x = np.random.default_rng(2).standard_normal((12, 8)).astype(np.float32)
    out = moe(dt.tensor(x))
    want, aux, dropped = numpy_moe(x.astype(np.float64), state, k, cf)
    assert_close(out.numpy(), want, tol=1e-5)
    assert_close(moe.aux_loss.item(), aux, tol=1e-5)
    if cf == 1.0:
        assert dropped > 0  # the capacity dropped assignments


@pytest.mark.parametrize("ep", [2, 4])
def test_expert_parallel_matches_the_unsharded_layer(dt, ep):
    mesh = (dt.init_device_mesh("cpu", (4,), mesh_dim_names=("ep",)) if ep == 4 else
            dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "ep")))
    ref, state = make_moe(3)
    moe, _ = make_moe(3)
    parallelize_module(moe, mesh["ep"], ExpertParallel())
    assert moe.w1.placements == (Shard(0),) and moe.w1.device_mesh == mesh["ep"]
    x = np.random.default_rng(4).standard_normal((16, 8)).astype(np.float32)
    w = np.random.default_rng(5).standard_normal((16, 8)).astype(np.float32)
    tokens = [Replicate()] * mesh.ndim
    tokens[0] = Shard(0)  # the tokens data parallel on the first dim
    xs = dt.distribute_tensor(x, mesh, tokens).requires_grad_()
    xr = dt.tensor(x).requires_grad_()
    out, want = moe(xs), ref(xr)
    assert_close(out.numpy(), want.numpy(), tol=1e-5)
    assert_close(moe.aux_loss.item(), ref.aux_loss.item(), tol=1e-5)
    ((out * dt.distribute_tensor(w, mesh, tokens)).sum() + moe.aux_loss).backward()
    ((want * dt.tensor(w)).sum() + ref.aux_loss).backward()
    assert_close(xs.grad.numpy(), xr.grad.numpy(), tol=1e-5)
    for (name, p), (_, q) in zip(moe.named_parameters(), ref.named_parameters()):
        assert p.grad is not None, name
        assert_close(p.grad.numpy(), q.grad.numpy(), tol=1e-5)


def test_bad_moe_arguments_raise_with_the_numbers(dt):
    with pytest.raises(ValueError, match="top_k = 9 is larger than the 8 experts"):
        MoE(4, 4, n_experts=8, top_k=9)
    mesh = dt.init_device_mesh("cpu", (4,), mesh_dim_names=("ep",))
    with pytest.raises(ValueError, match="6 experts do not split over the 4 ranks"):
        parallelize_module(MoE(4, 4, n_experts=6, top_k=2), mesh["ep"], ExpertParallel())
