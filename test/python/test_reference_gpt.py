"""Checks of the numpy reference GPT (reference_gpt.py) on its own, so that
the parity test measures dtorch against something known to be right: its
hand-written gradients against central finite differences in float64, its
AdamW step and schedule against their closed forms, and, when torch can be
run (in this interpreter or build/torch-venv), 20 training steps against
torch in float64 (1e-10) and float32 (1e-4)."""
import math

import numpy as np
import pytest

import reference_gpt as ref
import torch_gpt

CFG = ref.Config(vocab_size=11, block_size=6, n_layer=2, n_head=2, d_model=8)


def _loss(params, idx, targets):
    return float(ref.forward(params, idx, targets, CFG)[0])


def test_gradients_match_finite_differences_in_float64():
    params = ref.init_params(CFG, seed=3, dtype=np.float64)
    (idx, targets), = ref.make_batches(CFG, 1, batch_size=3, seed=4)
    idx, targets = idx[:, :5], targets[:, :5]  # shorter than block_size
    loss, grads = ref.loss_and_grads(params, idx, targets, CFG)
    assert set(grads) == set(params)
    rng = np.random.default_rng(5)
    h = 1e-5
    for name, p in params.items():
        assert grads[name].shape == p.shape and grads[name].dtype == np.float64
        # The derivative along a random direction, and along one element.
        for direction in (rng.standard_normal(p.shape),
                          np.eye(1, p.size, rng.integers(p.size)).reshape(p.shape)):
            orig = p.copy()
            p[...] = orig + h * direction
            up = _loss(params, idx, targets)
            p[...] = orig - h * direction
            down = _loss(params, idx, targets)
            p[...] = orig
            numeric = (up - down) / (2 * h)
            analytic = float((grads[name] * direction).sum())
            assert abs(numeric - analytic) <= 1e-6 * abs(analytic) + 1e-9, (
                name, numeric, analytic)
    assert _loss(params, idx, targets) == float(loss)


def test_unused_positions_get_no_gradient():
    params = ref.init_params(CFG, seed=0, dtype=np.float64)
    (idx, targets), = ref.make_batches(CFG, 1, batch_size=2, seed=0)
    _, grads = ref.loss_and_grads(params, idx[:, :4], targets[:, :4], CFG)
    assert np.all(grads["pos_emb.weight"][4:] == 0)
    assert np.any(grads["pos_emb.weight"][:4] != 0)
    unused = np.setdiff1d(np.arange(CFG.vocab_size), idx[:, :4])
    assert np.all(grads["tok_emb.weight"][unused] == 0)


def test_float32_stays_float32():
    params = ref.init_params(CFG, seed=0)
    (idx, targets), = ref.make_batches(CFG, 1, batch_size=2, seed=0)
    loss, grads = ref.loss_and_grads(params, idx, targets, CFG)
    assert loss.dtype == np.float32
    assert all(g.dtype == np.float32 for g in grads.values())
    params64 = {k: v.astype(np.float64) for k, v in params.items()}
    loss64, grads64 = ref.loss_and_grads(params64, idx, targets, CFG)
    assert abs(float(loss) - float(loss64)) < 1e-5 * float(loss64)


def test_adamw_first_steps_closed_form():
    lr, wd, b1, b2, eps = 0.1, 0.5, 0.9, 0.99, 1e-8
    p0 = np.array([1.0, -2.0, 3.0])
    g1, g2 = np.array([0.5, -0.25, 0.0]), np.array([1.0, 1.0, 2.0])
    params = {"w": p0.copy()}
    opt = ref.AdamW(params, lr, (b1, b2), eps, wd)
    opt.step({"w": g1})
    # Step 1: m / sqrt(v) with both bias-corrected is g / |g|.
    want = p0 * (1 - lr * wd) - lr * g1 / (np.abs(g1) + eps)
    np.testing.assert_allclose(params["w"], want, rtol=1e-12)
    opt.step({"w": g2})
    m = (1 - b1) * (b1 * g1 + g2)
    v = (1 - b2) * (b2 * g1 ** 2 + g2 ** 2)
    mhat, vhat = m / (1 - b1 ** 2), v / (1 - b2 ** 2)
    want = want * (1 - lr * wd) - lr * mhat / (np.sqrt(vhat) + eps)
    np.testing.assert_allclose(params["w"], want, rtol=1e-12)


def test_cosine_schedule_with_warmup():
    lrs = [ref.cosine_with_warmup(s, 4, 20, 2.0) for s in range(22)]
    assert lrs[:5] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert lrs[12] == pytest.approx(1.0)  # half way through the decay
    assert lrs[20] == pytest.approx(0.0, abs=1e-15) and lrs[21] == pytest.approx(0.0, abs=1e-15)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))


# ---- against torch ------------------------------------------------------------------
def _reference_and_torch(dtype):
    """The reference and torch on the parity problem (reference_gpt.PARITY)."""
    reason = torch_gpt.unavailable()
    if reason:
        pytest.skip(reason)
    losses, params = ref.parity_train(dtype)
    t_losses, t_params = torch_gpt.parity_runs()[np.dtype(dtype).name]
    assert set(params) == set(t_params)
    return np.array(losses), params, np.array(t_losses), t_params


def test_twenty_steps_match_torch_in_float64():
    losses, params, t_losses, t_params = _reference_and_torch(np.float64)
    assert losses[-1] < 0.8 * losses[0]
    np.testing.assert_allclose(losses, t_losses, rtol=1e-10)
    for name in params:
        np.testing.assert_allclose(params[name], t_params[name], rtol=1e-8, atol=1e-10,
                                   err_msg=name)


def test_twenty_steps_match_torch_in_float32():
    losses, params, t_losses, t_params = _reference_and_torch(np.float32)
    rel = np.abs(losses / t_losses - 1)
    assert rel.max() <= 1e-4, (rel.max(), losses, t_losses)
    for name in params:
        np.testing.assert_allclose(params[name], t_params[name], rtol=1e-3, atol=1e-4,
                                   err_msg=name)
    assert math.isfinite(losses[-1])
