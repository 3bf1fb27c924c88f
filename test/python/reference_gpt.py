"""A reference GPT in plain numpy, written without dtorch: the forward of
examples/gpt/model.py (token and position embeddings, pre-norm blocks of
causal self-attention and a GELU MLP, a final LayerNorm, a bias-free head,
mean cross-entropy), its backward written out by hand, AdamW with torch's
update rule and the cosine-with-warmup learning-rate schedule.

Every array keeps the dtype of the parameters (float32 by default, float64
for gradient checks); scalars (learning rate, bias corrections) are Python
floats, rounded to that dtype where they meet an array, as torch does.
Parameters are a dict keyed by the names of the dtorch (and torch) model's
state dict, so one dict loads into either.
"""
import dataclasses
import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


@dataclasses.dataclass(frozen=True)
class Config:
    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    d_model: int


def param_shapes(cfg):
    """Parameter name -> shape, in the state-dict order of the model."""
    V, T, D = cfg.vocab_size, cfg.block_size, cfg.d_model
    shapes = {"tok_emb.weight": (V, D), "pos_emb.weight": (T, D)}
    for i in range(cfg.n_layer):
        p = f"blocks.{i}."
        shapes[p + "ln1.weight"] = (D,)
        shapes[p + "ln1.bias"] = (D,)
        for n in ("q", "k", "v", "proj"):
            shapes[p + f"attn.{n}.weight"] = (D, D)
            shapes[p + f"attn.{n}.bias"] = (D,)
        shapes[p + "ln2.weight"] = (D,)
        shapes[p + "ln2.bias"] = (D,)
        shapes[p + "mlp.fc1.weight"] = (4 * D, D)
        shapes[p + "mlp.fc1.bias"] = (4 * D,)
        shapes[p + "mlp.fc2.weight"] = (D, 4 * D)
        shapes[p + "mlp.fc2.bias"] = (D,)
    shapes["ln_f.weight"] = (D,)
    shapes["ln_f.bias"] = (D,)
    shapes["head.weight"] = (V, D)
    return shapes


def init_params(cfg, seed=0, dtype=np.float32):
    """GPT-2-like values drawn by numpy: weights N(0, 0.02), and (unlike a
    fresh model, so that every gradient path carries signal) biases
    N(0, 0.02) and LayerNorm weights 1 + N(0, 0.1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if name.split(".")[-2].startswith("ln") and name.endswith("weight"):
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            value = 0.02 * rng.standard_normal(shape)
        out[name] = value.astype(dtype)
    return out


# ---- forward pieces, each returning what its backward needs -------------------
def _layer_norm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    rstd = 1.0 / np.sqrt((xc * xc).mean(-1, keepdims=True) + x.dtype.type(eps))
    xhat = xc * rstd
    return xhat * w + b, (xhat, rstd, w)


def _layer_norm_back(dy, saved):
    xhat, rstd, w = saved
    lead = tuple(range(dy.ndim - 1))
    dw = (dy * xhat).sum(lead)
    db = dy.sum(lead)
    dxhat = dy * w
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    return dx, dw, db


def _linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def _linear_back(dy, x, w, has_bias=True):
    d_in, d_out = x.shape[-1], dy.shape[-1]
    dw = dy.reshape(-1, d_out).T @ x.reshape(-1, d_in)
    dx = dy @ w
    db = dy.reshape(-1, d_out).sum(0) if has_bias else None
    return dx, dw, db


def _gelu(u):
    """The erf form (torch's approximate='none'); erf is evaluated in float64
    and rounded to u's dtype."""
    cdf = (0.5 * (1.0 + _erf(u.astype(np.float64) / math.sqrt(2.0)))).astype(u.dtype)
    return u * cdf, cdf


def _gelu_back(dy, u, cdf):
    pdf = (np.exp(-0.5 * u.astype(np.float64) ** 2) / math.sqrt(2.0 * math.pi)).astype(u.dtype)
    return dy * (cdf + u * pdf)


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attention(x, params, p, cfg):
    B, T, D = x.shape
    H = cfg.n_head
    hd = D // H

    def heads(z):
        return z.reshape(B, T, H, hd).transpose(0, 2, 1, 3)
    q = heads(_linear(x, params[p + "q.weight"], params[p + "q.bias"]))
    k = heads(_linear(x, params[p + "k.weight"], params[p + "k.bias"]))
    v = heads(_linear(x, params[p + "v.weight"], params[p + "v.bias"]))
    scale = x.dtype.type(1.0 / math.sqrt(hd))
    s = (q @ k.transpose(0, 1, 3, 2)) * scale
    causal = np.tril(np.ones((T, T), dtype=bool))
    s = np.where(causal, s, x.dtype.type(-np.inf))
    a = _softmax(s)
    y = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, D)
    out = _linear(y, params[p + "proj.weight"], params[p + "proj.bias"])
    return out, (x, q, k, v, a, y, scale)


def _attention_back(dout, saved, params, p, cfg, grads):
    x, q, k, v, a, y, scale = saved
    B, T, D = x.shape
    H = cfg.n_head
    hd = D // H
    dy, grads[p + "proj.weight"], grads[p + "proj.bias"] = _linear_back(
        dout, y, params[p + "proj.weight"])
    dy = dy.reshape(B, T, H, hd).transpose(0, 2, 1, 3)
    da = dy @ v.transpose(0, 1, 3, 2)
    dv = a.transpose(0, 1, 3, 2) @ dy
    ds = a * (da - (da * a).sum(-1, keepdims=True))  # masked entries: a = 0
    dq = (ds @ k) * scale
    dk = (ds.transpose(0, 1, 3, 2) @ q) * scale
    dx = np.zeros_like(x)
    for name, dh in (("q", dq), ("k", dk), ("v", dv)):
        dflat = dh.transpose(0, 2, 1, 3).reshape(B, T, D)
        dxi, grads[p + name + ".weight"], grads[p + name + ".bias"] = _linear_back(
            dflat, x, params[p + name + ".weight"])
        dx += dxi
    return dx


def _mlp(x, params, p):
    u = _linear(x, params[p + "fc1.weight"], params[p + "fc1.bias"])
    g, cdf = _gelu(u)
    return _linear(g, params[p + "fc2.weight"], params[p + "fc2.bias"]), (x, u, cdf, g)


def _mlp_back(dout, saved, params, p, grads):
    x, u, cdf, g = saved
    dg, grads[p + "fc2.weight"], grads[p + "fc2.bias"] = _linear_back(
        dout, g, params[p + "fc2.weight"])
    du = _gelu_back(dg, u, cdf)
    dx, grads[p + "fc1.weight"], grads[p + "fc1.bias"] = _linear_back(
        du, x, params[p + "fc1.weight"])
    return dx


def forward(params, idx, targets, cfg):
    """Mean cross-entropy of the logits of `idx` [B, T] against `targets`
    [B, T]; returns (loss as a 0-d array, what `backward` needs)."""
    B, T = idx.shape
    x = params["tok_emb.weight"][idx] + params["pos_emb.weight"][:T]
    saved_blocks = []
    for i in range(cfg.n_layer):
        p = f"blocks.{i}."
        h, ln1 = _layer_norm(x, params[p + "ln1.weight"], params[p + "ln1.bias"])
        a, attn = _attention(h, params, p + "attn.", cfg)
        x = x + a
        h, ln2 = _layer_norm(x, params[p + "ln2.weight"], params[p + "ln2.bias"])
        m, mlp = _mlp(h, params, p + "mlp.")
        x = x + m
        saved_blocks.append((ln1, attn, ln2, mlp))
    hf, lnf = _layer_norm(x, params["ln_f.weight"], params["ln_f.bias"])
    logits = _linear(hf, params["head.weight"]).reshape(B * T, -1)
    shifted = logits - logits.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    flat = targets.reshape(-1)
    loss = -logp[np.arange(B * T), flat].mean()
    return loss, (idx, flat, logp, hf, lnf, saved_blocks)


def backward(params, saved, cfg):
    """The gradient of the loss of `forward` for every parameter."""
    idx, flat, logp, hf, lnf, saved_blocks = saved
    B, T = idx.shape
    N = B * T
    grads = {}
    dlogits = np.exp(logp)
    dlogits[np.arange(N), flat] -= 1
    dlogits = (dlogits / logp.dtype.type(N)).reshape(B, T, -1)
    dhf, grads["head.weight"], _ = _linear_back(dlogits, hf, params["head.weight"],
                                                has_bias=False)
    dx, grads["ln_f.weight"], grads["ln_f.bias"] = _layer_norm_back(dhf, lnf)
    for i in reversed(range(cfg.n_layer)):
        p = f"blocks.{i}."
        ln1, attn, ln2, mlp = saved_blocks[i]
        dh = _mlp_back(dx, mlp, params, p + "mlp.", grads)
        dh, grads[p + "ln2.weight"], grads[p + "ln2.bias"] = _layer_norm_back(dh, ln2)
        dx = dx + dh
        dh = _attention_back(dx, attn, params, p + "attn.", cfg, grads)
        dh, grads[p + "ln1.weight"], grads[p + "ln1.bias"] = _layer_norm_back(dh, ln1)
        dx = dx + dh
    dtok = np.zeros_like(params["tok_emb.weight"])
    np.add.at(dtok, idx.reshape(-1), dx.reshape(N, -1))
    grads["tok_emb.weight"] = dtok
    dpos = np.zeros_like(params["pos_emb.weight"])
    dpos[:T] = dx.sum(0)
    grads["pos_emb.weight"] = dpos
    return {name: grads[name] for name in params}


def loss_and_grads(params, idx, targets, cfg):
    loss, saved = forward(params, idx, targets, cfg)
    return loss, backward(params, saved, cfg)


# ---- optimizer and schedule -----------------------------------------------------
def cosine_with_warmup(step, warmup, total, base_lr):
    """The learning rate of (0-based) step `step`: linear from 0 over
    `warmup` steps, then a half cosine down to 0 at `total`."""
    if step < warmup:
        return base_lr * step / max(1, warmup)
    progress = min((step - warmup) / max(1, total - warmup), 1.0)
    return base_lr * max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


class AdamW:
    """torch.optim.AdamW's update on numpy arrays (in place):

        p *= 1 - lr * wd
        m += (g - m) * (1 - beta1)
        v = v * beta2 + g * g * (1 - beta2)
        p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    """

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        self.params = params
        self.lr = lr
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.wd = weight_decay
        self.t = 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, grads):
        self.t += 1
        b1, b2, t = self.beta1, self.beta2, self.t
        for name, p in self.params.items():
            g = grads[name]
            dt = p.dtype.type
            p *= dt(1.0 - self.lr * self.wd)
            m, v = self.m[name], self.v[name]
            m += (g - m) * dt(1.0 - b1)
            v *= dt(b2)
            v += g * g * dt(1.0 - b2)
            step_size = dt(self.lr / (1.0 - b1 ** t))
            denom = np.sqrt(v) / dt(math.sqrt(1.0 - b2 ** t)) + dt(self.eps)
            p -= step_size * (m / denom)


def train(params, batches, cfg, lr, warmup, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
    """Trains `params` (a dict of arrays, updated in place) on `batches`
    [(idx, targets)] with AdamW under the cosine-with-warmup schedule over
    len(batches) steps; returns the loss of each step (before its update)."""
    opt = AdamW(params, lr, betas, eps, weight_decay)
    losses = []
    for step, (idx, targets) in enumerate(batches):
        opt.lr = cosine_with_warmup(step, warmup, len(batches), lr)
        loss, grads = loss_and_grads(params, idx, targets, cfg)
        losses.append(float(loss))
        opt.step(grads)
    return losses


# The problem the parity tests share (test_gpt_parity.py against dtorch,
# test_reference_gpt.py against torch): a tiny GPT, 20 AdamW steps.
PARITY = dict(cfg=Config(vocab_size=16, block_size=8, n_layer=2, n_head=2, d_model=16),
              steps=20, batch_size=8, lr=1e-2, warmup=2, betas=(0.9, 0.99),
              weight_decay=0.01, init_seed=0, batch_seed=1)


def parity_problem(dtype=np.float32):
    """(initial parameters in `dtype`, batches) of PARITY."""
    cfg = PARITY["cfg"]
    init = init_params(cfg, PARITY["init_seed"], dtype)
    return init, make_batches(cfg, PARITY["steps"], PARITY["batch_size"], PARITY["batch_seed"])


def parity_train(dtype=np.float32):
    """(losses, final parameters) of the reference on PARITY in `dtype`."""
    init, batches = parity_problem(dtype)
    losses = train(init, batches, PARITY["cfg"], PARITY["lr"], PARITY["warmup"],
                   PARITY["betas"], weight_decay=PARITY["weight_decay"])
    return losses, init


def make_batches(cfg, steps, batch_size, seed=1):
    """`steps` random batches (idx, targets) of int64 tokens [B, block_size],
    targets being idx shifted by one in a random token stream (so the model
    has something learnable: the stream repeats a short random motif)."""
    rng = np.random.default_rng(seed)
    motif = rng.integers(0, cfg.vocab_size, size=cfg.vocab_size + 3)
    stream = np.tile(motif, 64)
    noise = rng.random(stream.shape) < 0.1
    stream[noise] = rng.integers(0, cfg.vocab_size, size=int(noise.sum()))
    out = []
    for _ in range(steps):
        starts = rng.integers(0, len(stream) - cfg.block_size - 1, size=batch_size)
        idx = np.stack([stream[s:s + cfg.block_size] for s in starts]).astype(np.int64)
        tgt = np.stack([stream[s + 1:s + cfg.block_size + 1] for s in starts]).astype(np.int64)
        out.append((idx, tgt))
    return out
