"""Trains a small character-level GPT with dtorch on a 2x2 ("dp", "tp") CPU
mesh: data parallel on "dp" (the batch is Shard(0)), tensor parallel on "tp"
(see model.parallelize). The corpus is the source code of standard-library
packages, read from the installed Python: nothing is downloaded.

    python3 examples/gpt/train.py --steps 200 --out /tmp/gpt

writes loss.png (the loss curve), model.npz (the full tensors of the state
dict, with the config and vocabulary) and prints a generated sample.
"""
import argparse
import dataclasses
import importlib
import json
import os
import pathlib
import sys
import time

import numpy as np

import dtorch
from dtorch import Replicate, Shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GPT, GPTConfig, num_parameters, parallelize  # noqa: E402


def load_corpus(packages=("json", "textwrap", "email")):
    """The .py files of standard-library packages (or modules), concatenated."""
    parts = []
    for name in packages:
        mod = importlib.import_module(name)
        path = pathlib.Path(mod.__file__)
        files = sorted(path.parent.glob("*.py")) if path.name == "__init__.py" else [path]
        parts += [f.read_text(encoding="utf-8") for f in files]
    return "\n".join(parts)


class CharTokenizer:
    def __init__(self, chars):
        self.chars = list(chars)
        self.index = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text):
        return cls(sorted(set(text)))

    def encode(self, s):
        return np.array([self.index[c] for c in s], dtype=np.int64)

    def decode(self, ids):
        return "".join(self.chars[int(i)] for i in ids)


def save_model(path, model, cfg, tokenizer):
    """The state dict as full numpy arrays, plus the config and vocabulary."""
    arrays = {k: v.numpy() for k, v in model.state_dict().items()}
    meta = json.dumps({"config": dataclasses.asdict(cfg), "chars": tokenizer.chars})
    np.savez(path, __meta__=np.array(meta), **arrays)


def plot_losses(losses, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(np.arange(1, len(losses) + 1), losses, lw=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (cross entropy)")
    ax.set_title("char-level GPT on a 2x2 DP x TP mesh")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def train(steps=200, batch_size=32, block_size=32, d_model=64, n_head=4, n_layer=2,
          lr=3e-3, warmup=20, seed=0, packages=("json", "textwrap", "email"),
          progress=True, log=print, compiles=None):
    """Trains on the 2x2 mesh; returns (model, cfg, tokenizer, losses). If
    `compiles` is a list, the number of programs compiled during each step
    is appended to it."""
    from tqdm import tqdm
    text = load_corpus(packages)
    tok = CharTokenizer.from_text(text)
    data = tok.encode(text)
    cfg = GPTConfig(vocab_size=len(tok.chars), block_size=block_size, n_layer=n_layer,
                    n_head=n_head, d_model=d_model)
    mesh = dtorch.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dtorch.manual_seed(seed)
    with dtorch.nn.default_device_mesh(mesh):
        model = parallelize(GPT(cfg), mesh)
    log(f"corpus: {len(text):,} characters of {', '.join(packages)}; vocabulary "
        f"{cfg.vocab_size}; model: {num_parameters(model):,} parameters")
    opt = dtorch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.01)
    sched = dtorch.optim.lr_scheduler.CosineWithWarmupLR(opt, num_warmup_steps=min(warmup, steps),
                                                         num_training_steps=steps)
    rng = np.random.default_rng(seed)
    batch_placements = [Shard(0), Replicate()]
    losses = []
    bar = tqdm(range(steps), disable=not progress, unit="step", dynamic_ncols=True)
    t0 = time.perf_counter()
    for step in bar:
        before = dtorch._C.compile_count()
        starts = rng.integers(0, len(data) - block_size - 1, size=batch_size)
        xb = np.stack([data[s:s + block_size] for s in starts])
        yb = np.stack([data[s + 1:s + block_size + 1] for s in starts])
        x = dtorch.tensor(xb, device_mesh=mesh, placements=batch_placements)
        y = dtorch.tensor(yb, device_mesh=mesh, placements=batch_placements)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if compiles is not None:
            compiles.append(dtorch._C.compile_count() - before)
        elapsed = time.perf_counter() - t0
        bar.set_postfix(loss=f"{losses[-1]:.3f}",
                        tok_s=f"{(step + 1) * batch_size * block_size / elapsed:,.0f}")
    bar.close()
    return model, cfg, tok, losses


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample-tokens", type=int, default=120)
    ap.add_argument("--out", default="gpt-out", help="folder for loss.png and model.npz")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    model, cfg, tok, losses = train(args.steps, args.batch_size, args.block_size, args.d_model,
                                    args.n_head, args.n_layer, args.lr, args.warmup, args.seed,
                                    progress=not args.no_progress)
    train_s = time.perf_counter() - t0
    first, last = losses[0], float(np.mean(losses[-10:]))
    print(f"trained {len(losses)} steps in {train_s:.1f} s; loss {first:.3f} -> {last:.3f} "
          f"(mean of the last 10 steps)")
    png = os.path.join(args.out, "loss.png")
    plot_losses(losses, png)
    npz = os.path.join(args.out, "model.npz")
    save_model(npz, model, cfg, tok)
    print(f"loss curve: {os.path.abspath(png)}")
    print(f"model:      {os.path.abspath(npz)}")
    if args.sample_tokens > 0:
        from generate import generate_text
        sample = generate_text(model, cfg, tok, prompt="def ", max_new_tokens=args.sample_tokens,
                               top_k=5, seed=args.seed)
        print("sample (top-k 5):\n" + sample)
    return losses


if __name__ == "__main__":
    main()
