"""Fusion of elementwise chains (--rank-fuse-elementwise): on the embedded
cluster (4 ranks in 2 worker processes) a fused chain gives the values the
unfused one gives (DTORCH_FUSION=0 turns fusion off), its compiled program
has fewer instructions, and the generated kernel is shipped inside the
program and run by the workers."""
import textwrap

import numpy as np

from conftest import run_fusion_script

CHAIN = textwrap.dedent("""
    import json, sys
    import numpy as np
    import dtorch
    from dtorch import Replicate, Shard

    dtorch.init(world_size=4, num_processes=2)
    mesh = dtorch.init_device_mesh("cpu", (4,))
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((64, 37)).astype(np.float32)
    wv = rng.standard_normal(37).astype(np.float32)
    bv = rng.standard_normal(37).astype(np.float32)
    x = dtorch.tensor(xv, device_mesh=mesh, placements=[Shard(0)])
    w = dtorch.tensor(wv, device_mesh=mesh, placements=[Replicate()])
    b = dtorch.tensor(bv, device_mesh=mesh, placements=[Replicate()])
    h = (x * w + b).gelu() * 0.5
    y = (h.exp() - h).relu() + h.sigmoid()
    s = (y * y).sum()
    d = x.double()
    z = (d * 2.0 - d.tanh()).abs()
    i = x.long()
    k = (i * 3 - i).relu()
    out = {"y": y.numpy().tolist(), "s": float(s.numpy()),
           "z": z.numpy().tolist(), "k": k.numpy().tolist()}
    ir = dtorch.last_ir("rank")
    # Instructions of the class functions: the ops at the function body's
    # indentation (a fused op's body is indented further).
    top = [l for l in ir.splitlines() if l.startswith("    %") and "rank." in l]
    out["instructions"] = len(top)
    out["fused"] = sum("rank.fused" in l for l in top)
    print("RESULT " + json.dumps(out))
    dtorch.shutdown()
""")


def _run(fusion):
    return run_fusion_script(CHAIN, "1" if fusion else "0", timeout=300)


def test_fused_chain_matches_unfused_with_fewer_instructions():
    fused = _run(True)
    plain = _run(False)
    assert plain["fused"] == 0
    assert fused["fused"] >= 1
    assert fused["instructions"] < plain["instructions"]
    np.testing.assert_allclose(fused["y"], plain["y"], rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(fused["s"], plain["s"], rtol=1e-5)
    np.testing.assert_allclose(fused["z"], plain["z"], rtol=1e-12, atol=1e-12)
    assert fused["k"] == plain["k"]


def test_a_segment_is_fused_from_its_second_run(dt, meshes):
    """By default (DTORCH_FUSION unset) a segment's first compile leaves
    fusion out, so code that never repeats pays no code generation; its
    second run compiles it again with generated kernels, used from then on;
    every run gives the right values."""
    import time
    from dtorch import Shard
    mesh = meshes["4"]
    rng = np.random.default_rng(5)
    fused_in_ir = []
    before = dt._C.controller_stats()["fused_recompiles"]
    for step in range(200):
        xv = rng.standard_normal((16, 8)).astype(np.float32)
        x = dt.tensor(xv, device_mesh=mesh, placements=[Shard(0)])
        y = ((x * 2.0 + 1.0).tanh() * x).exp()
        got = y.numpy()
        np.testing.assert_allclose(got, np.exp(np.tanh(xv * 2 + 1) * xv), rtol=1e-5, atol=1e-6)
        fused_in_ir.append("rank.fused" in dt.last_ir("rank"))
        if fused_in_ir[-1]:
            break
        time.sleep(0.02)
    assert fused_in_ir == [False, True], "fused from the second run"
    assert dt._C.controller_stats()["fused_recompiles"] == before + 1
