"""Parity of training: the GPT of examples/gpt/model.py, with the same
initial weights (drawn by numpy, loaded with load_state_dict) and the same
batches, trained for 20 steps with AdamW under the cosine-with-warmup
schedule in float32 on 1 rank, DP=4, DP x TP 2x2, FSDP=4 and FSDP x TP 2x2,
gives the loss of every step of the numpy reference (reference_gpt.py) to
1e-4 relative, and its final parameters.

The layouts use the APIs of the example and of torch: DP places the batch
Shard(0) on "dp" with replicated parameters; DP x TP lays the parameters
out by placements (the example's `parallelize`) or with
`parallelize_module` (ColwiseParallel / RowwiseParallel); FSDP wraps every
block and the root in `fully_shard`."""
import os
import sys

import numpy as np
import pytest

import reference_gpt as ref
import torch_gpt

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))

import model as gpt_model  # noqa: E402

CFG = ref.PARITY["cfg"]
STEPS = ref.PARITY["steps"]
LR, WARMUP, BETAS, WEIGHT_DECAY = (ref.PARITY[k] for k in ("lr", "warmup", "betas",
                                                           "weight_decay"))
LOSS_RTOL = 1e-4

# name -> (mesh shape, mesh dim names, how the model is laid out)
LAYOUTS = {
    "1": ((1,), None, None),
    "dp4": ((4,), ("dp",), None),
    "dp2xtp2": ((2, 2), ("dp", "tp"), "placements"),
    "dp2xtp2_parallelize_module": ((2, 2), ("dp", "tp"), "parallelize_module"),
    "fsdp4": ((4,), ("dp",), "fully_shard"),
    "fsdp2xtp2": ((2, 2), ("dp", "tp"), "parallelize_module+fully_shard"),
}


@pytest.fixture(scope="module")
def reference():
    """(initial float32 parameters, batches, float32 losses, final float32
    parameters, float64 losses)."""
    init, batches = ref.parity_problem(np.float32)
    losses, params = ref.parity_train(np.float32)
    losses64, _ = ref.parity_train(np.float64)
    return init, batches, losses, params, losses64


@pytest.fixture(scope="module")
def torch_losses():
    """torch's float32 losses on the same problem, or None without torch
    (test_reference_gpt.py checks the reference against torch)."""
    if torch_gpt.unavailable():
        return None
    return np.array(torch_gpt.parity_runs()["float32"][0])


def _tp_plan():
    from dtorch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    return {path: ColwiseParallel() if style == "colwise" else RowwiseParallel()
            for path, style in gpt_model.TP_PLAN.items()}


def build(dt, layout, init):
    """The example's GPT on the layout's mesh with the reference's initial
    weights; returns (model, mesh, batch placements)."""
    from dtorch import Replicate, Shard
    from dtorch.distributed.fsdp import fully_shard
    from dtorch.distributed.tensor.parallel import parallelize_module
    shape, names, how = LAYOUTS[layout]
    mesh = dt.init_device_mesh("cpu", shape, mesh_dim_names=names)
    cfg = gpt_model.GPTConfig(vocab_size=CFG.vocab_size, block_size=CFG.block_size,
                              n_layer=CFG.n_layer, n_head=CFG.n_head, d_model=CFG.d_model)
    with dt.nn.default_device_mesh(mesh):
        model = gpt_model.GPT(cfg)
    model.load_state_dict(init)
    how = how or ""
    if how == "placements":
        gpt_model.parallelize(model, mesh)
    if "parallelize_module" in how:
        for block in model.blocks:
            parallelize_module(block, mesh["tp"], _tp_plan())
    if "fully_shard" in how:
        dp_mesh = mesh["dp"] if mesh.ndim > 1 else mesh
        for block in model.blocks:
            fully_shard(block, mesh=dp_mesh)
        fully_shard(model, mesh=dp_mesh)
    batch = [Shard(0) if n == "dp" else Replicate() for n in (names or (None,))]
    return model, mesh, batch


def train(dt, layout, init, batches):
    """Trains as examples/gpt/train.py does; returns (losses, final
    parameters as numpy by name, the model)."""
    model, mesh, placements = build(dt, layout, init)
    opt = dt.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)
    sched = dt.optim.lr_scheduler.CosineWithWarmupLR(opt, num_warmup_steps=WARMUP,
                                                     num_training_steps=STEPS)
    losses = []
    for idx, targets in batches:
        x = dt.tensor(idx, device_mesh=mesh, placements=placements)
        y = dt.tensor(targets, device_mesh=mesh, placements=placements)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    params = {k: v.numpy() for k, v in model.state_dict().items()}
    return losses, params, model


def test_reference_learns_and_float32_tracks_float64(reference):
    _, _, losses, _, losses64 = reference
    assert len(losses) == STEPS and np.all(np.isfinite(losses))
    # The first loss is that of a near-uniform prediction; training lowers it.
    assert abs(losses[0] - np.log(CFG.vocab_size)) < 0.1
    assert np.mean(losses[-3:]) < 0.8 * losses[0], losses
    # float32 rounding moves the reference's own losses far less than the
    # tolerance the layouts are held to.
    drift = np.max(np.abs(np.array(losses) / np.array(losses64) - 1))
    assert drift < LOSS_RTOL / 10, drift


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_training_matches_the_reference(dt, reference, torch_losses, layout):
    init, batches, want_losses, want_params, _ = reference
    losses, params, model = train(dt, layout, init, batches)
    for who, want in (("reference", want_losses), ("torch", torch_losses)):
        if want is None:
            continue
        rel = np.abs(np.array(losses) / np.array(want) - 1)
        assert np.all(rel <= LOSS_RTOL), (
            f"{layout}: worst loss error relative to {who} {rel.max():.2e} at step "
            f"{int(rel.argmax())}\ndtorch: {np.array(losses)}\n{who}: {np.array(want)}")
    assert set(params) == set(want_params)
    for name, want in want_params.items():
        # AdamW moves each element by up to ~lr per step; float32 rounding
        # of the gradients may move an element's updates a little.
        np.testing.assert_allclose(params[name], want, rtol=1e-3, atol=1e-4,
                                   err_msg=f"{layout}: parameter {name}")


def test_layouts_really_shard(dt, reference):
    """The layouts are what they claim: a TP weight is Shard(0)/Shard(1) on
    "tp", an FSDP parameter Shard(0) on "dp" (so the parity above covers
    the collectives of each style)."""
    from dtorch import Replicate, Shard
    init = reference[0]
    raw = {"R": lambda d: Replicate(), "S": Shard}
    pl = lambda p: tuple(raw[k](d) for k, d, _ in p._placements_raw)  # noqa: E731
    for layout in ("dp2xtp2", "dp2xtp2_parallelize_module"):
        model, _, _ = build(dt, layout, init)
        attn = model.blocks[0].attn
        assert pl(attn.q.weight) == (Replicate(), Shard(0)), layout
        assert pl(attn.q.bias) == (Replicate(), Shard(0)), layout
        assert pl(attn.proj.weight) == (Replicate(), Shard(1)), layout
        assert pl(model.blocks[1].mlp.fc1.weight) == (Replicate(), Shard(0)), layout
        assert pl(model.blocks[1].mlp.fc2.weight) == (Replicate(), Shard(1)), layout
    model, _, _ = build(dt, "fsdp4", init)
    assert pl(model.blocks[1].mlp.fc1.weight) == (Shard(0),)
    assert pl(model.tok_emb.weight) == (Shard(0),)
    model, _, _ = build(dt, "fsdp2xtp2", init)
    assert pl(model.blocks[0].attn.q.weight) == (Shard(0), Shard(0))
    assert pl(model.blocks[0].mlp.fc2.weight) == (Shard(0), Shard(1))
    assert pl(model.ln_f.weight) == (Shard(0), Replicate())
    assert {r: a.shape for r, a in model.blocks[0].attn.q.weight.local_shards().items()} == {
        r: (CFG.d_model // 4, CFG.d_model) for r in range(4)}
