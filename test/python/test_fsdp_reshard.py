"""fully_shard's reshard_after_forward: with True (ZeRO-3) the forward's
gathered parameters are released after the module's forward and the
backward gathers them again (a second all_gather per parameter the backward
reads, marked ``dtorch.regather`` so the compiler does not merge it with the
forward's); with False (ZeRO-2) the backward reads the forward's gathered
copy. Both train alike and like the unsharded model."""
import re

import numpy as np
import pytest

import dtorch
from dtorch import Replicate, Shard, nn
from dtorch.distributed.fsdp import fully_shard

F64 = dtorch.float64
# Weight shapes of ThreeLinear: each is its own (out, in) pair.
WEIGHTS = {"fc1": (16, 8), "fc2": (12, 16), "fc3": (8, 12)}
BIASES = {(16,), (12,), (8,)}
BATCH = 64  # larger than the weights: the planner gathers weights, not activations


class ThreeLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16, dtype=F64)
        self.fc2 = nn.Linear(16, 12, dtype=F64)
        self.fc3 = nn.Linear(12, 8, dtype=F64)

    def forward(self, x):
        return self.fc3(nn.functional.gelu(self.fc2(nn.functional.gelu(self.fc1(x)))))


_meshes = {}


def mesh4():
    if "dp" not in _meshes:
        _meshes["dp"] = dtorch.init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
    return _meshes["dp"]


def build(reshard_after_forward):
    """ThreeLinear on 4 ranks, seeded alike; reshard_after_forward None:
    not fully sharded (plain data parallel, the reference)."""
    mesh = mesh4()
    dtorch.manual_seed(0)
    with nn.default_device_mesh(mesh):
        model = ThreeLinear()
    if reshard_after_forward is not None:
        for name in WEIGHTS:
            fully_shard(getattr(model, name), mesh=mesh,
                        reshard_after_forward=reshard_after_forward)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return model


def batch(step):
    rng = np.random.default_rng(step)
    mesh = mesh4()
    x = dtorch.distribute_tensor(rng.standard_normal((BATCH, 8)), mesh, [Shard(0)])
    y = dtorch.distribute_tensor(rng.integers(0, 8, BATCH), mesh, [Shard(0)])
    return x, y


def train(reshard_after_forward, steps=3):
    """(losses, final parameters by name) of a few AdamW steps."""
    model = build(reshard_after_forward)
    opt = dtorch.optim.AdamW(model.parameters(), lr=0.05)
    losses = []
    for step in range(steps):
        x, y = batch(step)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, {n: p.numpy() for n, p in model.named_parameters()}


def step_explanation(reshard_after_forward):
    """explain() rows, its table and the "redistributed" IR of one training
    step (the second: the first one's segment also holds the
    initialisation)."""
    model = build(reshard_after_forward)
    opt = dtorch.optim.AdamW(model.parameters(), lr=0.05)
    for step in range(2):
        x, y = batch(step)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        loss.item()
    explanation = dtorch.explain()
    return list(explanation), str(explanation), dtorch.last_ir("redistributed")


def gathers_by_shape(rows):
    """shape -> (all_gather rows, of which regathers)."""
    out = {}
    for r in rows:
        if any("all_gather" in c for c in r["collectives"]):
            n, again = out.get(tuple(r["shape"]), (0, 0))
            out[tuple(r["shape"])] = (n + 1, again + bool(r["regather"]))
    return out


def test_true_gathers_again_for_the_backward_false_once(dt):
    """Per step: True gathers each weight that the backward reads (fc2's and
    fc3's: the gradient of their input; fc1's input needs none) twice, the
    second a regather; False once. Weights the backward does not read (fc1)
    and biases (an add's gradient reads no operand) are gathered once either
    way."""
    rows_true, table_true, ir_true = step_explanation(True)
    rows_false, table_false, ir_false = step_explanation(False)
    got_true, got_false = gathers_by_shape(rows_true), gathers_by_shape(rows_false)
    read_by_backward = {WEIGHTS["fc2"], WEIGHTS["fc3"]}
    for shape in WEIGHTS.values():
        want = (2, 1) if shape in read_by_backward else (1, 0)
        assert got_true.get(shape) == want, (shape, table_true)
        assert got_false.get(shape) == (1, 0), shape
    for shape in BIASES:
        assert got_true.get(shape, (0, 0))[1] == 0 and got_false.get(shape, (0, 0))[1] == 0
    # The lowered program shows it: one all_gather more per read weight,
    # each marked with the attribute.
    gathers = lambda ir: len(re.findall(r"dtensor\.all_gather ", ir))  # noqa: E731
    marked = lambda ir: len(re.findall(r"dtensor\.all_gather .*dtorch\.regather", ir))  # noqa: E731
    assert gathers(ir_true) == gathers(ir_false) + len(read_by_backward)
    assert marked(ir_true) == len(read_by_backward) and marked(ir_false) == 0
    # The table names them.
    assert table_true.count("redistribute (regather)") == len(read_by_backward), table_true
    assert "(regather)" not in table_false


def test_true_releases_the_gathered_copy_after_forward(dt):
    """After the module's forward, True leaves the forward's gathered copy
    as metadata only (the backward cannot read it); False keeps its value."""
    x, y = batch(0)
    for flag in (True, False):
        model = build(flag)
        seen = []
        model.fc3.register_forward_pre_hook(lambda m, a: seen.append(m._parameters["weight"]))
        loss = nn.functional.cross_entropy(model(x), y)
        gathered = seen[0]
        assert gathered is not model.fc3.weight
        assert gathered._placements_raw == [("R", 0, "")]
        assert gathered.is_meta is flag, flag
        loss.backward()
        assert model.fc3.weight.grad.placements == (Shard(0),)
        loss.item()


def test_true_and_false_train_alike_and_like_data_parallel(dt):
    ref_losses, ref_params = train(None)
    assert ref_losses[-1] < ref_losses[0]
    for flag in (True, False):
        losses, params = train(flag)
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-10, atol=0, err_msg=str(flag))
        assert set(params) == set(ref_params)
        for name, value in params.items():
            np.testing.assert_allclose(value, ref_params[name], rtol=1e-9, atol=1e-12,
                                       err_msg=f"{flag}: {name}")


def test_frozen_parameter_keeps_its_gathered_copy(dt):
    """A parameter that does not require grad has no autograd record to
    gather again from, so its gathered copy stays (the backward still reads
    it for the input's gradient) and training the rest is unchanged."""
    model = build(True)
    model.fc3.weight.requires_grad_(False)
    seen = []
    model.fc3.register_forward_pre_hook(lambda m, a: seen.append(m._parameters["weight"]))
    x, y = batch(0)
    loss = nn.functional.cross_entropy(model(x), y)
    assert not seen[0].is_meta
    loss.backward()
    assert model.fc3.weight.grad is None and model.fc2.weight.grad is not None
    assert np.isfinite(loss.item())


def test_replicated_gather_is_not_released(dt):
    """A 0-d parameter (kept Replicate) is its own gathered copy: the
    forward must not release the Parameter itself."""
    mesh = mesh4()

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(dtorch.distribute_tensor(np.array(2.0), mesh, [Replicate()]))

        def forward(self, x):
            return x * self.scale

    model = fully_shard(Scaled(), mesh=mesh, reshard_after_forward=True)
    x = dtorch.distribute_tensor(np.ones((4, 2)), mesh, [Replicate()])
    out = model(x).sum()
    out.backward()
    assert not model.scale.is_meta
    assert float(model.scale.grad.numpy()) == pytest.approx(8.0)


def test_gpt_gathers_every_read_weight_twice_with_true(dt):
    """The example's GPT under fully_shard (each block, then the root) on 4
    ranks, as test_gpt_parity.py's "fsdp4" (True) and "zero2_dp4" (False)
    layouts: False gathers every managed parameter once per step; True
    gathers again, marked, exactly the weights the backward reads (each
    Linear's and LayerNorm's weight: the input gradient multiplies by it;
    biases and embedding tables are read by no gradient formula); both give
    the same losses and parameters."""
    import reference_gpt as ref
    import test_gpt_parity as parity
    init, batches = ref.parity_problem(np.float32)
    runs = {}
    for layout in ("fsdp4", "zero2_dp4"):
        model, mesh, placements = parity.build(dtorch, layout, init)
        opt = dtorch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for idx, targets in batches[:2]:
            x = dtorch.tensor(idx, device_mesh=mesh, placements=placements)
            y = dtorch.tensor(targets, device_mesh=mesh, placements=placements)
            loss = model(x, y)[1]
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        rows = [r for r in dtorch.explain() if any("all_gather" in c for c in r["collectives"])]
        read = sum(1 for m in model.modules()
                   if type(m).__name__ in ("FSDPLinear", "Linear", "LayerNorm"))
        runs[layout] = (losses, {n: p.numpy() for n, p in model.named_parameters()},
                        len(rows), sum(r["regather"] for r in rows),
                        len(list(model.parameters())), read)
    losses_t, params_t, gathers_t, again_t, managed, read = runs["fsdp4"]
    losses_f, params_f, gathers_f, again_f, _, _ = runs["zero2_dp4"]
    assert read > 0 and again_f == 0 and gathers_f == managed
    assert again_t == read and gathers_t == managed + read
    np.testing.assert_allclose(losses_t, losses_f, rtol=1e-6)
    for name, value in params_t.items():
        np.testing.assert_allclose(value, params_f[name], rtol=1e-5, atol=1e-6, err_msg=name)


def test_true_backward_after_a_flush_between_forward_and_backward(dt):
    """Reading the loss before backward runs the forward alone: with True
    the released gathered copies are no outputs of that segment, and the
    backward (a later segment) gathers the shards again; the gradients are
    those of False."""
    x, y = batch(3)
    grads = {}
    for flag in (True, False):
        model = build(flag)
        loss = nn.functional.cross_entropy(model(x), y)
        value = loss.item()
        loss.backward()
        grads[flag] = (value, {n: p.grad.numpy() for n, p in model.named_parameters()})
        if flag:
            rows = list(dtorch.explain())  # the backward's segment
            assert sum(r["regather"] for r in rows) == 2, str(dtorch.explain())
    assert grads[True][0] == pytest.approx(grads[False][0], rel=1e-12)
    for name, g in grads[False][1].items():
        np.testing.assert_allclose(grads[True][1][name], g, rtol=1e-10, atol=1e-14, err_msg=name)
