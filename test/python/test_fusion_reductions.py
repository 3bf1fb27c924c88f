"""Fusion of the reductions that end a chain (softmax, log_softmax,
layer_norm, cross-entropy): on the embedded cluster (4 ranks in 2 worker
processes), with rows sharded, the reduced dim sharded and replicated, the
fused programs (DTORCH_FUSION=1) give the bits the unfused ones give
(DTORCH_FUSION=0) in every float dtype, and they hold generated kernels
that take in the reductions.

Bitwise everywhere, exp and log included: the runtime's float32-family
exp/log compute the generated kernels' polynomial approximations operation
for operation (runtime/include/dtorch/runtime/PolynomialMath.h)."""
import textwrap

from conftest import run_fusion_script

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import dtorch
    from dtorch import Replicate, Shard
    import dtorch.nn.functional as F

    dtorch.init(world_size=4, num_processes=2)
    mesh = dtorch.init_device_mesh("cpu", (4,))
    rng = np.random.default_rng(5)
    xv = (rng.standard_normal((32, 45)) * 3).astype(np.float64)
    wv = rng.standard_normal(45)
    bv = rng.standard_normal(45)
    tv = rng.integers(0, 45, size=32)
    out = {}

    def bits(t):
        a = np.ascontiguousarray(t.float().numpy() if t.dtype == dtorch.bfloat16
                                 else t.numpy())
        return a.view(np.uint8).tobytes().hex()

    for placement in ("S0", "S1", "R"):
        p = {"S0": Shard(0), "S1": Shard(1), "R": Replicate()}[placement]
        for dtype in ("float32", "float64", "float16", "bfloat16"):
            dt = getattr(dtorch, dtype)
            x = dtorch.tensor(xv, device_mesh=mesh, placements=[p]).to(dt)
            w = dtorch.tensor(wv, device_mesh=mesh, placements=[Replicate()]).to(dt)
            b = dtorch.tensor(bv, device_mesh=mesh, placements=[Replicate()]).to(dt)
            t = dtorch.tensor(tv, device_mesh=mesh, placements=[Replicate()])
            key = placement + " " + dtype
            out[key + " layer_norm"] = bits(F.layer_norm(x, (45,), w, b))
            out[key + " softmax"] = bits(F.softmax(x, -1))
            out[key + " log_softmax"] = bits(F.log_softmax(x, -1))
            out[key + " rms_norm"] = bits(F.rms_norm(x, (45,), w))
            if dtype in ("float32", "float64"):
                out[key + " cross_entropy"] = bits(F.cross_entropy(x, t))
    # The softmax of rows sharded: one generated kernel takes in its max and
    # sum (the function's ops at the body's indentation: no lone reduction).
    x = dtorch.tensor(xv, device_mesh=mesh, placements=[Shard(0)])
    F.softmax(x, -1).numpy()
    ir = dtorch.last_ir("rank")
    top = [l for l in ir.splitlines() if l.startswith("    %") and "rank." in l]
    out["fused_reduction"] = (len(top) == 1 and "rank.fused" in top[0]
                              and '"max"' in ir and '"sum"' in ir)
    print("RESULT " + json.dumps(out))
    dtorch.shutdown()
""")


def _run(fusion):
    return run_fusion_script(SCRIPT, "1" if fusion else "0", timeout=600)


def test_fused_reductions_match_unfused_bitwise():
    fused = _run(True)
    plain = _run(False)
    assert fused.pop("fused_reduction") is True
    assert plain.pop("fused_reduction") is False
    assert fused.keys() == plain.keys()
    for key in sorted(fused):
        assert fused[key] == plain[key], key
    assert len(fused) >= 50
