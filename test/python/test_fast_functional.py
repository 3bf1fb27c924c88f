"""The one-call C++ recordings of the hot nn.functional operators
(python/src/functional_bindings.cpp, DTORCH_FAST_FUNCTIONAL) against their
Python definitions in _decompositions.py: the same recorded ops (the same
dtensor IR, op for op), the same values and gradients bit for bit, the same
placements, and the same exception type and message on bad input, after
which the session stays usable. Also the module attribute mirror
(DTORCH_FAST_MODULE_ATTRS): parameters, buffers and submodules read as
plain attributes stay in step with the member dicts."""
import copy

import numpy as np
import pytest

import dtorch
import dtorch.nn as nn
import dtorch.nn.functional as F
from dtorch import Replicate, Shard, _C
from dtorch import _decompositions as dec
from dtorch.nn.modules import module as module_impl


def _both(fn, *args, inputs=()):
    """fn(*args) on the fast path and on the Python path: for each, the
    recorded IR from the tensor arguments (and `inputs`, tensors fn reads
    otherwise) to the result, the result's value, placements and the
    gradients of every one of them that requires grad."""
    out = []
    for fast in (True, False):
        saved = dec._FAST
        dec._FAST = fast
        try:
            y = fn(*args)
        finally:
            dec._FAST = saved
        tensors = [a for a in args if isinstance(a, dtorch.Tensor)] + list(inputs)
        text = _C.graph_text(tensors, [y], "main")
        grads = []
        wanting = [a for a in tensors if a.requires_grad]
        if wanting and y.requires_grad:
            for a in wanting:
                a.grad = None
            y.sum().backward()
            grads = [a.grad.numpy() for a in wanting]
        out.append((text, y.numpy(), tuple(y.placements), grads))
    return out


def _assert_same(fn, *args, inputs=()):
    (t1, v1, p1, g1), (t2, v2, p2, g2) = _both(fn, *args, inputs=inputs)
    assert t1 == t2
    assert v1.dtype == v2.dtype and v1.shape == v2.shape
    assert np.array_equal(v1, v2, equal_nan=True)
    assert p1 == p2
    assert len(g1) == len(g2)
    for a, b in zip(g1, g2):
        assert np.array_equal(a, b)
    return t1


def _errors(fn, *args):
    """The (type, message) fn(*args) raises on each path."""
    got = []
    for fast in (True, False):
        saved = dec._FAST
        dec._FAST = fast
        try:
            with pytest.raises(Exception) as info:
                fn(*args)
        finally:
            dec._FAST = saved
        got.append((type(info.value), str(info.value)))
    assert got[0] == got[1], got
    return got[0]


def _rand(shape, mesh, placements=None, grad=False, seed=0):
    rng = np.random.default_rng(seed)
    value = rng.standard_normal(shape).astype(np.float32)
    placements = placements or [Replicate()] * mesh.ndim
    t = dtorch.tensor(value, device_mesh=mesh, placements=placements)
    if grad:
        t.requires_grad_(True)
    return t


def test_fast_functions_are_bound_and_on_by_default(dt):
    for name in ("fast_linear", "fast_layer_norm", "fast_softmax",
                 "fast_scaled_dot_product_attention", "fast_embedding",
                 "fast_cross_entropy"):
        assert callable(getattr(_C, name))
    assert dec._FAST


@pytest.mark.parametrize("mesh_name,xp,wp", [
    ("1", [Shard(0)], [Replicate()]),
    ("4", [Shard(0)], [Replicate()]),
    ("4", [Replicate()], [Shard(0)]),
    ("2x2", [Shard(0), Replicate()], [Replicate(), Shard(0)]),
])
def test_linear_same_ops_bits_and_grads(meshes, mesh_name, xp, wp):
    mesh = meshes[mesh_name]
    x = _rand((8, 4, 16), mesh, xp, grad=True, seed=1)
    w = _rand((12, 16), mesh, wp, grad=True, seed=2)
    b = _rand((12,), mesh, wp, grad=True, seed=3)
    text = _assert_same(F.linear, x, w, b)
    assert "transpose" in text and "add" in text
    _assert_same(F.linear, x, w)  # no bias
    _assert_same(F.linear, _rand((5, 16), mesh, grad=True, seed=4), w, b)  # 2-D input


def test_linear_errors_match(meshes):
    mesh = meshes["4"]
    x = _rand((8, 16), mesh)
    w = _rand((12, 15), mesh)
    kind, message = _errors(F.linear, x, w)
    assert kind is ValueError and "cannot be multiplied" in message
    _errors(F.linear, x, _rand((12, 16), mesh), _rand((11,), mesh))  # bias shape
    _errors(F.linear, x, "not a tensor")
    # A scalar bias is left to the Python definition, which accepts it.
    _assert_same(lambda a, b: F.linear(a, b, 0.5), x, _rand((12, 16), mesh))
    # The session stays usable.
    assert F.linear(x, _rand((12, 16), mesh)).numpy().shape == (8, 12)


@pytest.mark.parametrize("mesh_name,xp", [("1", [Shard(0)]), ("4", [Shard(1)]),
                                          ("2x2", [Shard(0), Shard(2)])])
def test_layer_norm_same_ops_bits_and_grads(meshes, mesh_name, xp):
    mesh = meshes[mesh_name]
    x = _rand((4, 8, 16), mesh, xp, grad=True, seed=5)
    w = _rand((16,), mesh, grad=True, seed=6)
    b = _rand((16,), mesh, grad=True, seed=7)
    text = _assert_same(F.layer_norm, x, (16,), w, b, 1e-5)
    assert "rsqrt" in text
    _assert_same(F.layer_norm, x, 16, None, None)
    _assert_same(F.layer_norm, x, [8, 16], None, None, 1e-3)
    _assert_same(F.layer_norm, x, (16,), w, None, 1)  # an int eps
    _assert_same(F.layer_norm, x, (), None, None)  # no dims: every dim, as before
    ln = nn.LayerNorm(16, device_mesh=mesh)
    _assert_same(ln, x, inputs=list(ln.parameters()))


def test_layer_norm_errors_match(meshes):
    mesh = meshes["4"]
    x = _rand((4, 8, 16), mesh)
    kind, message = _errors(F.layer_norm, x, (8,))
    assert kind is ValueError and "does not match the last dims" in message
    _errors(F.layer_norm, x, (2, 4, 8, 16))
    _errors(F.layer_norm, x, (16,), _rand((8,), mesh))  # weight shape
    _errors(F.layer_norm, x, (16,), None, None, "eps")
    _errors(F.layer_norm, "x", (16,))
    assert F.layer_norm(x, (16,)).numpy().shape == (4, 8, 16)


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_same_ops_bits_and_grads(meshes, dim):
    mesh = meshes["4"]
    x = _rand((4, 6, 8), mesh, [Shard(1)], grad=True, seed=8)
    _assert_same(F.softmax, x, dim)
    ints = dtorch.tensor(np.arange(12).reshape(3, 4), device_mesh=mesh)
    _assert_same(F.softmax, ints, -1)  # cast to float32 first
    _assert_same(lambda t: F.softmax(t, -1, dtype=dtorch.float64), x)


def test_softmax_errors_match(meshes):
    x = _rand((4, 6), meshes["4"])
    _errors(F.softmax, x, 2)
    _errors(F.softmax, x, "a")


@pytest.mark.parametrize("mesh_name,qp", [("1", [Shard(0)]), ("4", [Shard(1)]),
                                          ("2x2", [Shard(0), Shard(1)])])
@pytest.mark.parametrize("causal", [True, False])
def test_sdpa_same_ops_bits_and_grads(meshes, mesh_name, qp, causal):
    mesh = meshes[mesh_name]
    q = _rand((2, 4, 8, 16), mesh, qp, grad=True, seed=9)
    k = _rand((2, 4, 8, 16), mesh, qp, grad=True, seed=10)
    v = _rand((2, 4, 8, 16), mesh, qp, grad=True, seed=11)
    text = _assert_same(
        lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal), q, k, v)
    assert ("iota" in text) == causal
    _assert_same(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, scale=0.25), q, k, v)
    _assert_same(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, scale=2), q, k, v)
    # L != S (cross attention)
    k2, v2 = _rand((2, 4, 5, 16), mesh, seed=12), _rand((2, 4, 5, 16), mesh, seed=13)
    _assert_same(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal),
                 q, k2, v2)


def test_sdpa_errors_match(meshes):
    mesh = meshes["4"]
    kind, message = _errors(F.scaled_dot_product_attention, _rand((8, 16), mesh),
                            _rand((8, 16), mesh), _rand((8, 16), mesh))
    assert kind is ValueError and "at least one batch dim" in message
    q = _rand((2, 8, 16), mesh)
    _errors(F.scaled_dot_product_attention, q, _rand((2, 8, 15), mesh), q)
    _errors(F.scaled_dot_product_attention, q, q, _rand((3, 8, 16), mesh))
    mask = dtorch.ones(8, 8, device_mesh=mesh).bool()
    _errors(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=mask,
                                                           is_causal=True), q, q, q)
    # A mask or dropout are left to the Python definition.
    _assert_same(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=mask),
                 q, q, q, inputs=[mask])


def test_embedding_same_ops_bits_and_grads(meshes):
    for mesh_name, wp in (("1", [Replicate()]), ("4", [Shard(0)]), ("4", [Shard(1)])):
        mesh = meshes[mesh_name]
        w = _rand((12, 8), mesh, wp, grad=True, seed=14)
        for shape in ((5,), (3, 4), (2, 2, 3)):
            idx = dtorch.tensor(np.random.default_rng(0).integers(0, 12, shape),
                                device_mesh=mesh)
            _assert_same(F.embedding, idx, w)


def test_embedding_errors_match(meshes):
    mesh = meshes["4"]
    idx = dtorch.tensor(np.array([1, 2]), device_mesh=mesh)
    _errors(F.embedding, idx, _rand((12,), mesh))
    _errors(F.embedding, idx, "w")


@pytest.mark.parametrize("mesh_name,xp", [("1", [Shard(0)]), ("4", [Shard(0)]),
                                          ("4", [Replicate()])])
def test_cross_entropy_same_ops_bits_and_grads(meshes, mesh_name, xp):
    mesh = meshes[mesh_name]
    logits = _rand((8, 10), mesh, xp, grad=True, seed=15)
    target = dtorch.tensor(np.array([1, 0, 9, 3, 7, 5, 5, 2]), device_mesh=mesh,
                           placements=xp)
    _assert_same(F.cross_entropy, logits, target)
    _assert_same(lambda a, b: F.cross_entropy(a, b, ignore_index=5), logits, target)
    # Left to the Python definition: other reductions, smoothing, class-sharded logits.
    _assert_same(lambda a, b: F.cross_entropy(a, b, reduction="sum"), logits, target)
    _assert_same(lambda a, b: F.cross_entropy(a, b, label_smoothing=0.1), logits, target)


def test_cross_entropy_errors_match(meshes):
    mesh = meshes["4"]
    logits = _rand((8, 10), mesh)
    kind, message = _errors(F.cross_entropy, logits,
                            dtorch.tensor(np.zeros(8, np.int32), device_mesh=mesh))
    assert kind is TypeError and "int64" in message
    _errors(F.cross_entropy, logits, dtorch.tensor(np.zeros(7, np.int64), device_mesh=mesh))
    _errors(F.cross_entropy, _rand((2, 4, 10), mesh),
            dtorch.tensor(np.zeros(2, np.int64), device_mesh=mesh))
    assert F.cross_entropy(logits, dtorch.tensor(np.zeros(8, np.int64), device_mesh=mesh)
                           ).numpy().shape == ()


def test_fast_paths_record_fewer_crossings_not_other_ops(meshes):
    """A whole GPT block's forward: identical IR with and without."""
    mesh = meshes["1"]
    dtorch.manual_seed(0)
    ln = nn.LayerNorm(16, device_mesh=mesh)
    q, k = nn.Linear(16, 16, device_mesh=mesh), nn.Linear(16, 16, device_mesh=mesh)

    def block(x):
        h = ln(x)
        a = q(h).reshape(2, 8, 2, 8).transpose(1, 2)
        b = k(h).reshape(2, 8, 2, 8).transpose(1, 2)
        y = F.scaled_dot_product_attention(a, b, a, is_causal=True)
        return F.softmax(y.transpose(1, 2).reshape(2, 8, 16), -1)
    params = list(ln.parameters()) + list(q.parameters()) + list(k.parameters())
    _assert_same(block, _rand((2, 8, 16), mesh, grad=True, seed=16), inputs=params)


# ---- the module attribute mirror ---------------------------------------------
class _Net(nn.Module):
    def __init__(self, mesh):
        super().__init__()
        self.fc = nn.Linear(4, 3, device_mesh=mesh)
        self.register_buffer("scale", dtorch.ones(3, device_mesh=mesh))
        self.n = 3


def test_module_members_are_plain_attributes(meshes):
    if not module_impl._MIRROR_MEMBERS:
        pytest.skip("DTORCH_FAST_MODULE_ATTRS=0")
    net = _Net(meshes["1"])
    assert "fc" in vars(net) and "weight" in vars(net.fc) and "scale" in vars(net)
    assert net.fc is net._modules["fc"] and net.fc.weight is net.fc._parameters["weight"]
    assert net.fc.bias is net.fc._parameters["bias"]


def test_module_attribute_follows_every_change_of_the_member_dicts(meshes):
    mesh = meshes["1"]
    net = _Net(mesh)
    fc = net.fc
    # Direct writes into the dicts (FSDP's unshard does this).
    p = nn.Parameter(dtorch.zeros(3, 4, device_mesh=mesh))
    fc._parameters["weight"] = p
    assert fc.weight is p
    fc._parameters.update(bias=None)
    assert fc.bias is None
    fc._parameters.setdefault("extra", p)
    assert fc.extra is p
    fc._parameters.pop("extra")
    with pytest.raises(AttributeError):
        fc.extra
    # Assignment moves a name between kinds.
    net.fc = nn.Linear(4, 3, device_mesh=mesh)
    assert net.fc is not fc and net.fc is net._modules["fc"]
    net.scale = dtorch.zeros(3, device_mesh=mesh)
    assert net.scale is net._buffers["scale"]
    net.scale = nn.Parameter(dtorch.ones(3, device_mesh=mesh))
    assert "scale" not in net._buffers and net.scale is net._parameters["scale"]
    del net.scale
    with pytest.raises(AttributeError):
        net.scale
    net.fc = None
    assert net.fc is None and net._modules["fc"] is None
    # A plain attribute set before stays what the name reads.
    net.n = 5
    net._modules["n"] = nn.Identity()
    assert net.n == 5
    # Clearing a container's modules drops the attributes.
    seq = nn.Sequential(nn.Identity(), nn.Identity())
    seq._modules.clear()
    with pytest.raises(AttributeError):
        getattr(seq, "0")
    # A member never hides a method of the class.
    odd = nn.Module()
    odd.add_module("forward_", nn.Identity())
    odd._modules["train"] = nn.Identity()
    assert callable(odd.train) and odd.train(False) is odd


def test_module_mirror_survives_copy_and_dtype_conversion(meshes):
    mesh = meshes["1"]
    net = _Net(mesh)
    twin = copy.deepcopy(net)
    assert twin.fc.weight is twin.fc._parameters["weight"]
    assert twin.fc.weight is not net.fc.weight
    twin.fc._parameters["weight"] = nn.Parameter(dtorch.zeros(3, 4, device_mesh=mesh))
    assert twin.fc.weight is twin.fc._parameters["weight"]
    assert net.fc.weight is net.fc._parameters["weight"]
    shallow = copy.copy(net)
    assert shallow.fc is net.fc
    shallow._modules["fc"] = nn.Identity()
    assert isinstance(shallow.fc, nn.Identity) and isinstance(net.fc, nn.Linear)
    net.double()
    assert net.fc.weight.dtype == dtorch.float64
    assert net.fc.weight is net.fc._parameters["weight"]


def test_gpt_forward_identical_with_both_switches_off():
    """The GPT of examples/gpt in child interpreters: losses and gradients
    bitwise equal with DTORCH_FAST_FUNCTIONAL and DTORCH_FAST_MODULE_ATTRS
    on and off."""
    import json
    import os
    import subprocess
    import sys
    from conftest import subprocess_env
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = f"""
import json, sys
sys.path.insert(0, {os.path.join(root, "examples", "gpt")!r})
import numpy as np
import dtorch
from dtorch import Shard
from model import GPT, GPTConfig
dtorch.init(world_size=2, num_processes=1)
mesh = dtorch.init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
dtorch.manual_seed(0)
with dtorch.nn.default_device_mesh(mesh):
    model = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=2, n_head=2, d_model=16))
rng = np.random.default_rng(0)
out = []
for _ in range(2):
    x = dtorch.tensor(rng.integers(0, 20, (4, 8)), device_mesh=mesh, placements=[Shard(0)])
    y = dtorch.tensor(rng.integers(0, 20, (4, 8)), device_mesh=mesh, placements=[Shard(0)])
    model.zero_grad()
    _, loss = model(x, y)
    loss.backward()
    out.append(loss.numpy().tobytes().hex())
    out += [p.grad.numpy().tobytes().hex() for p in model.parameters()]
print("RESULT " + json.dumps(out))
"""
    results = []
    for value in ("1", "0"):
        env = dict(subprocess_env(), DTORCH_FAST_FUNCTIONAL=value,
                   DTORCH_FAST_MODULE_ATTRS=value, DTORCH_CACHE_DIR="")
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=env, timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
        line = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")][-1]
        results.append(json.loads(line[len("RESULT "):]))
    assert len(results[0]) > 10
    assert results[0] == results[1]


def test_switch_names_are_documented():
    import os
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "api.md")) as f:
        text = f.read()
    assert "DTORCH_FAST_FUNCTIONAL" in text and "DTORCH_FAST_MODULE_ATTRS" in text


def test_dropped_module_frees_its_parameters_without_the_cycle_collector(meshes):
    """The member dicts name their module weakly: a dropped module's
    parameters are freed at once, by reference counting, as before."""
    import gc
    mesh = meshes["1"]
    dtorch.synchronize()
    base = _C.live_tensors()
    gc.disable()
    try:
        net = nn.Sequential(nn.Linear(4, 4, device_mesh=mesh), nn.LayerNorm(4, device_mesh=mesh))
        dtorch.synchronize()
        assert _C.live_tensors() == base + 4
        twin = copy.deepcopy(net)
        assert twin[0].weight is twin[0]._parameters["weight"]
        del net, twin
        dtorch.synchronize()
        assert _C.live_tensors() == base
    finally:
        gc.enable()
