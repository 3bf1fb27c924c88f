"""dtorch.nn modules: registration and names as torch gives them, state_dict
round trips and their errors, torch's default initialisations (placement
independent), forward against numpy, error messages that name the module and
the op, clip_grad_norm_."""
import collections
import math

import numpy as np
import pytest

import dtorch
from dtorch import Replicate, Shard, nn
from dtorch.nn._grad import no_grad
from conftest import assert_close


class Block(nn.Module):
    def __init__(self, d, **kw):
        super().__init__()
        self.norm = nn.LayerNorm(d, **kw)
        self.fc1 = nn.Linear(d, 4 * d, **kw)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d, bias=False, **kw)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return x + self.drop(self.fc2(self.act(self.fc1(self.norm(x)))))


class Net(nn.Module):
    def __init__(self, vocab=11, d=8, n=2, **kw):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, **kw)
        self.blocks = nn.ModuleList([Block(d, **kw) for _ in range(n)])
        self.heads = nn.ModuleDict({"lm": nn.Linear(d, vocab, **kw)})
        self.final = nn.RMSNorm(d, **kw)
        self.register_buffer("pos", dtorch.zeros(d, **kw))
        self.register_buffer("cache", dtorch.zeros(2), persistent=False)

    def forward(self, idx):
        h = self.emb(idx) + self.pos
        for b in self.blocks:
            h = b(h)
        return self.heads["lm"](self.final(h))


NET_NAMES = ["emb.weight",
             "blocks.0.norm.weight", "blocks.0.norm.bias", "blocks.0.fc1.weight",
             "blocks.0.fc1.bias", "blocks.0.fc2.weight",
             "blocks.1.norm.weight", "blocks.1.norm.bias", "blocks.1.fc1.weight",
             "blocks.1.fc1.bias", "blocks.1.fc2.weight",
             "heads.lm.weight", "heads.lm.bias", "final.weight"]


def test_names_and_counts_as_torch(dt, meshes):
    net = Net()
    assert [n for n, _ in net.named_parameters()] == NET_NAMES
    assert sum(p.numel() for p in net.parameters()) == (
        11 * 8 + 2 * (8 + 8 + 32 * 8 + 32 + 8 * 32) + 11 * 8 + 11 + 8)
    assert list(net.state_dict()) == ["pos"] + NET_NAMES
    assert [n for n, _ in net.named_buffers()] == ["pos", "cache"]
    assert [n for n, _ in net.named_children()] == ["emb", "blocks", "heads", "final"]
    assert [n for n, _ in net.named_modules()][:6] == [
        "", "emb", "blocks", "blocks.0", "blocks.0.norm", "blocks.0.fc1"]
    assert len(list(net.modules())) == 1 + 1 + 1 + 2 * 6 + 2 + 1
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    assert net.blocks[1].fc2.bias is None
    # A shared module is listed once, as torch does.
    shared = nn.Linear(3, 3)
    seq = nn.Sequential(shared, nn.ReLU(), shared)
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias"]
    assert len(seq) == 3 and seq[-1] is shared and isinstance(seq[0:2], nn.Sequential)
    od = nn.Sequential(collections.OrderedDict([("a", nn.Linear(2, 2)), ("b", nn.SiLU())]))
    assert [n for n, _ in od.named_parameters()] == ["a.weight", "a.bias"]
    assert "Linear(in_features=2, out_features=2, bias=True)" in repr(od)


def test_registration_rules(dt):
    m = nn.Module()
    m.w = nn.Parameter(dtorch.zeros(2))
    m.sub = nn.Linear(2, 2)
    m.register_buffer("b", dtorch.ones(2))
    m.plain = 3
    assert set(m._parameters) == {"w"} and set(m._modules) == {"sub"}
    assert m.plain == 3 and "plain" not in m._parameters
    with pytest.raises(TypeError, match="cannot assign 'Tensor' as parameter 'w'"):
        m.w = dtorch.zeros(2)
    m.w = None
    assert m.w is None and [n for n, _ in m.named_parameters()] == ["sub.weight", "sub.bias"]
    with pytest.raises(KeyError, match="contain"):
        m.register_parameter("a.b", None)
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("plain", dtorch.ones(1))
    with pytest.raises(TypeError, match="Parameter or None required"):
        m.register_parameter("q", dtorch.zeros(2))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        m.nothing  # noqa: B018
    m.b = dtorch.zeros(3)  # a tensor assigned to a buffer's name replaces it
    assert m.b.shape == (3,) and "b" in m._buffers
    del m.sub
    assert "sub" not in m._modules
    m.train(False)
    assert not m.training
    net = Net()
    net.eval()
    assert not any(mod.training for mod in net.modules())
    net.train()
    assert all(mod.training for mod in net.modules())
    seen = []
    net.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen[-1] == "Net" and seen.count("Linear") == 5


@pytest.mark.parametrize("mesh_name,placements", [
    ("4", [Shard(0)]), ("4", [Replicate()]), ("2x2", [Shard(0), Shard(1)]),
    ("2x2", [Replicate(), Shard(1)])])
def test_linear_forward_and_init_do_not_depend_on_placements(dt, meshes, mesh_name,
                                                               placements):
    mesh = meshes[mesh_name]
    dt.manual_seed(123)
    lin = nn.Linear(16, 12, device_mesh=mesh, placements=placements, dtype=dt.float64)
    dt.manual_seed(123)
    ref = nn.Linear(16, 12, device_mesh=meshes["4"], dtype=dt.float64)
    assert lin.weight.placements == tuple(placements)
    w, b = lin.weight.numpy(), lin.bias.numpy()
    assert_close(w, ref.weight.numpy(), 0)
    assert_close(b, ref.bias.numpy(), 0)
    x = np.random.default_rng(0).standard_normal((5, 16))
    y = lin(dt.tensor(x, device_mesh=mesh)).numpy()
    assert_close(y, x @ w.T + b, 1e-12)


def test_default_initialisations_have_torch_statistics(dt, meshes):
    dt.manual_seed(0)
    lin = nn.Linear(256, 512)
    w, b = lin.weight.numpy(), lin.bias.numpy()
    bound = 1 / math.sqrt(256)    # kaiming_uniform_(a=sqrt(5)) and the bias rule
    assert w.dtype == np.float32 and w.shape == (512, 256)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert abs(w.mean()) < 0.01 * bound * 10
    assert w.var() == pytest.approx(bound ** 2 / 3, rel=0.02)
    assert np.abs(w).max() > 0.99 * bound
    emb = nn.Embedding(1000, 64, padding_idx=3)
    e = emb.weight.numpy()
    assert abs(e.mean()) < 0.02 and e.std() == pytest.approx(1.0, rel=0.02)
    assert np.all(e[3] == 0) and np.all(e[4] != 0)
    ln = nn.LayerNorm(7)
    assert_close(ln.weight.numpy(), np.ones(7), 0)
    assert_close(ln.bias.numpy(), np.zeros(7), 0)
    assert_close(nn.RMSNorm([2, 3]).weight.numpy(), np.ones((2, 3)), 0)
    x = dt.randn(4, 5)
    nn.init.xavier_uniform_(x)
    assert np.abs(x.numpy()).max() <= math.sqrt(6 / 9)
    nn.init.kaiming_normal_(x, nonlinearity="relu")
    nn.init.zeros_(x)
    assert_close(x.numpy(), np.zeros((4, 5)), 0)


def test_module_forwards_against_numpy(dt, meshes):
    mesh = meshes["2x2"]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 6))
    xt = dt.tensor(x, device_mesh=mesh, placements=[Shard(0), Replicate()])
    ln = nn.LayerNorm(6, device_mesh=mesh, dtype=dt.float64, eps=1e-5)
    with no_grad():
        ln.weight.copy_(np.arange(6.0))
        ln.bias.copy_(np.ones(6))
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    assert_close(ln(xt).numpy(), (x - mu) / np.sqrt(var + 1e-5) * np.arange(6.0) + 1, 1e-10)
    rms = nn.RMSNorm(6, eps=1e-6, device_mesh=mesh, dtype=dt.float64)
    assert_close(rms(xt).numpy(), x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6), 1e-10)
    emb = nn.Embedding(10, 6, device_mesh=mesh, placements=[Replicate(), Shard(0)],
                       dtype=dt.float64)
    idx = np.array([[1, 9, 0], [3, 3, 2]])
    got = emb(dt.tensor(idx, device_mesh=mesh)).numpy()
    assert_close(got, emb.weight.numpy()[idx], 1e-12)
    for act, fn in [(nn.ReLU(), lambda a: np.maximum(a, 0)), (nn.SiLU(), lambda a: a / (1 + np.exp(-a))),
                    (nn.Tanh(), np.tanh), (nn.Identity(), lambda a: a)]:
        assert_close(act(xt).numpy(), fn(x), 1e-10)
    drop = nn.Dropout(0.5)
    big = dt.ones(64, 64, device_mesh=mesh)
    kept = drop(big).numpy()
    assert set(np.unique(kept)) <= {0.0, 2.0} and 0.4 < (kept == 0).mean() < 0.6
    drop.eval()
    assert drop(big) is big


def test_shape_mismatch_names_the_module_and_the_op(dt):
    net = Net()
    net.blocks[1].fc2 = nn.Linear(16, 8, bias=False)   # expects 16 features, gets 32
    with pytest.raises(ValueError) as info:
        net(dtorch.tensor(np.zeros((2, 3), dtype=np.int64)))
    msg = str(info.value)
    assert msg.startswith("blocks.1.fc2 (Linear): matmul: shapes"), msg
    with pytest.raises(ValueError, match=r"^Linear: matmul: shapes \[2, 5\] and \[3, 4\]"):
        nn.Linear(3, 4)(dtorch.zeros(2, 5))
    seq = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.LayerNorm(5)))
    with pytest.raises(ValueError, match=r"^1\.0 \(LayerNorm\): normalized_shape"):
        seq(dtorch.zeros(2, 4))


def test_state_dict_round_trip(dt, meshes):
    dt.manual_seed(1)
    a = Net(device_mesh=meshes["2x2"], placements=[Replicate(), Shard(0)])
    dt.manual_seed(2)
    b = Net()
    sd = a.state_dict()
    assert sd["blocks.0.fc1.weight"] is a.blocks[0].fc1.weight
    # From numpy arrays: values land in b's own layout.
    b.load_state_dict({k: v.numpy() for k, v in sd.items()})
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert_close(q.numpy(), p.numpy(), 0)
        assert q.placements == (Replicate(),), n
    # From DTensors on another mesh and layout.
    c = Net(device_mesh=meshes["4"], placements=[Shard(0)])
    params_before = list(c.parameters())
    result = c.load_state_dict(sd)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert list(c.parameters()) == params_before     # same objects, new values
    assert all(x is y for x, y in zip(c.parameters(), params_before))
    assert_close(c.heads["lm"].weight.numpy(), a.heads["lm"].weight.numpy(), 0)
    assert c.heads["lm"].weight.placements == (Shard(0),)
    # From lists, through a module on one mesh to the same layout.
    lin = nn.Linear(2, 2)
    lin.load_state_dict({"weight": [[1.0, 2.0], [3.0, 4.0]], "bias": [0.5, 0.5]})
    assert_close(lin(dtorch.ones(1, 2)).numpy(), [[3.5, 7.5]])


def test_load_state_dict_lists_every_bad_key_and_loads_nothing(dt):
    net = Net()
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    sd = {k: np.zeros(v.shape, dtype=np.float32) for k, v in net.state_dict().items()}
    del sd["emb.weight"], sd["final.weight"]
    sd["blocks.0.fc1.weight"] = np.zeros((3, 3), dtype=np.float32)
    sd["heads.lm.bias"] = np.zeros(12, dtype=np.float32)
    sd["extra.weight"] = np.zeros(1)
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(sd)
    msg = str(info.value)
    assert msg.startswith("Error(s) in loading state_dict for Net:")
    for needle in ['Missing key(s) in state_dict: "emb.weight", "final.weight"',
                   'Unexpected key(s) in state_dict: "extra.weight"',
                   "size mismatch for blocks.0.fc1.weight: copying a param with shape (3, 3)",
                   "the shape in current model is (32, 8)",
                   "size mismatch for heads.lm.bias"]:
        assert needle in msg, msg
    for k, v in net.state_dict().items():
        assert_close(v.numpy(), before[k], 0)     # nothing half-loaded
    # strict=False loads what matches and reports the rest (sizes still checked).
    del sd["blocks.0.fc1.weight"], sd["heads.lm.bias"]
    result = net.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["emb.weight", "blocks.0.fc1.weight", "heads.lm.bias",
                                   "final.weight"]
    assert result.unexpected_keys == ["extra.weight"]
    assert_close(net.blocks[1].fc1.weight.numpy(), np.zeros((32, 8)), 0)
    assert_close(net.emb.weight.numpy(), before["emb.weight"], 0)


def test_default_mesh_and_zero_grad_and_to_empty(dt, meshes):
    with nn.default_device_mesh(meshes["2x2"]):
        lin = nn.Linear(4, 2)
    assert lin.weight.device_mesh == meshes["2x2"]
    assert nn.Linear(4, 2).weight.device_mesh != meshes["2x2"]
    lin.weight.grad = dtorch.ones(2, 4, device_mesh=meshes["2x2"])
    lin.zero_grad(set_to_none=False)
    assert_close(lin.weight.grad.numpy(), np.zeros((2, 4)), 0)
    lin.zero_grad()
    assert lin.weight.grad is None
    dt.manual_seed(5)
    w0 = nn.Linear(4, 2).weight.numpy()
    dt.manual_seed(5)
    lin2 = nn.Linear(4, 2)
    lin2.to_empty()
    assert_close(lin2.weight.numpy(), np.zeros((2, 4)), 0)
    dt.manual_seed(5)
    lin2.reset_parameters()
    assert_close(lin2.weight.numpy(), w0, 0)


def test_clip_grad_norm(dt, meshes):
    mesh = meshes["2x2"]
    rng = np.random.default_rng(3)
    shapes_layouts = [((6, 4), [Shard(0), Shard(1)]), ((5,), [Replicate(), Shard(0)]),
                      ((3, 3), [Replicate(), Replicate()])]
    params, grads = [], []
    for shape, pl in shapes_layouts:
        p = nn.Parameter(dt.zeros(*shape, device_mesh=mesh, placements=pl, dtype=dt.float64))
        g = rng.standard_normal(shape)
        p.grad = dt.tensor(g, device_mesh=mesh, placements=pl)
        params.append(p)
        grads.append(g)
    total = math.sqrt(sum((g * g).sum() for g in grads))
    norm = nn.utils.clip_grad_norm_(params, max_norm=1.0)
    assert norm.item() == pytest.approx(total, rel=1e-12)
    scale = 1.0 / (total + 1e-6)
    for p, g, (_, pl) in zip(params, grads, shapes_layouts):
        assert_close(p.grad.numpy(), g * scale, 1e-12)
        assert p.grad.placements == tuple(pl)
    # Below the threshold: unchanged. The inf norm is the largest |g|.
    before = [p.grad.numpy() for p in params]
    norm = nn.utils.clip_grad_norm_(params, max_norm=100.0, norm_type="inf")
    assert norm.item() == pytest.approx(max(np.abs(b).max() for b in before), rel=1e-12)
    for p, b in zip(params, before):
        assert_close(p.grad.numpy(), b, 1e-12)
    nn.utils.clip_grad_value_(params, 0.01)
    assert max(np.abs(p.grad.numpy()).max() for p in params) <= 0.01


def test_forward_hooks(dt):
    lin = nn.Linear(2, 2, bias=False)
    with no_grad():
        lin.weight.copy_(np.eye(2))
    calls = []
    h1 = lin.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
    h2 = lin.register_forward_hook(lambda m, args, out: out + 1)
    h3 = lin.register_forward_hook(lambda m, args, out: calls.append(type(m).__name__))
    x = dtorch.ones(1, 2)
    assert_close(lin(x).numpy(), [[3.0, 3.0]])
    assert calls == ["Linear"]
    h1.remove()
    h2.remove()
    assert_close(lin(x).numpy(), [[1.0, 1.0]])
    h3.remove()
    with lin.register_forward_pre_hook(lambda m, a, k: ((a[0] * 0,), k), with_kwargs=True):
        assert_close(lin(x).numpy(), [[0.0, 0.0]])
    assert not lin._forward_pre_hooks and not lin._hooks_with_kwargs


def test_deepcopy_makes_an_independent_module(dt):
    import copy
    net = Net()
    twin = copy.deepcopy(net)
    names = [n for n, _ in twin.named_parameters()]
    assert names == NET_NAMES
    assert all(a is not b for a, b in zip(net.parameters(), twin.parameters()))
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in twin.parameters())
    before = net.final.weight.numpy().copy()
    with no_grad():
        twin.final.weight.mul_(3.0)
    assert_close(net.final.weight.numpy(), before, 0)
    assert_close(twin.final.weight.numpy(), 3 * before, 0)


def test_meta_init_then_to_empty_and_reset_parameters(dt, meshes):
    mesh = meshes["2x2"]
    with nn.meta_init():
        net = Net(device_mesh=mesh)
    lin = nn.Linear(4, 3, device="meta")
    assert all(p.is_meta for p in net.parameters()) and lin.weight.is_meta
    assert not net.pos.is_meta                      # made by dtorch.zeros, not a module
    assert [n for n, _ in net.named_parameters()] == NET_NAMES
    assert "device='meta'" in repr(lin.weight)
    with pytest.raises(ValueError, match="meta tensor has no value"):
        lin.weight.numpy()
    with pytest.raises(ValueError, match=r"^Linear: a meta tensor has no value"):
        lin(dtorch.ones(2, 4))
    # A layout change of a meta parameter is metadata only (a parallel style).
    w = net.heads["lm"].weight
    moved = w.redistribute(mesh, [Replicate(), Shard(0)])
    assert moved.is_meta and moved.placements == (Replicate(), Shard(0))
    net.heads["lm"].weight = nn.Parameter(moved)
    dt.synchronize()
    live = dt._C.live_tensors()
    with nn.meta_init():
        big = nn.Sequential(nn.Linear(64, 64, device_mesh=mesh), nn.LayerNorm(64))
    big[0].weight = nn.Parameter(big[0].weight.redistribute(mesh, [Shard(0), Shard(1)]))
    dt.synchronize()
    assert dt._C.live_tensors() == live             # nothing was created on the workers
    big.to_empty()
    dt.synchronize()
    assert dt._C.live_tensors() == live + 4
    net.to_empty()
    assert not any(p.is_meta for p in net.parameters())
    assert net.heads["lm"].weight.placements == (Replicate(), Shard(0))
    dt.manual_seed(4)
    net.reset_parameters_recursively()
    dt.manual_seed(4)
    ref = Net(device_mesh=mesh)
    for (n, p), (_, q) in zip(net.named_parameters(), ref.named_parameters()):
        assert_close(p.numpy(), q.numpy(), 0)


def test_module_to_dtype(dt, meshes):
    shared = nn.Linear(3, 3)
    seq = nn.Sequential(shared, nn.ReLU(), shared, nn.LayerNorm(3))
    before = shared.weight.numpy()
    assert seq.double() is seq
    assert all(p.dtype == dt.float64 and isinstance(p, nn.Parameter) and p.requires_grad
               for p in seq.parameters())
    assert seq[0] is seq[2] and seq[0].weight is seq[2].weight
    assert_close(seq[0].weight.numpy(), before.astype(np.float64), 0)
    x = dt.ones(2, 3, dtype=dt.float64)
    assert seq(x).dtype == dt.float64
    assert seq.float()[0].weight.dtype == dt.float32
    with pytest.raises(TypeError, match="floating point"):
        seq.to(dt.int64)
