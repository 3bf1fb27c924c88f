"""cross_entropy's generated row kernels against torch, for class counts
that are and are not multiples of the 8-element vectors the row kernels
reduce on (7, 8, 9, 1000 and GPT-2's 50257), on 1 and 2 ranks (rows
sharded; on 2 ranks also the class dim sharded, whose local class counts
are odd), with masked vector tails (DTORCH_ROW_MASKED_TAILS, the default)
and without: loss and gradient within float32 tolerance of torch's, and
the same bits in both settings (the masked tail's padding changes no
accumulator). Each setting runs in a child interpreter (the switch is read
once per process), fused from the first compile (DTORCH_FUSION=1)."""
import textwrap

import pytest

from conftest import run_fusion_script

SCRIPT = textwrap.dedent("""
    import hashlib
    import json
    import numpy as np
    import torch
    import dtorch
    from dtorch import Replicate, Shard
    import dtorch.nn.functional as F

    dtorch.init(world_size=2, num_processes=1)
    meshes = {1: dtorch.init_device_mesh("cpu", (1,)),
              2: dtorch.init_device_mesh("cpu", (2,))}
    rng = np.random.default_rng(7)
    out = {"errors": {}, "bits": {}}
    for classes in (7, 8, 9, 1000, 50257):
        rows = 6 if classes > 1000 else 18
        xv = (rng.standard_normal((rows, classes)) * 3).astype(np.float32)
        tv = rng.integers(0, classes, size=rows)
        tx = torch.tensor(xv, requires_grad=True)
        want = torch.nn.functional.cross_entropy(tx, torch.tensor(tv))
        want.backward()
        for ranks, placement in ((1, Shard(0)), (2, Shard(0)), (2, Shard(1))):
            mesh = meshes[ranks]
            x = dtorch.tensor(xv, device_mesh=mesh, placements=[placement],
                              requires_grad=True)
            t = dtorch.tensor(tv, device_mesh=mesh, placements=[Replicate()])
            loss = F.cross_entropy(x, t)
            loss.backward()
            got_loss = loss.numpy()
            got_grad = x.grad.numpy()
            key = f"{classes} classes, {ranks} ranks, {placement}"
            out["errors"][key] = [
                abs(float(got_loss) - want.item()) / max(1.0, abs(want.item())),
                float(np.max(np.abs(got_grad - tx.grad.numpy()))),
            ]
            out["bits"][key] = (np.asarray(got_loss, np.float32).tobytes().hex(),
                                hashlib.sha256(got_grad.tobytes()).hexdigest())
    # The generated kernels took in the reductions: one rank.fused holds
    # the row's max and sum.
    x = dtorch.tensor(xv, device_mesh=meshes[2], placements=[Shard(0)])
    F.cross_entropy(x, dtorch.tensor(tv, device_mesh=meshes[2],
                                     placements=[Replicate()])).numpy()
    ir = dtorch.last_ir("rank")
    out["fused_reduction"] = "rank.fused" in ir and '"max"' in ir and '"sum"' in ir
    print("RESULT " + json.dumps(out))
    dtorch.shutdown()
""")


@pytest.fixture(scope="module")
def settings():
    return {masked: run_fusion_script(SCRIPT, "1", env={"DTORCH_ROW_MASKED_TAILS": masked})
            for masked in ("1", "0")}


@pytest.mark.parametrize("masked", ["1", "0"])
def test_cross_entropy_matches_torch(settings, masked):
    out = settings[masked]
    assert out["fused_reduction"] is True
    assert len(out["errors"]) == 15
    for key, (loss_error, grad_error) in out["errors"].items():
        assert loss_error <= 2e-6, (key, loss_error)
        assert grad_error <= 1e-6, (key, grad_error)


def test_masked_tails_keep_the_bits(settings):
    assert settings["1"]["bits"] == settings["0"]["bits"]
