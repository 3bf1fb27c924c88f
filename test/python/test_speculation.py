"""Speculation (docs/speculation.md): while the client records a segment that
matched an earlier one so far, the workers start that segment's cached
program on the arguments known so far, and the segment's run confirms it (or
the workers drop it). Results must be the same bits with DTORCH_SPECULATE on
and off, whatever the client does in between.

Each setting runs in a child process of its own (the switch is read once per
process): the same training loops and divergence cases, with the losses and
the parameters' bytes compared between the two."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CHILD = textwrap.dedent(r"""
    import hashlib, json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import dtorch
    from dtorch import Replicate, Shard, _C, nn
    import torch  # noqa: F401  (not used: the reference is the other setting)
    import model as gpt_model

    scenario, world = sys.argv[2], int(sys.argv[3])
    shape = (2, 2) if scenario == "gpt_2x2" else (world,)
    names = ("dp", "tp") if scenario == "gpt_2x2" else ("dp",)
    dtorch.init(world_size=world, num_processes=min(world, 2))
    mesh = dtorch.init_device_mesh("cpu", shape, mesh_dim_names=names)
    batch_on = [Shard(0)] + [Replicate()] * (len(shape) - 1)
    rng = np.random.default_rng(0)
    losses, events = [], []

    def digest(model):
        h = hashlib.sha256()
        for name, p in sorted(model.named_parameters()):
            h.update(name.encode())
            h.update(np.ascontiguousarray(p.detach().numpy()).tobytes())
        return h.hexdigest()

    def gpt(parallel):
        dtorch.manual_seed(3)
        cfg = gpt_model.GPTConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, d_model=16)
        with nn.default_device_mesh(mesh):
            model = gpt_model.GPT(cfg)
        if parallel:
            gpt_model.parallelize(model, mesh)
        return cfg, model

    def gpt_batch(cfg, b=4):
        idx = rng.integers(0, cfg.vocab_size, (b, cfg.block_size))
        tgt = rng.integers(0, cfg.vocab_size, (b, cfg.block_size))
        return (dtorch.tensor(idx, device_mesh=mesh, placements=batch_on),
                dtorch.tensor(tgt, device_mesh=mesh, placements=batch_on))

    def step(model, opt, batch, set_to_none=True, extra=False, fetch_mid=False,
             fail_mid=False, write_between=None):
        opt.zero_grad(set_to_none=set_to_none)
        x, y = batch
        if fetch_mid or fail_mid or write_between is not None:
            # Part of the forward by hand, so the step can be broken inside.
            B, T = x.shape
            h = model.tok_emb(x) + model.pos_emb(dtorch.arange(T, device_mesh=mesh))
            h = model.blocks[0](h)
            if fetch_mid:
                events.append(float(h.sum().item()))
            if fail_mid:
                raise RuntimeError("failed in the middle of the step")
            if write_between is not None:
                _C.cut_segment()
                with dtorch.no_grad():
                    write_between.mul_(1.0009765625)
            for block in model.blocks[1:]:
                h = block(h)
            logits = model.head(model.ln_f(h))
            loss = dtorch.nn.functional.cross_entropy(
                logits.reshape(B * T, -1), y.reshape(B * T))
        else:
            _, loss = model(x, y)
        if extra:
            loss = loss * 1.0 + 0.0
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))

    if scenario in ("gpt", "gpt_dp2", "gpt_2x2"):
        cfg, model = gpt(scenario == "gpt_2x2")
        opt = dtorch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        for _ in range(8):
            step(model, opt, gpt_batch(cfg, 4 if world == 1 else 4 * world))
    elif scenario == "mlp":
        dtorch.manual_seed(5)
        with nn.default_device_mesh(mesh):
            model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64),
                                  nn.ReLU(), nn.Linear(64, 8))
        for opt in (dtorch.optim.AdamW(model.parameters(), lr=1e-2),
                    dtorch.optim.SGD(model.parameters(), lr=1e-2)):
            for _ in range(6):
                opt.zero_grad()
                x = dtorch.tensor(rng.standard_normal((32, 16)).astype(np.float32),
                                  device_mesh=mesh)
                y = dtorch.tensor(rng.standard_normal((32, 8)).astype(np.float32),
                                  device_mesh=mesh)
                loss = ((model(x) - y) ** 2).mean()
                loss.backward()
                opt.step()
                losses.append(float(loss.item()))
    elif scenario == "diverge":
        cfg, model = gpt(False)
        opt = dtorch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
        for _ in range(3):
            step(model, opt, gpt_batch(cfg))
        step(model, opt, gpt_batch(cfg, 6))           # the step changes shape
        step(model, opt, gpt_batch(cfg))
        step(model, opt, gpt_batch(cfg), extra=True)  # an extra op appended
        step(model, opt, gpt_batch(cfg))
        step(model, opt, gpt_batch(cfg), fetch_mid=True)
        step(model, opt, gpt_batch(cfg))
        step(model, opt, gpt_batch(cfg), write_between=model.head.weight)
        step(model, opt, gpt_batch(cfg))
        step(model, opt, gpt_batch(cfg), set_to_none=False)
        step(model, opt, gpt_batch(cfg), set_to_none=True)
        step(model, opt, gpt_batch(cfg))
        try:
            step(model, opt, gpt_batch(cfg), fail_mid=True)
        except RuntimeError as e:
            events.append(str(e))
        for _ in range(2):
            step(model, opt, gpt_batch(cfg))
        # A dropped speculation leaves the parameters as they were: the
        # forward and backward of a step run without its update.
        before = digest(model)
        opt.zero_grad()
        _, loss = model(*gpt_batch(cfg))
        loss.backward()
        _C.cut_segment()
        events.append(float(loss.item()))
        events.append(before == digest(model))
        step(model, opt, gpt_batch(cfg))

    stats = dtorch.memory_stats()
    spec = {k: sum(r["speculation"][k] for r in stats)
            for k in ("started", "confirmed", "dropped", "instructions")}
    ctl = _C.controller_stats()
    print(json.dumps({"losses": [x.hex() for x in losses], "params": digest(model),
                      "events": events, "worker": spec,
                      "controller": [ctl["speculations"], ctl["speculations_confirmed"]]}))
""")


def run_child(tmp_path, scenario, world, speculate):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, DTORCH_SPECULATE=speculate,
               PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, str(script), os.path.join(ROOT, "examples", "gpt"),
                          scenario, str(world)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def on_and_off(tmp_path, scenario, world):
    on = run_child(tmp_path, scenario, world, "1")
    off = run_child(tmp_path, scenario, world, "0")
    assert on["losses"] == off["losses"]
    assert on["params"] == off["params"]
    assert on["events"] == off["events"]
    assert off["worker"]["started"] == 0 and off["controller"] == [0, 0]
    return on


def test_gpt_training_is_bitwise_the_same_and_speculated(tmp_path):
    on = on_and_off(tmp_path, "gpt", 1)
    # Every step after the first two (compile, then the fused recompile)
    # is predicted from the one before and confirmed.
    assert on["controller"][0] >= 4, on
    assert on["controller"][1] >= 4, on
    assert on["worker"]["confirmed"] >= 4, on
    assert on["worker"]["instructions"] > 0, on


def test_mlp_with_adamw_and_sgd_is_bitwise_the_same(tmp_path):
    on = on_and_off(tmp_path, "mlp", 1)
    assert on["worker"]["confirmed"] >= 3, on


def test_divergence_cases_give_the_same_bits(tmp_path):
    on = on_and_off(tmp_path, "diverge", 1)
    assert on["events"][-1] is True  # the parameters were left as they were
    assert "failed in the middle" in on["events"][1]
    # A fetch in the middle of a matching step and the step cut before its
    # update start a speculation that the run does not confirm.
    assert on["worker"]["dropped"] >= 2, on
    assert on["worker"]["started"] > on["worker"]["confirmed"], on
    assert on["worker"]["confirmed"] >= 3, on


@pytest.mark.parametrize("scenario,world", [("gpt_dp2", 2), ("gpt_2x2", 4)])
def test_meshes_with_collectives_are_the_same(tmp_path, scenario, world):
    # Programs with collectives are not speculated (each rank refuses them).
    on = on_and_off(tmp_path, scenario, world)
    assert on["worker"]["confirmed"] == 0, on
