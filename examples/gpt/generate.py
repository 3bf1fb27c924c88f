"""Text generation from a GPT trained by train.py: greedy or top-k sampling
with a key/value cache.

The cache of each layer is a pair of preallocated DTensors [B, H, T_max,
D/H], sharded by heads (Shard(1)) on the mesh's "tp" dim, the layout of the
q/k/v projections. A decode step feeds one token: it writes that token's
key and value at position `pos` (a tensor on the workers, so no step
differs from another in the program it records) with a `where` over the
position axis, and `_assign`s the result to the cache; attention masks the
positions after `pos`. So every decode step after the first runs the same
cached program and compiles nothing. When the cache is full, the last half
of the context is fed again from position 0, with the same program.

    python3 examples/gpt/generate.py gpt-out/model.npz --prompt "def " --top-k 5
"""
import argparse
import json
import os
import sys

import numpy as np

import dtorch
import dtorch.nn.functional as F
from dtorch import Replicate, Shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GPT, GPTConfig, on_tp, parallelize  # noqa: E402


def load_model(path, mesh):
    """(model, cfg, chars) from a model.npz written by train.py, laid out on
    `mesh` as for training (TP on its "tp" dim)."""
    with np.load(path) as f:
        meta = json.loads(str(f["__meta__"]))
        state = {k: f[k] for k in f.files if k != "__meta__"}
    cfg = GPTConfig(**meta["config"])
    dtorch.manual_seed(0)
    with dtorch.nn.default_device_mesh(mesh):
        model = parallelize(GPT(cfg), mesh)
    model.load_state_dict(state)
    model.eval()
    return model, cfg, meta["chars"]


class KVCache:
    """Per layer, keys and values [B, H, max_len, D/H], Shard(1) on "tp"."""

    def __init__(self, cfg, batch, mesh, max_len=None):
        self.max_len = max_len or cfg.block_size
        shape = (batch, cfg.n_head, self.max_len, cfg.d_model // cfg.n_head)
        pl = on_tp(mesh, Shard(1))
        self.keys = [dtorch.zeros(*shape, device_mesh=mesh, placements=pl)
                     for _ in range(cfg.n_layer)]
        self.values = [dtorch.zeros(*shape, device_mesh=mesh, placements=pl)
                       for _ in range(cfg.n_layer)]
        positions = dtorch.arange(self.max_len, device_mesh=mesh)
        self.slot_axis = positions.reshape(1, 1, self.max_len, 1)   # where to write
        self.key_axis = positions.reshape(1, 1, 1, self.max_len)    # what to attend to

    def write(self, layer, pos, k, v):
        """Stores k, v [B, H, 1, D/H] at position `pos` (a [1] int64 tensor)
        in place and returns the layer's whole keys and values."""
        slot = self.slot_axis == pos
        self.keys[layer]._assign(dtorch.where(slot, k, self.keys[layer]))
        self.values[layer]._assign(dtorch.where(slot, v, self.values[layer]))
        return self.keys[layer], self.values[layer]


def decode_step(model, cache, tok, pos):
    """Logits [B, V] of the next token after `tok` [B, 1] at position `pos`
    ([1] int64), through the cache."""
    B = tok.shape[0]
    D = model.cfg.d_model
    x = model.tok_emb(tok) + model.pos_emb(pos).reshape(1, 1, D)
    visible = cache.key_axis <= pos                       # [1, 1, 1, max_len]
    for i, block in enumerate(model.blocks):
        attn = block.attn
        h = block.ln1(x)
        q, k, v = attn.heads(attn.q(h)), attn.heads(attn.k(h)), attn.heads(attn.v(h))
        keys, values = cache.write(i, pos, k, v)
        y = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)
        x = x + attn.proj(y.transpose(1, 2).reshape(B, 1, D))
        x = x + block.mlp(block.ln2(x))
    return model.head(model.ln_f(x)).reshape(B, -1)


@dtorch.no_grad()
def generate(model, prompt_ids, max_new_tokens, top_k=None, temperature=1.0, seed=0,
             compiles=None):
    """Token ids continuing `prompt_ids` (a list of ints; batch 1): greedy
    when top_k is None, else sampled from the top_k most likely. If
    `compiles` is a list, the number of programs compiled during each decode
    step is appended to it."""
    cfg = model.cfg
    mesh = model.tok_emb.weight.device_mesh
    rng = np.random.default_rng(seed)
    cache = KVCache(cfg, 1, mesh)
    tok = dtorch.zeros(1, 1, dtype=dtorch.int64, device_mesh=mesh)
    pos = dtorch.zeros(1, dtype=dtorch.int64, device_mesh=mesh)
    zero = dtorch.zeros(1, dtype=dtorch.int64, device_mesh=mesh)
    one = dtorch.ones(1, dtype=dtorch.int64, device_mesh=mesh)
    dtorch.synchronize()
    history = list(prompt_ids)
    out = []
    fed = 0          # tokens of `history` in the cache
    pending = list(prompt_ids)
    while len(out) < max_new_tokens:
        if fed == cache.max_len:                           # full: keep the last half
            pos._assign(zero)
            pending = history[-(cache.max_len // 2):]
            fed = 0
        before = dtorch._C.compile_count()
        tok.copy_(np.array([[pending.pop(0)]], dtype=np.int64))
        logits = decode_step(model, cache, tok, pos)
        pos._assign(pos + one)
        fed += 1
        # The same ops and fetches in every step (also while reading the
        # prompt), so that every step runs the same program.
        if top_k is None:
            nxt = int(logits.argmax(-1).item())
        else:
            values, indices = dtorch.topk(logits, top_k, dim=-1)
            v = values.numpy()[0].astype(np.float64) / temperature
            p = np.exp(v - v.max())
            nxt = int(indices.numpy()[0][rng.choice(top_k, p=p / p.sum())])
        if compiles is not None:
            compiles.append(dtorch._C.compile_count() - before)
        if not pending:
            out.append(nxt)
            history.append(nxt)
            pending = [nxt]
    return out


def generate_text(model, cfg, tokenizer, prompt, max_new_tokens, top_k=None, seed=0):
    ids = generate(model, list(tokenizer.encode(prompt)), max_new_tokens, top_k=top_k,
                   seed=seed)
    return prompt + tokenizer.decode(ids)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Generates text from a model.npz of train.py.")
    ap.add_argument("model", help="the model.npz that train.py wrote")
    ap.add_argument("--prompt", default="def ")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--top-k", type=int, default=None, help="sample from the k most likely "
                    "(default: greedy)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model, cfg, chars = load_model(args.model, mesh)
    index = {c: i for i, c in enumerate(chars)}
    compiles = []
    ids = generate(model, [index[c] for c in args.prompt], args.tokens, top_k=args.top_k,
                   seed=args.seed, compiles=compiles)
    print(args.prompt + "".join(chars[i] for i in ids))
    print(f"[{len(compiles)} decode steps; programs compiled per step: first "
          f"{compiles[0]}, after it {sum(compiles[1:])} in all]")


if __name__ == "__main__":
    main()
