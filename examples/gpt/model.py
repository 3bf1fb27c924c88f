"""A small character-level GPT written with dtorch.nn, and its DP x TP layout.

The model is plain torch-style code: token and position embeddings, pre-norm
blocks of causal self-attention and an MLP, a final LayerNorm and a linear
head. `parallelize` lays it out on a 2-D ("dp", "tp") mesh the way torch's
ColwiseParallel / RowwiseParallel would: the q, k, v and fc1 weights
[out, in] are Shard(0) on "tp" (their biases too), the proj and fc2 weights
Shard(1) on "tp" (biases replicated), every other parameter replicated. The
batch is Shard(0) on "dp"; the gradient all-reduce over "dp" and the
partial-sum reductions of the row-wise layers follow from the sharding rules.
"""
import dataclasses
import math

import dtorch
import dtorch.nn as nn
import dtorch.nn.functional as F
from dtorch import Replicate, Shard


@dataclasses.dataclass
class GPTConfig:
    vocab_size: int
    block_size: int = 32     # context length
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.k = nn.Linear(cfg.d_model, cfg.d_model)
        self.v = nn.Linear(cfg.d_model, cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def heads(self, x):
        """[B, T, D] -> [B, H, T, D/H]."""
        B, T, D = x.shape
        return x.reshape(B, T, self.n_head, D // self.n_head).transpose(1, 2)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.drop(self.fc2(self.act(self.fc1(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.block_size, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        # GPT-2's initialisation: N(0, 0.02) weights, zero biases.
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets=None):
        """idx [B, T] int64 -> logits [B, T, V]; with targets, (logits, loss)."""
        B, T = idx.shape
        pos = dtorch.arange(T, device_mesh=idx.device_mesh)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))
        return logits, loss


# The tensor-parallel plan in torch's terms; `parallelize` applies it with
# placements. With dtorch's parallelize_module this becomes
#   parallelize_module(block, mesh["tp"], {name: ColwiseParallel() ...})
TP_PLAN = {
    "attn.q": "colwise", "attn.k": "colwise", "attn.v": "colwise", "attn.proj": "rowwise",
    "mlp.fc1": "colwise", "mlp.fc2": "rowwise",
}


def _place(module, name, placements, mesh):
    p = getattr(module, name)
    if p is not None:
        setattr(module, name, nn.Parameter(p.detach().redistribute(mesh, placements)))


def on_tp(mesh, placement):
    """`placement` on the mesh dim named "tp", Replicate() on the others."""
    return [placement if name == "tp" else Replicate() for name in mesh.mesh_dim_names]


def parallelize(model, mesh):
    """Puts every parameter on `mesh` (whose dims are named, one of them
    "tp"): replicated, except the layers of TP_PLAN, which are Shard(0)
    (colwise: weight and bias) or Shard(1) (rowwise: weight; bias
    replicated) on "tp". Returns the model."""
    for owner, name in [(m, n) for m in model.modules()
                        for n, _ in m.named_parameters(recurse=False)]:
        _place(owner, name, on_tp(mesh, Replicate()), mesh)
    for block in model.blocks:
        for path, style in TP_PLAN.items():
            lin = block.get_submodule(path)
            if style == "colwise":
                _place(lin, "weight", on_tp(mesh, Shard(0)), mesh)
                _place(lin, "bias", on_tp(mesh, Shard(0)), mesh)
            else:
                _place(lin, "weight", on_tp(mesh, Shard(1)), mesh)
    return model


def num_parameters(model):
    return sum(math.prod(p.shape) for p in model.parameters())
