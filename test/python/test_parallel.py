"""The parallel styles: tensor parallel (ColwiseParallel, RowwiseParallel,
SequenceParallel, loss parallel), fully_shard (ZeRO-3) and data parallel by
placements, alone and on a 2-D mesh, give the single-rank training run;
steady steps compile nothing. (That a fully-sharded model holds a quarter of
its bytes per rank is read from the runtime's buffer tables in
test_memory_stats.py.)"""
import numpy as np
import pytest

import dtorch
from dtorch import Replicate, Shard, nn
from dtorch.distributed import distribute_module
from dtorch.distributed.fsdp import FSDPModule, fully_shard
from dtorch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                PrepareModuleOutput, RowwiseParallel,
                                                SequenceParallel, parallelize_module)

from parallel_models import MLP, LAYOUTS, TinyTransformer, layout_mesh, place_batch, train

_reference = {}


def reference(model_cls, opt_name):
    key = (model_cls, opt_name)
    if key not in _reference:
        _reference[key] = train(model_cls, "1", opt_name)[:2]
    return _reference[key]


def assert_same_run(got, want, tol=1e-5):
    losses, params = got
    want_losses, want_params = want
    np.testing.assert_allclose(losses, want_losses, rtol=tol, atol=0)
    assert set(params) == set(want_params)
    for name, value in params.items():
        np.testing.assert_allclose(value, want_params[name], rtol=tol, atol=1e-12,
                                   err_msg=name)


@pytest.mark.parametrize("layout", [k for k in LAYOUTS if k != "1"])
@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_mlp_training_matches_single_rank(dt, layout, opt_name):
    losses, params, compiles, _, _ = train(MLP, layout, opt_name)
    assert losses[-1] < losses[0]
    assert_same_run((losses, params), reference(MLP, opt_name))
    # From the third step on, a step runs cached programs only.
    assert compiles[2] == compiles[-1], compiles


@pytest.mark.parametrize("layout", [k for k in LAYOUTS if k != "1"])
@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_transformer_training_matches_single_rank(dt, layout, opt_name):
    losses, params, compiles, model, _ = train(TinyTransformer, layout, opt_name)
    assert losses[-1] < losses[0]
    assert_same_run((losses, params), reference(TinyTransformer, opt_name))
    assert compiles[2] == compiles[-1], compiles


@pytest.mark.parametrize("layout", ["dp4", "dp2xtp2"])
@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_zero1_training_matches_single_rank_with_sharded_state(dt, layout, opt_name):
    losses, params, compiles, model, opt = train(MLP, layout, opt_name, zero1=True)
    assert_same_run((losses, params), reference(MLP, opt_name))
    assert compiles[2] == compiles[-1], compiles
    dp_size = layout_mesh(layout)[LAYOUTS[layout][2]].size()
    for p in model.parameters():
        for key, value in opt.state[p].items():
            if key == "step":
                continue
            held = sum(a.size for a in value.local_shards().values())
            assert held * dp_size == sum(a.size for a in p.local_shards().values()), key
            root = value._placements_raw
            assert root[0] == ("S", 0, ""), (key, root)


def test_styles_lay_parameters_out_in_place(dt):
    mesh = layout_mesh("dp2xtp2")
    with nn.default_device_mesh(mesh):
        model = MLP()
    before = {n: (p, p.numpy()) for n, p in model.named_parameters()}
    opt = dtorch.optim.SGD(model.parameters(), lr=0.1)  # made before: must still see them
    parallelize_module(model, mesh["tp"], model.tp_plan)
    for n, p in model.named_parameters():
        assert p is before[n][0]
        np.testing.assert_array_equal(p.numpy(), before[n][1])
    assert model.fc1.weight.placements == (Shard(0),)
    assert model.fc1.bias.placements == (Shard(0),)
    assert model.fc2.weight.placements == (Shard(1),)
    assert model.fc2.bias.placements == (Replicate(),)
    assert model.fc1.weight.device_mesh == mesh["tp"]
    assert opt.param_groups[0]["params"][0] is model.fc1.weight
    # Activations: the colwise output is sharded on its last dim, the
    # rowwise output replicated; a batch sharded on "dp" stays so.
    x = dtorch.randn(4, 8, device_mesh=mesh, placements=[Shard(0), Replicate()],
                     dtype=dtorch.float64)
    assert model.fc1(x).placements == (Shard(0), Shard(1))
    assert model(x).placements == (Shard(0), Replicate())
    # A numpy input is the global value, placed with input_layouts first.
    arr = np.random.default_rng(0).standard_normal((4, 8))
    out = model(arr)
    assert out.placements[1] == Replicate()
    np.testing.assert_allclose(out.numpy(), model(dtorch.tensor(arr, device_mesh=mesh)).numpy(),
                               rtol=1e-12)


def test_fully_shard_shards_and_gathers(dt):
    mesh = layout_mesh("fsdp2xtp2")
    with nn.default_device_mesh(mesh):
        model = MLP()
    parallelize_module(model, mesh["tp"], model.tp_plan)
    w = model.fc1.weight
    fully_shard(model.fc1, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    assert isinstance(model, FSDPModule) and isinstance(model, MLP)
    assert model.fc1.weight is w
    # Colwise Shard(0) on "tp", then Shard(0) on "dp": each rank a quarter.
    assert w._placements_raw == [("S", 0, ""), ("S", 0, "")]
    assert {r: a.shape for r, a in w.local_shards().items()} == {r: (4, 8) for r in range(4)}
    assert model.fc2.weight._placements_raw == [("S", 0, ""), ("S", 1, "")]
    assert model.fc1._fsdp_state.managed[0][2] is w
    assert [p for _, _, p in model._fsdp_state.managed] == [model.fc2.weight, model.fc2.bias]
    # Inside forward the gathered weight is used, after it the sharded one.
    seen = []
    model.fc1.register_forward_pre_hook(lambda m, a: seen.append(m._parameters["weight"]))
    x = dtorch.randn(4, 8, device_mesh=mesh, placements=[Shard(0), Replicate()],
                     dtype=dtorch.float64)
    model(x).sum().backward()
    assert seen[0] is not w and seen[0]._placements_raw == [("R", 0, ""), ("S", 0, "")]
    assert model.fc1._parameters["weight"] is w
    assert w.grad.placements == w.placements


def test_fsdp_step_gathers_and_reduce_scatters(dt):
    """The collectives of a ZeRO-3 step follow from the placements: the
    weights are all-gathered on "dp" for the forward, and their gradients
    reduce-scattered back into Shard(0); no parameter-sized all_reduce."""
    mesh = layout_mesh("fsdp4")
    with nn.default_device_mesh(mesh):
        model = MLP()
    fully_shard(model.fc1, mesh=mesh)
    fully_shard(model.fc2, mesh=mesh)
    # A batch larger than the weights: reduce-scattering the weight
    # gradients is then the cheapest plan (for a tiny batch the planner
    # rather gathers the activations).
    x = dtorch.distribute_tensor(np.ones((64, 8)), mesh, [Shard(0)])
    y = dtorch.distribute_tensor(np.arange(64) % 8, mesh, [Shard(0)])
    dtorch.synchronize()  # the sharded parameters exist on the workers
    nn.functional.cross_entropy(model(x), y).backward()
    dtorch.synchronize()
    rows = list(dtorch.explain())
    weights = {(16, 8), (8, 16)}
    gathers = [r for r in rows if tuple(r["shape"]) in weights
               and any("all_gather" in c for c in r["collectives"])]
    scatters = [r for r in rows if tuple(r["shape"]) in weights
                and any("reduce_scatter" in c for c in r["collectives"])]
    reduces = [r for r in rows if tuple(r["shape"]) in weights
               and any("all_reduce" in c for c in r["collectives"])]
    assert len(gathers) >= 2 and len(scatters) == 2 and not reduces, str(dtorch.explain())


def test_loss_parallel_never_gathers_the_logits(dt):
    mesh = layout_mesh("tp4")
    rng = np.random.default_rng(0)
    logits_np = rng.standard_normal((6, 12))
    target_np = rng.integers(0, 12, size=6)
    logits = dtorch.distribute_tensor(logits_np, mesh, [Shard(1)]).requires_grad_()
    target = dtorch.distribute_tensor(target_np, mesh, [Replicate()])
    from dtorch.distributed.tensor.parallel import loss_parallel
    with loss_parallel():
        loss = nn.functional.cross_entropy(logits, target)
        loss.backward()
    dtorch.synchronize()
    rows = list(dtorch.explain())
    assert not [r for r in rows if tuple(r["shape"]) == (6, 12) and r["collectives"]], \
        str(dtorch.explain())
    assert logits.grad.placements == (Shard(1),)
    shifted = logits_np - logits_np.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    np.testing.assert_allclose(loss.item(), -logp[np.arange(6), target_np].mean(), rtol=1e-12)
    want = np.exp(logp)
    want[np.arange(6), target_np] -= 1
    np.testing.assert_allclose(logits.grad.numpy(), want / 6, rtol=1e-10, atol=1e-14)


def test_sequence_parallel_and_prepare_module_io(dt):
    mesh = layout_mesh("tp4")
    ln = parallelize_module(nn.LayerNorm(6, device_mesh=mesh, dtype=dtorch.float64), mesh,
                            SequenceParallel())
    x = dtorch.randn(2, 8, 6, device_mesh=mesh, dtype=dtorch.float64)
    out = ln(x)
    assert out.placements == (Shard(1),) and ln.weight.placements == (Replicate(),)
    xs = x.numpy()
    want = (xs - xs.mean(-1, keepdims=True)) / np.sqrt(xs.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12)
    # A dropout region: the mask depends on each element's global position,
    # so the sharded region drops what the replicated one drops.
    drop = parallelize_module(nn.Dropout(0.5), mesh, SequenceParallel())
    dtorch.manual_seed(7)
    sharded = drop(x)
    dtorch.manual_seed(7)
    plain = nn.Dropout(0.5)(x)
    assert sharded.placements == (Shard(1),)
    np.testing.assert_array_equal(sharded.numpy(), plain.numpy())
    ident = parallelize_module(nn.Identity(), mesh, PrepareModuleInput(
        input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)))
    assert ident(out).placements == (Replicate(),)
    ident = parallelize_module(nn.Identity(), mesh, PrepareModuleOutput(
        output_layouts=(Replicate(),), desired_output_layouts=(Shard(0),)))
    assert ident(x).placements == (Shard(0),)


def test_plan_keys_with_wildcards_and_errors(dt):
    mesh = layout_mesh("tp4")
    with nn.default_device_mesh(mesh):
        model = TinyTransformer()
    parallelize_module(model, mesh, {"layers.*.mlp.fc*": ColwiseParallel()})
    assert model.layers[0].mlp.fc1.weight.placements == (Shard(0),)
    assert model.layers[0].mlp.fc2.weight.placements == (Shard(0),)
    assert model.layers[0].attn.q.weight.placements == (Replicate(),)
    with pytest.raises(ValueError, match="matches no submodule"):
        parallelize_module(model, mesh, {"layers.*.nothing": ColwiseParallel()})
    with pytest.raises(NotImplementedError, match="ColwiseParallel supports"):
        parallelize_module(model, mesh, {"norm": ColwiseParallel()})
    with pytest.raises(ValueError, match="1-D mesh"):
        parallelize_module(model, layout_mesh("dp2xtp2"), ColwiseParallel())


def test_parallelize_moves_a_model_from_another_mesh_and_meta(dt):
    mesh = layout_mesh("dp2xtp2")
    dtorch.manual_seed(3)
    fc = nn.Linear(8, 4, dtype=dtorch.float64)  # on the default mesh
    w = fc.weight
    value = w.numpy()
    parallelize_module(fc, mesh["tp"], ColwiseParallel())
    assert fc.weight is w and w.placements == (Shard(0),) and w.device_mesh == mesh["tp"]
    np.testing.assert_array_equal(w.numpy(), value)
    with nn.meta_init():
        meta = nn.Linear(8, 4, device_mesh=mesh, dtype=dtorch.float64)
    parallelize_module(meta, mesh["tp"], RowwiseParallel())
    assert meta.weight.is_meta and meta.weight.placements == (Shard(1),)
    meta.to_empty()
    assert not meta.weight.is_meta and meta.weight.placements == (Shard(1),)
    assert meta.weight.local_shards()[0].shape == (4, 4)
    # fully_shard of a meta model: the values are then made sharded.
    with nn.meta_init():
        meta = nn.Linear(8, 4, device_mesh=mesh, dtype=dtorch.float64)
    fully_shard(meta, mesh=mesh["dp"])
    assert meta.weight.is_meta and meta.weight.placements == (Shard(0),)
    meta.to_empty()
    meta.reset_parameters()
    assert {a.shape for a in meta.weight.local_shards().values()} == {(2, 8)}
    assert abs(meta.weight.numpy()).max() > 0


def test_colwise_and_rowwise_embedding(dt):
    mesh = layout_mesh("tp4")
    dtorch.manual_seed(5)
    emb = nn.Embedding(12, 8, device_mesh=mesh, dtype=dtorch.float64)
    table = emb.weight.numpy()
    idx = dtorch.tensor(np.array([[1, 5, 11], [0, 0, 7]]), device_mesh=mesh)
    parallelize_module(emb, mesh, ColwiseParallel())
    assert emb.weight.placements == (Shard(1),)
    out = emb(idx)
    assert out.placements == (Shard(2),)
    np.testing.assert_array_equal(out.numpy(), table[idx.numpy()])
    parallelize_module(emb, mesh, RowwiseParallel(input_layouts=Replicate()))
    assert emb.weight.placements == (Shard(0),)
    out = emb(idx)
    assert out.placements == (Replicate(),)
    np.testing.assert_array_equal(out.numpy(), table[idx.numpy()])


def test_distribute_module(dt):
    mesh = layout_mesh("dp4")
    calls = []

    def partition(name, mod, device_mesh):
        calls.append(name)
        if isinstance(mod, nn.Linear) and name == "fc1":
            dtorch.distributed._layout.relayout_(mod.weight, device_mesh, [Shard(0)])

    def input_fn(mod, inputs, device_mesh):
        return tuple(x.redistribute(device_mesh, [Shard(0)]) for x in inputs)

    def output_fn(mod, outputs, device_mesh):
        return outputs.redistribute(device_mesh, [Replicate()])

    dtorch.manual_seed(0)
    model = MLP()  # on the default mesh: moved onto `mesh`
    want = {n: p.numpy() for n, p in model.named_parameters()}
    distribute_module(model, mesh, partition, input_fn, output_fn)
    assert calls == ["", "fc1", "fc2"]
    assert model.fc1.weight.placements == (Shard(0),)
    assert model.fc2.weight.placements == (Replicate(),)
    assert model.fc2.weight.device_mesh == mesh
    for n, p in model.named_parameters():
        np.testing.assert_array_equal(p.numpy(), want[n])
    x = dtorch.randn(8, 8, device_mesh=mesh, dtype=dtorch.float64)
    assert model(x).placements == (Replicate(),)


def test_data_parallel_gradient_reduction_follows_from_the_rules(dt):
    """A batch sharded on "dp" and replicated parameters: the only
    parameter-sized communication of a step is one all_reduce per gradient,
    where it is accumulated into .grad (the redistribute to the
    parameter's Replicate)."""
    mesh = layout_mesh("dp4")
    with nn.default_device_mesh(mesh):
        model = MLP()
    dtorch.synchronize()
    rng = np.random.default_rng(0)
    batch = place_batch((rng.standard_normal((64, 8)), rng.integers(0, 8, 64)), "dp4")
    model.loss(batch).backward()
    dtorch.synchronize()
    shapes = {tuple(p.shape) for p in model.parameters()}
    rows = [r for r in dtorch.explain() if tuple(r["shape"]) in shapes]
    assert sorted(tuple(r["shape"]) for r in rows) == sorted(
        tuple(p.shape) for p in model.parameters()), str(dtorch.explain())
    for r in rows:
        assert r["collectives"] == ['all_reduce(sum) on "dp"'], r
    for p in model.parameters():
        assert p.grad.placements == (Replicate(),)


def test_hsdp_on_a_2d_mesh_matches_single_rank(dt):
    """fully_shard on a 2-D (replicate, shard) mesh: parameters replicated on
    the first dim, sharded on the second; the batch sharded on both."""
    mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("rep", "shard"))
    dtorch.manual_seed(0)
    with nn.default_device_mesh(mesh):
        model = MLP()
    fully_shard(model.fc1, mesh=mesh)
    fully_shard(model, mesh=mesh)
    assert model.fc1.weight.placements == (Replicate(), Shard(0))
    opt = dtorch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    from parallel_models import batches
    losses = []
    for x, y in batches(MLP, 5):
        x = dtorch.distribute_tensor(x, mesh, [Shard(0), Shard(0)])
        y = dtorch.distribute_tensor(y, mesh, [Shard(0), Shard(0)])
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert_same_run((losses, {n: p.numpy() for n, p in model.named_parameters()}),
                    reference(MLP, "sgd"))
    with pytest.raises(ValueError, match="1-D mesh"):
        fully_shard(MLP(), mesh=dtorch.init_device_mesh("cpu", (1, 2, 2)))
