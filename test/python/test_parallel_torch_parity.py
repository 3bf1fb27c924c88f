"""Parity of pipeline, expert and context parallel training with a
single-device torch run (issue 12): the same model, initial weights and
batches, 10 training steps of SGD with momentum in float32; every step's
loss and the final weights agree to 1e-4.

- Pipeline parallel: GPipe, 1F1B and interleaved 1F1B with 2 and 4 stages,
  4 and 8 microbatches, PP alone, PP x DP and PP x TP, against the
  unsplit ``torch.nn.Sequential``.
- Expert parallel: ``dtorch.nn.MoE`` with ExpertParallel on EP = 2 (DP x EP)
  and EP = 4, top-2 routing with a capacity that drops tokens, plus the
  load-balancing loss, against a dense torch implementation of the same
  routing (token by token, first choices before second ones); dispatch and
  combine are ``dtensor.all_to_all_v`` exchanges of the kept rows.
- Context parallel: an attention layer whose ``scaled_dot_product_attention``
  runs as ring attention on CP = 2 (DP x CP) and CP = 4, causal (zig-zag)
  and not, against ``torch.nn.functional.scaled_dot_product_attention``.

torch is installed by scripts/setup.sh (pinned); where it cannot import,
the module skips with the reason."""
import math

import numpy as np
import pytest

from conftest import assert_close
from dtorch import Replicate, Shard

try:
    import torch
except (ImportError, OSError) as exc:  # a wheel without its CUDA libraries
    pytest.skip(f"torch does not import here ({exc}); scripts/setup.sh installs it",
                allow_module_level=True)

torch.set_num_threads(1)

STEPS = 10
TOL = 1e-4
LR, MOMENTUM = 0.05, 0.9


def torch_train(module, params, batches, loss_of):
    """Losses of STEPS SGD steps of `module` in torch, float32, one device."""
    opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = loss_of(module, torch.from_numpy(x), torch.from_numpy(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def batches_of(seed, x_shape, y_shape):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(x_shape).astype(np.float32),
             rng.standard_normal(y_shape).astype(np.float32)) for _ in range(STEPS)]


# ---- pipeline parallel --------------------------------------------------------------

WIDTHS = [6, 16, 16, 12, 3]


def mlp_weights(seed):
    rng = np.random.default_rng(seed)
    return [((rng.standard_normal((WIDTHS[k + 1], WIDTHS[k])) * 0.4).astype(np.float32),
             (rng.standard_normal(WIDTHS[k + 1]) * 0.1).astype(np.float32))
            for k in range(len(WIDTHS) - 1)]


def torch_mlp(weights):
    layers = []
    for k, (w, b) in enumerate(weights):
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
        if k < len(weights) - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def dtorch_stages(dt, weights, n_stages):
    """The same chain cut into n_stages Sequentials (a Linear and its ReLU
    together), and the Linears in order."""
    nn = dt.nn
    layers = []
    for k, (w, b) in enumerate(weights):
        lin = nn.Linear(w.shape[1], w.shape[0])
        lin.load_state_dict({"weight": w, "bias": b})
        layers.append([lin] + ([nn.ReLU()] if k < len(weights) - 1 else []))
    cuts = np.array_split(np.arange(len(layers)), n_stages)
    stages = [nn.Sequential(*[m for k in cut for m in layers[k]]) for cut in cuts]
    return stages, [layer[0] for layer in layers]


# name -> (mesh shape, dim names, stages, microbatches, schedule, inner style)
PP_CASES = {
    "gpipe_2stages_x_dp2_4mb": ((2, 2), ("pp", "dp"), 2, 4, "GPipe", None),
    "1f1b_2stages_x_dp2_8mb": ((2, 2), ("pp", "dp"), 2, 8, "1F1B", None),
    "gpipe_4stages_8mb": ((4,), ("pp",), 4, 8, "GPipe", None),
    "1f1b_4stages_4mb": ((4,), ("pp",), 4, 4, "1F1B", None),
    "interleaved_4stages_on_2_x_dp2_4mb": ((2, 2), ("pp", "dp"), 4, 4, "Interleaved1F1B", None),
    "1f1b_2stages_x_tp2_4mb": ((2, 2), ("pp", "tp"), 2, 4, "1F1B", "tp"),
}


@pytest.mark.parametrize("case", list(PP_CASES))
def test_pipeline_trains_like_torch_on_one_device(dt, case):
    shape, names, n_stages, n_mb, schedule, inner = PP_CASES[case]
    from dtorch.distributed.pipelining import pipeline
    weights = mlp_weights(seed=21)
    batches = batches_of(22, (16, WIDTHS[0]), (16, WIDTHS[-1]))

    ref = torch_mlp(weights)
    want = torch_train(ref, ref.parameters(), batches,
                       lambda m, x, y: torch.nn.functional.mse_loss(m(x), y))

    mesh = dt.init_device_mesh("cpu", shape, mesh_dim_names=names)
    stages, linears = dtorch_stages(dt, weights, n_stages)
    pp = pipeline(stages, mesh["pp"], n_microbatches=n_mb, schedule=schedule)
    if inner == "tp":
        from dtorch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                        parallelize_module)
        for s, stage in enumerate(pp.stages):
            parallelize_module(stage, pp.stage_meshes[s]["tp"],
                               {"0": ColwiseParallel(), "2": RowwiseParallel()})
        assert linears[0].weight.placements == (Shard(0),)
    opt = dt.optim.SGD([p for s in pp.stages for p in s.parameters()], lr=LR,
                       momentum=MOMENTUM)
    got = []
    for x, y in batches:
        opt.zero_grad()
        got.append(pp.step(x, target=y, loss_fn=dt.nn.functional.mse_loss).item())
        opt.step()
    assert_close(got, want, tol=TOL)
    torch_linears = [m for m in ref if isinstance(m, torch.nn.Linear)]
    for lin, tlin in zip(linears, torch_linears):
        assert_close(lin.weight.numpy(), tlin.weight.detach().numpy(), tol=TOL)
        assert_close(lin.bias.numpy(), tlin.bias.detach().numpy(), tol=TOL)
    # The training moved the weights: parity is not that of the initial ones.
    assert not np.allclose(linears[0].weight.numpy(), weights[0][0], atol=1e-3)


# ---- expert parallel ----------------------------------------------------------------

D, FF, E, K, CF, AUX = 8, 12, 4, 2, 1.0, 0.01


def moe_weights(seed):
    rng = np.random.default_rng(seed)
    w = {"router.weight": rng.standard_normal((E, D)).astype(np.float32),
         "w1": (rng.standard_normal((E, D, FF)) / math.sqrt(D)).astype(np.float32),
         "b1": (rng.standard_normal((E, FF)) * 0.1).astype(np.float32),
         "w2": (rng.standard_normal((E, FF, D)) / math.sqrt(FF)).astype(np.float32),
         "b2": (rng.standard_normal((E, D)) * 0.1).astype(np.float32)}
    w["router.weight"][0] += 1.0  # a favourite expert, so its capacity overflows
    return w


class TorchDenseMoE(torch.nn.Module):
    """The routing of dtorch.nn.MoE written token by token in torch: top-k
    of the router's softmax, gates renormalized over the k, every expert
    takes at most `capacity` assignments (first choices of all tokens
    before second choices, tokens in order), the rest dropped; Switch's
    load-balancing loss."""

    def __init__(self, w):
        super().__init__()
        self.p = torch.nn.ParameterDict({k.replace(".", "_"): torch.nn.Parameter(
            torch.from_numpy(v.copy())) for k, v in w.items()})
        self.dropped = 0

    def forward(self, x):
        p = self.p
        n = x.shape[0]
        probs = torch.softmax(x @ p["router_weight"].T, -1)
        vals, idx = torch.topk(probs, K, dim=-1)
        gates = vals / vals.sum(-1, keepdim=True)
        cap = max(1, math.ceil(CF * n * K / E))
        taken = [0] * E
        rows = [torch.zeros(D) for _ in range(n)]
        self.dropped = 0
        for j in range(K):
            for t in range(n):
                ex = int(idx[t, j])
                if taken[ex] >= cap:
                    self.dropped += 1
                    continue
                taken[ex] += 1
                h = torch.nn.functional.gelu(x[t] @ p["w1"][ex] + p["b1"][ex])
                rows[t] = rows[t] + gates[t, j] * (h @ p["w2"][ex] + p["b2"][ex])
        fraction = torch.bincount(idx.T.reshape(-1), minlength=E).float() / (n * K)
        self.aux_loss = E * (fraction * probs.mean(0)).sum()
        return torch.stack(rows)


@pytest.mark.parametrize("ep", [2, 4])
def test_expert_parallel_trains_like_a_dense_torch_moe(dt, ep):
    from dtorch.distributed.tensor.parallel import ExpertParallel, parallelize_module
    from dtorch.nn import MoE
    weights = moe_weights(31)
    batches = batches_of(32, (16, D), (16, D))

    ref = TorchDenseMoE(weights)

    def torch_loss(m, x, y):
        return torch.nn.functional.mse_loss(m(x), y) + AUX * m.aux_loss

    want = torch_train(ref, ref.parameters(), batches, torch_loss)
    assert ref.dropped > 0  # the capacity dropped tokens in the last step

    mesh = (dt.init_device_mesh("cpu", (4,), mesh_dim_names=("ep",)) if ep == 4 else
            dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "ep")))
    moe = MoE(D, FF, n_experts=E, top_k=K, capacity_factor=CF)
    moe.load_state_dict(weights)
    parallelize_module(moe, mesh["ep"], ExpertParallel())
    assert moe.w1.placements == (Shard(0),)
    tokens = [Replicate()] * mesh.ndim
    tokens[0] = Shard(0)  # the tokens data parallel on the first dim
    opt = dt.optim.SGD(moe.parameters(), lr=LR, momentum=MOMENTUM)
    got = []
    for x, y in batches:
        opt.zero_grad()
        out = moe(dt.distribute_tensor(x, mesh, tokens))
        loss = (dt.nn.functional.mse_loss(out, dt.distribute_tensor(y, mesh, tokens))
                + moe.aux_loss * AUX)
        loss.backward()
        opt.step()
        got.append(loss.item())
    assert_close(got, want, tol=TOL)
    for name, value in moe.state_dict().items():
        assert_close(value.numpy(), ref.p[name.replace(".", "_")].detach().numpy(), tol=TOL)
    # Dispatch and combine went through the exchange of counted rows.
    moe(dt.distribute_tensor(batches[0][0], mesh, tokens)).numpy()
    assert dt.last_ir("rank").count("rank.all_to_all_v") >= 2


# ---- context parallel ---------------------------------------------------------------

B, S, DM, H = 2, 16, 8, 2


def attention_weights(seed):
    rng = np.random.default_rng(seed)
    return {n: (rng.standard_normal((DM, DM)) / math.sqrt(DM)).astype(np.float32)
            for n in ("wq", "wk", "wv", "wo")}


def attention_layer(F, w, x, causal):
    """x [B, S, DM] -> multi-head self-attention with H heads, by
    scaled_dot_product_attention: the same code in torch and in dtorch."""
    def heads(t):
        return t.reshape(B, S, H, DM // H).transpose(1, 2)
    q, k, v = heads(x @ w["wq"]), heads(x @ w["wk"]), heads(x @ w["wv"])
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return o.transpose(1, 2).reshape(B, S, DM) @ w["wo"]


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_ring_attention_trains_like_torch_attention(dt, cp, causal):
    from dtorch.distributed.tensor.experimental import context_parallel
    weights = attention_weights(41 + causal)
    batches = batches_of(42 + cp, (B, S, DM), (B, S, DM))

    tw = {n: torch.nn.Parameter(torch.from_numpy(v.copy())) for n, v in weights.items()}
    want = torch_train(None, list(tw.values()), batches, lambda _, x, y: torch.nn.functional.
                       mse_loss(attention_layer(torch.nn.functional, tw, x, causal), y))

    mesh = (dt.init_device_mesh("cpu", (4,), mesh_dim_names=("cp",)) if cp == 4 else
            dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "cp")))
    rep = [Replicate()] * mesh.ndim
    params = {n: dt.nn.Parameter(dt.distribute_tensor(v, mesh, rep)) for n, v in weights.items()}
    opt = dt.optim.SGD(list(params.values()), lr=LR, momentum=MOMENTUM)
    got = []
    for x, y in batches:
        opt.zero_grad()
        xt, yt = dt.distribute_tensor(x, mesh, rep), dt.distribute_tensor(y, mesh, rep)
        with context_parallel(mesh["cp"], buffers=[xt, yt], seq_dims=[1, 1]):
            out = attention_layer(dt.nn.functional, params, xt, causal)
            loss = dt.nn.functional.mse_loss(out, yt)
        got.append(loss.item())
        if len(got) == 1:  # the forward ran as ring attention: blocks went point to point
            assert "rank.batch_send_recv" in dt.last_ir("rank")
        loss.backward()
        opt.step()
    assert_close(got, want, tol=TOL)
    for n, p in params.items():
        assert_close(p.numpy(), tw[n].detach().numpy(), tol=TOL)
