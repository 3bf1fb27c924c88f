"""Worker kernel time of the GPT step (issue 10): what the compiler and the
runtime do to the attention and the fused kernels around it must leave
every value of a training step bit for bit as it was.

- `--rank-rematerialize-broadcasts` (DTORCH_REMATERIALIZE=0 turns it off):
  a constant or a broadcast read by a later fused group is made again in
  that group instead of being stored by the first one and loaded again.
"""
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent("""
    import json, sys
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
    ir = dtorch.last_ir("rank")
    results = {"p/" + name: p.numpy() for name, p in model.named_parameters()}
    for dtype in ("float32", "float64"):
        qkv = rng.standard_normal((3, 2, 3, 8, 4)).astype(dtype)
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
    print("RESULT " + json.dumps({"losses": [float(l).hex() for l in losses], "ir": ir}))
    dtorch.shutdown()
""")


def run_child(tmp_path, name, **env):
    out = tmp_path / f"{name}.npz"
    full_env = dict(subprocess_env(), DTORCH_FUSION="1", DTORCH_CACHE_DIR="", **env)
    done = subprocess.run([sys.executable, "-c", CHILD, os.path.join(ROOT, "examples", "gpt"),
                           str(out)], capture_output=True, text=True, env=full_env,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    line = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")][-1]
    with np.load(out) as data:
        return json.loads(line[len("RESULT "):]), {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("attn")
    return {"default": run_child(tmp, "default"),
            "no_remat": run_child(tmp, "no_remat", DTORCH_REMATERIALIZE="0"),
            "no_bmm_layout": run_child(tmp, "no_bmm_layout", DTORCH_FOLD_BMM_LAYOUT="0"),
            "blas_bmm": run_child(tmp, "blas_bmm", DTORCH_SMALL_GEMM="0")}


def stored_constants_and_broadcasts(ir):
    """Per rank.fused of the step: how many of its results are made inside
    it by a `full`, `iota` or `broadcast_to` (values a later group could
    make again), and the total count of fused results."""
    made, stored, results = {}, 0, 0
    for line in ir.splitlines():
        if line.startswith("    %") and "rank.fused" in line:
            made = {}
        m = re.match(r'\s+(%\w+) = rank\.kernel "(\w+)"', line)
        if m and line.startswith("      "):
            made[m.group(1)] = m.group(2)
        y = re.match(r"\s+rank\.yield (.*?) :", line)
        if y:
            names = [v.strip() for v in y.group(1).split(",")]
            results += len(names)
            stored += sum(made.get(v) in ("full", "iota", "broadcast_to") for v in names)
    return stored, results


@pytest.mark.parametrize("switched_off", ["no_remat", "no_bmm_layout"])
def test_step_is_the_same_bit_for_bit_with_each_switch_off(variants, switched_off):
    (on, on_values), (off, off_values) = variants["default"], variants[switched_off]
    assert on["losses"] == off["losses"]
    assert set(on_values) == set(off_values)
    assert sum(k.startswith("p/") for k in on_values) > 10
    for key in on_values:
        assert on_values[key].tobytes() == off_values[key].tobytes(), key


def test_rematerialized_step_stores_fewer_constants_and_broadcasts(variants):
    on_stored, on_results = stored_constants_and_broadcasts(variants["default"][0]["ir"])
    off_stored, off_results = stored_constants_and_broadcasts(variants["no_remat"][0]["ir"])
    # Without the copies, the softmax, layer norm and gelu groups store
    # their scales, masks and spread row values for the backward.
    assert off_stored >= 10, (off_stored, off_results)
    assert on_stored <= off_stored // 4, (on_stored, off_stored)
    assert on_results < off_results


def test_attention_matches_numpy(variants):
    _, values = variants["default"]
    for dtype, tol in (("float32", 2e-5), ("float64", 1e-12)):
        q, k, v = values["sdpa/qkv/" + dtype].astype(np.float64)
        gout = values["sdpa/gout/" + dtype].astype(np.float64)
        t = q.shape[-2]
        scale = 1.0 / np.sqrt(q.shape[-1])
        s = q @ np.swapaxes(k, -1, -2) * scale
        s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = p @ v
        dp = gout @ np.swapaxes(v, -1, -2)
        ds = p * (dp - (dp * p).sum(-1, keepdims=True))
        grads = {"q": ds @ k * scale, "k": np.swapaxes(ds, -1, -2) @ q * scale,
                 "v": np.swapaxes(p, -1, -2) @ gout}
        np.testing.assert_allclose(values["sdpa/out/" + dtype], out, rtol=tol, atol=tol)
        for name, ref in grads.items():
            np.testing.assert_allclose(values[f"sdpa/grad_{name}/" + dtype], ref,
                                       rtol=tol * 10, atol=tol * 10)


def test_head_transposes_fold_into_the_bmms(variants):
    def kernels(ir, name):
        return [l for l in ir.splitlines()
                if l.startswith("    %") and f'rank.kernel "{name}"' in l]
    on, off = variants["default"][0]["ir"], variants["no_bmm_layout"][0]["ir"]
    # Two layers: q, k, v split into heads and the output joined, forward
    # and backward.
    assert len(kernels(off, "transpose")) >= 8, off
    assert not kernels(on, "transpose")
    bmms = kernels(on, "bmm")
    assert len(bmms) == len(kernels(off, "bmm")) == 12
    assert all("a_perm" in b or "b_perm" in b or "out_perm" in b for b in bmms), bmms
    assert sum("out_perm" in b for b in bmms) >= 4


def test_small_gemm_step_agrees_with_the_blas(variants):
    (on, on_values), (blas, blas_values) = variants["default"], variants["blas_bmm"]
    np.testing.assert_allclose([float.fromhex(x) for x in on["losses"]],
                               [float.fromhex(x) for x in blas["losses"]], rtol=1e-5)
    for key in on_values:
        if key.startswith(("p/", "sdpa/out", "sdpa/grad")):
            tol = 1e-12 if key.endswith("float64") else 1e-4
            np.testing.assert_allclose(on_values[key], blas_values[key], rtol=tol,
                                       atol=tol, err_msg=key)
