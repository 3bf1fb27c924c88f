"""Fused groups that mix element types (issue 10): comparisons into bool,
`where`, casts and iota join the generated kernels, so a GPT training
step's causal mask and softmax, its gelu backward and its cross-entropy
mask run as generated kernels instead of library `where`/`eq`/`ge`/`cast`
kernels. The step is the same bit for bit in both tiers (DTORCH_FUSION=0:
hand-written kernels; 1: generated), has fewer instructions fused, and the
gelu backward and causal attention still match torch."""
import os
import textwrap

import numpy as np
import pytest

from conftest import run_fusion_script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent("""
    import collections, json, re, sys
    import numpy as np
    gpt_dir, out_path = sys.argv[1], sys.argv[2]
    sys.path.insert(0, gpt_dir)
    import dtorch
    import dtorch.nn.functional as F
    from dtorch import Shard
    from model import GPT, GPTConfig, parallelize

    dtorch.init(world_size=1, num_processes=1)
    mesh = dtorch.init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    cfg = GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, d_model=32)
    dtorch.manual_seed(0)
    with dtorch.nn.default_device_mesh(mesh):
        model = parallelize(GPT(cfg), mesh)
    model.train()
    opt = dtorch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    rng = np.random.default_rng(0)
    losses = []
    for step in range(3):
        xb = rng.integers(0, cfg.vocab_size, (4, cfg.block_size))
        yb = rng.integers(0, cfg.vocab_size, (4, cfg.block_size))
        x = dtorch.tensor(xb, device_mesh=mesh, placements=[Shard(0)])
        y = dtorch.tensor(yb, device_mesh=mesh, placements=[Shard(0)])
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    # The step's program: instructions by kernel, and the kernels inside
    # each generated group.
    ir = dtorch.last_ir("rank")
    top, groups, body = collections.Counter(), [], None
    for line in ir.splitlines():
        if line.startswith("    %") and "rank." in line:
            m = re.search(r'rank\\.kernel "(\\w+)"', line)
            top[m.group(1) if m else re.search(r"rank\\.(\\w+)", line).group(1)] += 1
            if "rank.fused" in line:
                body = []
                groups.append(body)
        elif line.startswith("      %") and body is not None:
            m = re.search(r'rank\\.kernel "(\\w+)"', line)
            if m:
                body.append(m.group(1))
    results = {"p/" + name: p.numpy() for name, p in model.named_parameters()}

    # The gelu backward and causal attention against torch (checked by the
    # parent), in float32 and float64.
    specials = [0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 0.5, -0.5, 3.0, -3.0,
                8.0, -8.0, 12.0, -12.0, 40.0, -40.0]
    xs = np.concatenate([np.array(specials), np.linspace(-6, 6, 997)])
    for dtype in ("float32", "float64"):
        x = dtorch.tensor(xs.astype(dtype), device_mesh=mesh, placements=[Shard(0)],
                          requires_grad=True)
        g = dtorch.tensor(np.linspace(-2, 2, xs.size).astype(dtype), device_mesh=mesh,
                          placements=[Shard(0)])
        F.gelu(x).backward(g)
        results["gelu_grad/" + dtype] = x.grad.numpy()
        qkv = rng.standard_normal((3, 2, 2, 8, 4)).astype(dtype)
        q, k, v = [dtorch.tensor(a, device_mesh=mesh, placements=[Shard(0)],
                                 requires_grad=True) for a in qkv]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        gout = rng.standard_normal(out.shape).astype(dtype)
        out.backward(dtorch.tensor(gout, device_mesh=mesh, placements=[Shard(0)]))
        results["sdpa/qkv/" + dtype] = qkv
        results["sdpa/gout/" + dtype] = gout
        results["sdpa/out/" + dtype] = out.numpy()
        for name, t in zip("qkv", (q, k, v)):
            results[f"sdpa/grad_{name}/" + dtype] = t.grad.numpy()
    np.savez(out_path, **results)
    print("RESULT " + json.dumps({"losses": [float(l).hex() for l in losses],
                                  "top": dict(top), "groups": groups}))
    dtorch.shutdown()
""")


def run_tier(fusion, tmp_path):
    out = tmp_path / f"mixed{fusion}.npz"
    info = run_fusion_script(CHILD, fusion, os.path.join(ROOT, "examples", "gpt"), str(out))
    with np.load(out) as data:
        return info, {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def tiers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mixed")
    return run_tier("1", tmp), run_tier("0", tmp)


MIXED_LIBRARY_KERNELS = ("where", "eq", "ne", "lt", "le", "gt", "ge", "cast")


def test_gpt_step_has_no_library_comparison_where_or_cast(tiers):
    (fused, _), (plain, _) = tiers
    top, plain_top = fused["top"], plain["top"]
    # Unfused, the step holds them (the mask, the gelu backward, the
    # cross-entropy mask, AdamW's float64 scalars cast to float32).
    assert sum(plain_top.get(k, 0) for k in MIXED_LIBRARY_KERNELS) >= 20, plain_top
    left = {k: top[k] for k in MIXED_LIBRARY_KERNELS if top.get(k)}
    assert not left, f"library kernels left in the fused step: {left}"
    assert sum(top.values()) < sum(plain_top.values())
    # The causal mask is made in a group and consumed by `where` in the
    # softmax's group (with its row reductions); the gelu backward (eq,
    # div, where, exp) is one group.
    groups = fused["groups"]
    assert any({"iota", "ge"} <= set(g) for g in groups), groups
    assert any({"where", "max", "sum", "exp"} <= set(g) for g in groups), groups
    assert any({"eq", "div", "where", "exp"} <= set(g) for g in groups), groups


def test_gpt_step_is_the_same_bit_for_bit_in_both_tiers(tiers):
    (fused, fused_values), (plain, plain_values) = tiers
    assert fused["losses"] == plain["losses"]
    params = [k for k in plain_values if k.startswith("p/")]
    assert len(params) > 10
    for key in params:
        assert fused_values[key].tobytes() == plain_values[key].tobytes(), key
    for key in plain_values:
        if key.startswith(("gelu_grad/", "sdpa/out", "sdpa/grad")):
            assert fused_values[key].tobytes() == plain_values[key].tobytes(), key


def test_gelu_backward_and_causal_attention_match_torch(tiers):
    torch = pytest.importorskip("torch")
    (_, values), _ = tiers
    specials = [0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 0.5, -0.5, 3.0, -3.0,
                8.0, -8.0, 12.0, -12.0, 40.0, -40.0]
    xs = np.concatenate([np.array(specials), np.linspace(-6, 6, 997)])
    tol = {"float32": dict(rtol=2e-6, atol=2e-7), "float64": dict(rtol=1e-13, atol=1e-15)}
    for dtype in ("float32", "float64"):
        tdt = getattr(torch, dtype)
        x = torch.tensor(xs.astype(dtype), requires_grad=True)
        g = torch.tensor(np.linspace(-2, 2, xs.size).astype(dtype))
        torch.nn.functional.gelu(x).backward(g)
        np.testing.assert_allclose(values["gelu_grad/" + dtype], x.grad.numpy(),
                                   err_msg="gelu backward " + dtype, **tol[dtype])
        q, k, v = [torch.tensor(a, dtype=tdt, requires_grad=True)
                   for a in values["sdpa/qkv/" + dtype]]
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(torch.tensor(values["sdpa/gout/" + dtype]))
        loose = {"float32": dict(rtol=1e-4, atol=1e-5),
                 "float64": dict(rtol=1e-10, atol=1e-12)}[dtype]
        np.testing.assert_allclose(values["sdpa/out/" + dtype], out.detach().numpy(),
                                   err_msg="sdpa " + dtype, **loose)
        for name, t in zip("qkv", (q, k, v)):
            np.testing.assert_allclose(values[f"sdpa/grad_{name}/" + dtype], t.grad.numpy(),
                                       err_msg=f"sdpa grad {name} {dtype}", **loose)
