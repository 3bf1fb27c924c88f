"""The GPT example (examples/gpt) end to end, small: training on the 2x2
("dp", "tp") mesh lowers the loss; the saved model loads back; greedy
decoding with the sharded KV cache is deterministic, compiles nothing after
its first step, and gives the tokens of a numpy forward with the same
weights."""
import math
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))

import generate  # noqa: E402
import train  # noqa: E402

TINY = dict(steps=40, batch_size=32, block_size=16, d_model=32, n_head=2, n_layer=2,
            lr=2e-2, warmup=2, seed=0, packages=("json",))


COMPILES = []


@pytest.fixture(scope="module")
def trained(dt):
    return train.train(progress=False, log=lambda *a: None, compiles=COMPILES, **TINY)


# ---- a numpy forward of the same model, without a cache -------------------
_erf = np.vectorize(math.erf)


def _layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _linear(sd, name, x):
    y = x @ sd[name + ".weight"].T
    return y + sd[name + ".bias"] if name + ".bias" in sd else y


def numpy_logits(sd, cfg, ids):
    """Logits [T, V] of the token ids [T] (float64)."""
    T, H, D = len(ids), cfg.n_head, cfg.d_model
    x = sd["tok_emb.weight"][ids] + sd["pos_emb.weight"][:T]
    causal = np.tril(np.ones((T, T), dtype=bool))
    for i in range(cfg.n_layer):
        p = f"blocks.{i}."
        h = _layer_norm(x, sd[p + "ln1.weight"], sd[p + "ln1.bias"])
        q, k, v = (_linear(sd, p + "attn." + n, h).reshape(T, H, D // H).transpose(1, 0, 2)
                   for n in "qkv")
        s = np.where(causal, q @ k.transpose(0, 2, 1) / math.sqrt(D // H), -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        y = (a / a.sum(-1, keepdims=True)) @ v
        x = x + _linear(sd, p + "attn.proj", y.transpose(1, 0, 2).reshape(T, D))
        h = _linear(sd, p + "mlp.fc1", _layer_norm(x, sd[p + "ln2.weight"], sd[p + "ln2.bias"]))
        x = x + _linear(sd, p + "mlp.fc2", 0.5 * h * (1 + _erf(h / math.sqrt(2))))
    return _linear(sd, "head", _layer_norm(x, sd["ln_f.weight"], sd["ln_f.bias"]))


def numpy_greedy(sd, cfg, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(numpy_logits(sd, cfg, np.array(ids))[-1].argmax()))
    return ids[len(prompt):]


# ---- tests -------------------------------------------------------------------
def test_training_lowers_the_loss(trained):
    _, _, _, losses = trained
    assert len(losses) == TINY["steps"] and all(np.isfinite(losses))
    first, last = losses[0], float(np.mean(losses[-5:]))
    assert last < 0.7 * first, losses
    # An untrained model predicts about uniformly: the first loss is ~log(V).
    assert abs(first - math.log(trained[1].vocab_size)) < 0.5


def test_training_steps_after_the_second_compile_nothing(trained):
    # Step 1 creates the optimizer state, step 2 runs the steady program.
    assert len(COMPILES) == TINY["steps"] and COMPILES[0] > 0
    assert all(c == 0 for c in COMPILES[2:]), COMPILES


def test_parameters_are_laid_out_dp_x_tp(trained):
    from dtorch import Replicate, Shard
    model = trained[0]
    attn, mlp = model.blocks[0].attn, model.blocks[0].mlp
    assert tuple(attn.q.weight.placements) == (Replicate(), Shard(0))
    assert tuple(attn.q.bias.placements) == (Replicate(), Shard(0))
    assert tuple(attn.proj.weight.placements) == (Replicate(), Shard(1))
    assert tuple(mlp.fc1.weight.placements) == (Replicate(), Shard(0))
    assert tuple(mlp.fc2.weight.placements) == (Replicate(), Shard(1))
    assert tuple(mlp.fc2.bias.placements) == (Replicate(), Replicate())
    assert tuple(model.tok_emb.weight.placements) == (Replicate(), Replicate())


def test_greedy_decoding_matches_numpy_and_compiles_once(trained):
    model, cfg, tok, _ = trained
    prompt = list(tok.encode("def "))
    compiles = []
    first = generate.generate(model, prompt, 8, compiles=compiles)
    second = generate.generate(model, prompt, 8)
    assert first == second
    # Every step after the first runs the first step's program.
    assert len(compiles) == len(prompt) + 8 - 1
    assert all(c == 0 for c in compiles[1:]), compiles
    sd = {k: v.numpy().astype(np.float64) for k, v in model.state_dict().items()}
    assert first == numpy_greedy(sd, cfg, prompt, 8)


def test_cached_decode_steps_give_the_logits_of_a_numpy_forward(trained):
    import dtorch
    model, cfg, tok, _ = trained
    ids = tok.encode("def f(x):\n    return")[:cfg.block_size]
    sd = {k: v.numpy().astype(np.float64) for k, v in model.state_dict().items()}
    want = numpy_logits(sd, cfg, ids)
    mesh = model.tok_emb.weight.device_mesh
    cache = generate.KVCache(cfg, 1, mesh)
    pos = dtorch.zeros(1, dtype=dtorch.int64, device_mesh=mesh)
    with dtorch.no_grad():
        for t, i in enumerate(ids):
            x = dtorch.tensor(np.array([[i]]), device_mesh=mesh)
            got = generate.decode_step(model, cache, x, pos).numpy()[0]
            pos._assign(pos + 1)
            np.testing.assert_allclose(got, want[t], rtol=1e-4, atol=1e-4, err_msg=f"step {t}")


def test_decoding_past_the_context_reuses_the_program(trained):
    model, cfg, tok, _ = trained
    compiles = []
    ids = generate.generate(model, list(tok.encode("import ")), cfg.block_size - 2,
                            top_k=3, seed=1, compiles=compiles)
    assert len(ids) == cfg.block_size - 2 and all(0 <= i < cfg.vocab_size for i in ids)
    assert all(c == 0 for c in compiles[1:]), compiles


def test_saved_model_loads_back_and_generates_the_same(trained, tmp_path, dt):
    model, cfg, tok, losses = trained
    path = str(tmp_path / "model.npz")
    train.save_model(path, model, cfg, tok)
    train.plot_losses(losses, str(tmp_path / "loss.png"))
    assert os.path.getsize(tmp_path / "loss.png") > 1000
    mesh = dt.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    loaded, cfg2, chars = generate.load_model(path, mesh)
    assert cfg2 == cfg and chars == tok.chars
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(loaded.state_dict()[k].numpy(), v.numpy())
    prompt = list(tok.encode("if "))
    assert generate.generate(loaded, prompt, 6) == generate.generate(model, prompt, 6)
