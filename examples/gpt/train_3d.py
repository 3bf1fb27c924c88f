"""Trains the GPT of model.py with DP x PP x TP on 8 ranks of the embedded
cluster: a (2, 2, 2) ("pp", "dp", "tp") mesh. The model is cut into two
pipeline stages (token and position embeddings with the first half of the
blocks; the other blocks, the final norm and the head), each on its own 4
ranks; inside a stage the batch is Shard(0) on "dp" and the blocks are
tensor parallel on "tp" (model.parallelize). The single controller records
every microbatch's forward and backward per stage in the 1F1B order and
moves activations and gradients between the stages with point-to-point
messages; the script itself writes no send or recv.

    python3 examples/gpt/train_3d.py --steps 50 [--schedule GPipe] [--check]

With --check, the same model (same initial weights) also trains unpipelined
on the 8 ranks (replicated) on the same batches, and the script prints the
largest relative difference between the two runs' losses.
"""
import argparse
import os
import sys

import numpy as np

import dtorch
import dtorch.nn.functional as F
from dtorch import nn
from dtorch.distributed.pipelining import pipeline

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import GPT, GPTConfig, num_parameters, parallelize  # noqa: E402
from train import CharTokenizer, load_corpus  # noqa: E402


class FirstStage(nn.Module):
    """Embeddings and the first blocks: token ids [B, T] -> activations."""

    def __init__(self, gpt, blocks):
        super().__init__()
        self.tok_emb, self.pos_emb = gpt.tok_emb, gpt.pos_emb
        self.blocks = nn.ModuleList(blocks)

    def forward(self, idx):
        pos = dtorch.arange(idx.shape[1], device_mesh=idx.device_mesh)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        return x


class LastStage(nn.Module):
    """The other blocks, the final norm and the head: -> logits [B, T, V]."""

    def __init__(self, gpt, blocks):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.ln_f, self.head = gpt.ln_f, gpt.head

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def lm_loss(logits, targets):
    b, t, v = logits.shape
    return F.cross_entropy(logits.reshape(b * t, v), targets.reshape(b * t))


def train(steps=50, batch_size=16, block_size=16, d_model=32, n_head=4, n_layer=2,
          n_microbatches=4, schedule="1F1B", lr=3e-3, seed=0, check=False, log=print):
    """Returns (pipelined losses, reference losses or None)."""
    text = load_corpus()
    tok = CharTokenizer.from_text(text)
    data = tok.encode(text)
    cfg = GPTConfig(vocab_size=len(tok.chars), block_size=block_size, n_layer=n_layer,
                    n_head=n_head, d_model=d_model)
    dtorch.manual_seed(seed)
    gpt = GPT(cfg)
    state = {k: v.numpy() for k, v in gpt.state_dict().items()}
    mesh = dtorch.init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("pp", "dp", "tp"))
    half = n_layer // 2
    stages = [FirstStage(gpt, gpt.blocks[:half]), LastStage(gpt, gpt.blocks[half:])]
    pp = pipeline(stages, mesh["pp"], n_microbatches=n_microbatches, schedule=schedule)
    for stage, stage_mesh in zip(pp.stages, pp.stage_meshes):
        parallelize(stage, stage_mesh)  # tensor parallel on the stage's "tp"
    log(f"GPT of {num_parameters(gpt):,} parameters; stages on ranks "
        f"{[m.mesh.reshape(-1).tolist() for m in pp.stage_meshes]}, {schedule}, "
        f"{n_microbatches} microbatches of {batch_size // n_microbatches}")
    params = [p for s in pp.stages for p in s.parameters()]
    opt = dtorch.optim.AdamW(params, lr=lr, betas=(0.9, 0.99), weight_decay=0.01)
    ref = ref_opt = None
    if check:
        ref = GPT(cfg)  # every rank holds everything: the unpipelined run
        ref.load_state_dict(state)
        ref_opt = dtorch.optim.AdamW(ref.parameters(), lr=lr, betas=(0.9, 0.99),
                                     weight_decay=0.01)
    rng = np.random.default_rng(seed)
    losses, ref_losses = [], []
    for step in range(steps):
        starts = rng.integers(0, len(data) - block_size - 1, size=batch_size)
        xb = np.stack([data[s:s + block_size] for s in starts])
        yb = np.stack([data[s + 1:s + block_size + 1] for s in starts])
        opt.zero_grad(set_to_none=True)
        loss = pp.step(xb, target=yb, loss_fn=lm_loss)
        opt.step()
        losses.append(loss.item())
        if check:
            ref_opt.zero_grad(set_to_none=True)
            _, ref_loss = ref(dtorch.tensor(xb), dtorch.tensor(yb))
            ref_loss.backward()
            ref_opt.step()
            ref_losses.append(ref_loss.item())
        if step % 10 == 0 or step == steps - 1:
            log(f"step {step:4d}  loss {losses[-1]:.4f}"
                + (f"  unpipelined {ref_losses[-1]:.4f}" if check else ""))
    return losses, (ref_losses if check else None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--schedule", default="1F1B",
                        choices=["GPipe", "1F1B"])
    parser.add_argument("--check", action="store_true",
                        help="train the unpipelined model alongside and compare the losses")
    args = parser.parse_args(argv)
    dtorch.init(world_size=8)
    losses, ref = train(steps=args.steps, batch_size=args.batch_size,
                        n_microbatches=args.microbatches, schedule=args.schedule,
                        check=args.check)
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    if ref is not None:
        diff = max(abs(a - b) / abs(b) for a, b in zip(losses, ref))
        print(f"max relative difference to the unpipelined run: {diff:.2e}")


if __name__ == "__main__":
    main()
