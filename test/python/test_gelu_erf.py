"""gelu (the erf form) against torch, forward and gradient, on 1 and 2
ranks, with the division-free piecewise float32 erf (DTORCH_ERF_PIECEWISE,
the default) and with MLIR's rational approximation: within float32
tolerance of torch's gelu in both settings, the piecewise erf at least as
close, and float32 results the same bits fused (generated kernels,
DTORCH_FUSION=1) and unfused (the runtime's hand-written kernels,
DTORCH_FUSION=0) in each setting. Each setting runs in child interpreters
(the switch is read once per process)."""
import textwrap

import pytest

from conftest import run_fusion_script

SCRIPT = textwrap.dedent("""
    import hashlib
    import json
    import numpy as np
    import torch
    import dtorch
    from dtorch import Shard
    import dtorch.nn.functional as F

    dtorch.init(world_size=2, num_processes=1)
    meshes = {1: dtorch.init_device_mesh("cpu", (1,)),
              2: dtorch.init_device_mesh("cpu", (2,))}
    rng = np.random.default_rng(3)
    # Wide values (past erf's saturation at 3.92 * sqrt(2)), both signs,
    # zeros, and a row length that is no multiple of a vector width.
    xv = (rng.standard_normal((64, 1001)) * 3).astype(np.float32)
    xv[0, :8] = [0.0, -0.0, 1.4142135, -1.4142135, 5.55, -5.55, 30.0, -30.0]
    gv = rng.standard_normal((64, 1001)).astype(np.float32)
    tx = torch.tensor(xv, requires_grad=True)
    want = torch.nn.functional.gelu(tx)
    want.backward(torch.tensor(gv))
    out = {"errors": {}, "bits": {}}
    for ranks in (1, 2):
        mesh = meshes[ranks]
        x = dtorch.tensor(xv, device_mesh=mesh, placements=[Shard(0)],
                          requires_grad=True)
        g = dtorch.tensor(gv, device_mesh=mesh, placements=[Shard(0)])
        y = F.gelu(x)
        y.backward(g)
        got, grad = y.numpy(), x.grad.numpy()
        scale = np.maximum(1.0, np.abs(want.detach().numpy()))
        out["errors"][str(ranks)] = [
            float(np.max(np.abs(got - want.detach().numpy()) / scale)),
            float(np.max(np.abs(grad - tx.grad.numpy())
                         / np.maximum(1.0, np.abs(tx.grad.numpy())))),
        ]
        out["bits"][str(ranks)] = [hashlib.sha256(got.tobytes()).hexdigest(),
                                   hashlib.sha256(grad.tobytes()).hexdigest()]
    print("RESULT " + json.dumps(out))
    dtorch.shutdown()
""")


@pytest.fixture(scope="module")
def runs():
    return {(piecewise, fusion): run_fusion_script(
                SCRIPT, fusion, env={"DTORCH_ERF_PIECEWISE": piecewise})
            for piecewise in ("1", "0") for fusion in ("1", "0")}


@pytest.mark.parametrize("piecewise", ["1", "0"])
def test_gelu_matches_torch(runs, piecewise):
    for fusion in ("1", "0"):
        errors = runs[(piecewise, fusion)]["errors"]
        assert errors.keys() == {"1", "2"}
        for ranks, (forward, backward) in errors.items():
            assert forward <= 2e-6, (piecewise, fusion, ranks, forward)
            assert backward <= 4e-6, (piecewise, fusion, ranks, backward)


@pytest.mark.parametrize("piecewise", ["1", "0"])
def test_generated_and_hand_written_gelu_agree_bitwise(runs, piecewise):
    assert runs[(piecewise, "1")]["bits"] == runs[(piecewise, "0")]["bits"]


def test_piecewise_erf_changes_the_values_and_is_closer(runs):
    piecewise, rational = runs[("1", "1")], runs[("0", "1")]
    assert piecewise["bits"] != rational["bits"]
    assert piecewise["errors"]["1"][0] <= rational["errors"]["1"][0]
