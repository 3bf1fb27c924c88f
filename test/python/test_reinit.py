"""dtorch.shutdown() then dtorch.init() in one process while tensors of the
earlier session are still alive: the old tensors are inert (freeing them does
nothing, using them raises), and the new session works. Runs in a
subprocess: the test session of conftest stays untouched."""
import subprocess
import sys
import textwrap

from conftest import subprocess_env

SCRIPT = textwrap.dedent("""
    import gc
    import numpy as np
    import dtorch
    kept = []
    for cycle in range(4):
        dtorch.init(world_size=2, num_processes=1)
        mesh = dtorch.init_device_mesh("cpu", (2,))
        model = dtorch.nn.Linear(8, 4, device_mesh=mesh)
        opt = dtorch.optim.AdamW(model.parameters(), lr=1e-2)
        x = dtorch.randn(6, 8, device_mesh=mesh, placements=[dtorch.Shard(0)])
        for _ in range(2):
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
        assert np.isfinite(loss.item())
        if kept:
            try:
                kept[-1][0].weight + model.weight
            except ValueError as e:
                assert "another dtorch session" in str(e), e
            else:
                raise AssertionError("a tensor of an ended session was usable")
        kept.append((model, opt, loss))
        dtorch.shutdown()
        if cycle % 2:
            kept.clear()
            gc.collect()
    print("ok")
""")


def test_reinit_with_tensors_of_an_ended_session_alive():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                       timeout=180, env=subprocess_env())
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
