"""Small models and the training loop the parallel-style tests share: an
MLP and a transformer-like block (embedding, layer norms, causal attention
through scaled_dot_product_attention, MLP, a head), each with a
tensor-parallel plan, trained for a few steps under a named layout."""
import numpy as np

import dtorch
from dtorch import Replicate, Shard, nn
from dtorch.distributed.fsdp import fully_shard
from dtorch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                SequenceParallel, loss_parallel,
                                                parallelize_module)

F = nn.functional
F64 = dtorch.float64


class MLP(nn.Module):
    def __init__(self, d_in=8, d_hidden=16, n_classes=8):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden, dtype=F64)
        self.fc2 = nn.Linear(d_hidden, n_classes, dtype=F64)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))

    blocks = ()
    tp_plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}

    def loss(self, batch):
        x, y = batch
        return F.cross_entropy(self(x), y)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim, dtype=F64)
        self.k = nn.Linear(dim, dim, dtype=F64)
        self.v = nn.Linear(dim, dim, dtype=F64)
        self.o = nn.Linear(dim, dim, dtype=F64)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads

        def heads(z):
            return z.reshape(b, t, self.heads, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)),
                                           heads(self.v(x)), is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, d))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, dtype=F64)
        self.fc2 = nn.Linear(hidden, dim, dtype=F64)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim, dtype=F64)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim, dtype=F64)
        self.mlp = FeedForward(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    """Token embedding, one pre-norm block, a final norm and a head."""

    def __init__(self, vocab=16, dim=16, heads=4, hidden=32):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim, dtype=F64)
        self.layers = nn.ModuleList([Block(dim, heads, hidden)])
        self.norm = nn.LayerNorm(dim, dtype=F64)
        self.head = nn.Linear(dim, vocab, dtype=F64)

    def forward(self, idx):
        x = self.tok(idx)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))

    @property
    def blocks(self):
        return tuple(self.layers)

    # Sequence parallel in the norm regions, tensor parallel elsewhere, and
    # a class-sharded head for loss parallelism.
    tp_plan = {
        "tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "layers.*.ln1": SequenceParallel(),
        "layers.*.attn.q": ColwiseParallel(),
        "layers.*.attn.k": ColwiseParallel(),
        "layers.*.attn.v": ColwiseParallel(),
        "layers.*.attn.o": RowwiseParallel(output_layouts=Shard(1)),
        "layers.*.ln2": SequenceParallel(),
        "layers.*.mlp.fc1": ColwiseParallel(),
        "layers.*.mlp.fc2": RowwiseParallel(output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "head": ColwiseParallel(use_local_output=False),
    }

    def loss(self, batch):
        idx, y = batch
        logits = self(idx)
        b, t, v = logits.shape
        with loss_parallel():
            return F.cross_entropy(logits.reshape(b * t, v), y.reshape(b * t))


# name -> (mesh shape, mesh dim names, data-parallel mesh dim or None,
#          tensor-parallel mesh dim or None, fully_shard)
LAYOUTS = {
    "1": ((1,), None, None, None, False),
    "dp4": ((4,), ("dp",), "dp", None, False),
    "tp4": ((4,), ("tp",), None, "tp", False),
    "dp2xtp2": ((2, 2), ("dp", "tp"), "dp", "tp", False),
    "fsdp4": ((4,), ("dp",), "dp", None, True),
    "fsdp2xtp2": ((2, 2), ("dp", "tp"), "dp", "tp", True),
}

_meshes = {}


def layout_mesh(name):
    shape, names, _, _, _ = LAYOUTS[name]
    key = (shape, names)
    if key not in _meshes:
        _meshes[key] = dtorch.init_device_mesh("cpu", shape, mesh_dim_names=names)
    return _meshes[key]


def build(model_cls, layout, seed=0):
    """The model on the layout's mesh, initialised from `seed` (random values
    depend on the seed and the element's position only, so every layout
    starts from the same weights), then parallelized."""
    mesh = layout_mesh(layout)
    _, _, dp, tp, fsdp = LAYOUTS[layout]
    dtorch.manual_seed(seed)
    with nn.default_device_mesh(mesh):
        model = model_cls()
    if tp is not None:
        parallelize_module(model, mesh[tp], model.tp_plan)
    if fsdp:
        for block in model.blocks:
            fully_shard(block, mesh=mesh[dp])
        fully_shard(model, mesh=mesh[dp])
    return model


def batches(model_cls, steps, seed=1):
    """One fixed batch per step (so that the loss visibly falls in a few
    steps)."""
    rng = np.random.default_rng(seed)
    if model_cls is MLP:
        batch = (rng.standard_normal((8, 8)), rng.integers(0, 8, size=8))
    else:
        batch = (rng.integers(0, 16, size=(4, 8)), rng.integers(0, 16, size=(4, 8)))
    return [batch] * steps


def place_batch(batch, layout):
    mesh = layout_mesh(layout)
    _, names, dp, _, _ = LAYOUTS[layout]
    placements = [Shard(0) if names is not None and n == dp else Replicate()
                  for n in (names or (None,) * mesh.ndim)]
    return tuple(dtorch.distribute_tensor(np.asarray(a), mesh, placements) for a in batch)


def make_optimizer(name, model, zero1_mesh=None):
    """SGD with momentum or AdamW; with `zero1_mesh`, wrapped in a
    ZeroRedundancyOptimizer sharding its state there (ZeRO-1)."""
    if name == "sgd":
        cls, kwargs = dtorch.optim.SGD, dict(lr=0.1, momentum=0.9)
    else:
        cls, kwargs = dtorch.optim.AdamW, dict(lr=0.01, weight_decay=0.01)
    if zero1_mesh is not None:
        from dtorch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(model.parameters(), cls, mesh=zero1_mesh, **kwargs)
    return cls(model.parameters(), **kwargs)


def train(model_cls, layout, opt_name, steps=5, zero1=False):
    """Trains and returns (losses, final parameters by name as numpy,
    compile counts after each step, the model, the optimizer); `zero1`
    shards the optimizer state on the layout's data-parallel mesh dim."""
    model = build(model_cls, layout)
    dp = LAYOUTS[layout][2]
    opt = make_optimizer(opt_name, model, layout_mesh(layout)[dp] if zero1 else None)
    losses, compiles = [], []
    for batch in batches(model_cls, steps):
        loss = model.loss(place_batch(batch, layout))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        compiles.append(dtorch._C.compile_count())
    params = {n: p.numpy() for n, p in model.named_parameters()}
    return losses, params, compiles, model, opt
