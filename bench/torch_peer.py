"""The torch side of bench/train_bench.py, run in the torch virtual
environment (bench/setup_torch.sh) as a subprocess; prints one JSON object.

    build/torch-venv/bin/python bench/torch_peer.py SPEC.json

SPEC.json (written by train_bench.py) names the models, sizes, thread count,
whether to time DDP too ("ddp", default true)
and the model.npz for the inference check; or, under "gpt_step", one
measurement of train_bench.py --gpt-step (the GPT's weights as a model.npz,
the corpus, the batch seed, eager or DDP). The models mirror
examples/gpt/model.py and the MLP of train_bench.py module for module, so a
dtorch state dict loads into them by name.
"""
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.n_head = cfg["n_head"]
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))

    def heads(self, x):
        B, T, D = x.shape
        return x.reshape(B, T, self.n_head, D // self.n_head).transpose(1, 2)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, D))


class MLPBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(cfg.get("dropout", 0.0))

    def forward(self, x):
        return self.drop(self.fc2(self.act(self.fc1(x))))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg["d_model"])
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg["d_model"])
        self.mlp = MLPBlock(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.pos_emb = nn.Embedding(cfg["block_size"], cfg["d_model"])
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])])
        self.ln_f = nn.LayerNorm(cfg["d_model"])
        self.head = nn.Linear(cfg["d_model"], cfg["vocab_size"], bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(B * T))


class MLP(nn.Module):
    """The same layers as train_bench.make_dtorch_mlp."""

    def __init__(self, cfg):
        super().__init__()
        dims = [cfg["d_in"]] + [cfg["hidden"]] * cfg["layers"] + [cfg["classes"]]
        self.net = nn.Sequential(*[m for i in range(len(dims) - 1) for m in
                                   ([nn.Linear(dims[i], dims[i + 1])] +
                                    ([nn.ReLU()] if i < len(dims) - 2 else []))])

    def forward(self, x, y):
        return F.cross_entropy(self.net(x), y)


def make_model(kind, cfg):
    return GPT(cfg) if kind == "gpt" else MLP(cfg)


def make_batch(kind, cfg, batch, rng):
    """Random inputs and targets of the model's shapes."""
    if kind == "gpt":
        x = rng.integers(0, cfg["vocab_size"], size=(batch, cfg["block_size"]))
        y = rng.integers(0, cfg["vocab_size"], size=(batch, cfg["block_size"]))
        return torch.from_numpy(x), torch.from_numpy(y)
    x = rng.standard_normal((batch, cfg["d_in"])).astype(np.float32)
    y = rng.integers(0, cfg["classes"], size=batch)
    return torch.from_numpy(x), torch.from_numpy(y)


def time_steps(model, kind, cfg, batch, warmup, steps, seed, cpu=None):
    """Median wall seconds of forward + backward + AdamW step; with a list
    `cpu`, the process's CPU seconds per step are appended to it."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    rng = np.random.default_rng(seed)
    times = []
    for i in range(warmup + steps):
        if i == warmup:
            cpu_start = time.process_time()
        x, y = make_batch(kind, cfg, batch, rng)
        t = time.perf_counter()
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    if cpu is not None:
        cpu.append((time.process_time() - cpu_start) / steps)
    return statistics.median(times)


def eager_train(spec, kind, cpu=None):
    torch.manual_seed(0)
    model = make_model(kind, spec[kind])
    return time_steps(model, kind, spec[kind], spec["batch"][kind], spec["warmup"],
                      spec["steps"], 0, cpu)


def _leave_group():
    """Tears the process group down only once every rank is past its last
    collective: a rank that closed its Gloo pairs while a peer was still
    finishing one could abort the peer (seen once in CI as SIGABRT)."""
    dist.barrier()
    dist.destroy_process_group()


def _ddp_worker(rank, world, init_file, spec, kind, out_path):
    torch.set_num_threads(spec["threads"])
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(make_model(kind, spec[kind]))
    batch = spec["batch"][kind] // world
    t = time_steps(model, kind, spec[kind], batch, spec["warmup"], spec["steps"], rank)
    times = [None] * world
    dist.all_gather_object(times, t)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(max(times), f)
    _leave_group()


def ddp_train(spec, kind, world=2, attempts=3):
    """Median step time of the slowest of `world` DDP processes (Gloo). A
    run whose process dies is retried, up to `attempts` (one of our runs
    lost a DDP process to SIGABRT once; the cause was not found)."""
    for attempt in range(attempts):
        with tempfile.TemporaryDirectory() as tmp:
            init_file, out_path = os.path.join(tmp, "init"), os.path.join(tmp, "out.json")
            try:
                mp.spawn(_ddp_worker, args=(world, init_file, spec, kind, out_path),
                         nprocs=world, join=True)
            except mp.ProcessExitedException as e:
                print(f"DDP attempt {attempt + 1} failed: {e}", file=sys.stderr)
                if attempt == attempts - 1:
                    raise
                continue
            with open(out_path) as f:
                return json.load(f)


class KVCache:
    """Per layer keys and values [B, H, max_len, D/H], written at `pos`."""

    def __init__(self, cfg, batch, max_len):
        self.max_len = max_len
        shape = (batch, cfg["n_head"], max_len, cfg["d_model"] // cfg["n_head"])
        self.keys = [torch.zeros(shape) for _ in range(cfg["n_layer"])]
        self.values = [torch.zeros(shape) for _ in range(cfg["n_layer"])]
        self.key_axis = torch.arange(max_len).reshape(1, 1, 1, max_len)


def decode_step(model, cache, tok, pos):
    """Logits [B, V] of the token after `tok` [B, 1] at position `pos`."""
    B = tok.shape[0]
    D = model.cfg["d_model"]
    x = model.tok_emb(tok) + model.pos_emb(torch.tensor([pos])).reshape(1, 1, D)
    visible = cache.key_axis <= pos
    for i, block in enumerate(model.blocks):
        attn = block.attn
        h = block.ln1(x)
        q, k, v = attn.heads(attn.q(h)), attn.heads(attn.k(h)), attn.heads(attn.v(h))
        cache.keys[i][:, :, pos:pos + 1] = k
        cache.values[i][:, :, pos:pos + 1] = v
        y = F.scaled_dot_product_attention(q, cache.keys[i], cache.values[i],
                                           attn_mask=visible)
        x = x + attn.proj(y.transpose(1, 2).reshape(B, 1, D))
        x = x + block.mlp(block.ln2(x))
    return model.head(model.ln_f(x)).reshape(B, -1)


@torch.no_grad()
def generate(model, prompt_ids, max_new_tokens):
    """Greedy continuation of `prompt_ids`, fed one token per step through the
    cache as examples/gpt/generate.py does (also when the cache is full: the
    last half of the context is fed again from position 0)."""
    cache = KVCache(model.cfg, 1, model.cfg["block_size"])
    history, out, pending = list(prompt_ids), [], list(prompt_ids)
    pos = 0
    while len(out) < max_new_tokens:
        if pos == cache.max_len:
            pos = 0
            pending = history[-(cache.max_len // 2):]
        logits = decode_step(model, cache, torch.tensor([[pending.pop(0)]]), pos)
        pos += 1
        nxt = int(logits.argmax(-1).item())
        if not pending:
            out.append(nxt)
            history.append(nxt)
            pending = [nxt]
    return out


def inference(spec):
    inf = spec["inference"]
    with np.load(inf["model"]) as f:
        meta = json.loads(str(f["__meta__"]))
        state = {k: torch.from_numpy(f[k]) for k in f.files if k != "__meta__"}
    model = GPT(meta["config"])
    model.load_state_dict(state)
    model.eval()
    generate(model, inf["prompt_ids"], inf["warmup_tokens"])
    t = time.perf_counter()
    ids = generate(model, inf["prompt_ids"], inf["tokens"])
    seconds = time.perf_counter() - t
    return {"tokens": ids, "seconds": seconds, "tokens_per_s": len(ids) / seconds}


def _load_gpt(weights):
    """The GPT of `weights` (a model.npz written by train.save_model)."""
    with np.load(weights) as f:
        meta = json.loads(str(f["__meta__"]))
        state = {k: torch.from_numpy(f[k]) for k in f.files if k != "__meta__"}
    model = GPT(meta["config"])
    model.load_state_dict(state)
    return model


def _gpt_step_times(model, job, rank=0, world=1):
    """Wall seconds and losses of each step (forward, backward, AdamW step,
    loss fetched) on the batches of train_bench.random_batch drawn from
    job["data"] with job["seed"] (this rank's rows of the global batch), and
    CPU seconds of this process per timed step."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from train_bench import random_batch
    data = np.load(job["data"])
    cfg = job["cfg"]
    opt = torch.optim.AdamW(model.parameters(), lr=job["lr"], weight_decay=0.01)
    rng = np.random.default_rng(job["seed"])
    rows = job["batch"] // world
    times, losses = [], []
    for i in range(job["warmup"] + job["steps"]):
        if i == job["warmup"]:
            cpu = time.process_time()
        xb, yb = random_batch("gpt", cfg, job["batch"], rng, data)
        t = time.perf_counter()
        x = torch.from_numpy(xb[rank * rows:(rank + 1) * rows])
        y = torch.from_numpy(yb[rank * rows:(rank + 1) * rows])
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if i >= job["warmup"]:
            times.append(time.perf_counter() - t)
    return times, losses, (time.process_time() - cpu) / job["steps"]


def _profile_ops(model, job):
    """Self CPU microseconds and calls per step of every aten op (and the
    optimizer's step) over job["steps"] steps under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _gpt_step_times(model, job)
    n = job["steps"]
    return {e.key: {"calls": e.count / n, "us": e.self_cpu_time_total / n}
            for e in prof.key_averages() if e.self_cpu_time_total > 0}


def _gpt_step_ddp_worker(rank, world, init_file, job, out_path):
    torch.set_num_threads(job["threads"])
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    model = nn.parallel.DistributedDataParallel(_load_gpt(job["weights"]))
    times, losses, cpu = _gpt_step_times(model, job, rank, world)
    # Each step's loss over the global batch (equal rows per rank), the
    # slowest rank's time per step, every rank's CPU.
    loss_sum = torch.tensor(losses, dtype=torch.float64)
    dist.all_reduce(loss_sum)
    gathered = [None] * world
    dist.all_gather_object(gathered, (times, cpu))
    if rank == 0:
        step_times = [max(t[i] for t, _ in gathered) for i in range(len(times))]
        with open(out_path, "w") as f:
            json.dump({"step_s": step_times, "losses": (loss_sum / world).tolist(),
                       "cpu_s": sum(c for _, c in gathered)}, f)
    _leave_group()


def gpt_step(job):
    """The GPT training step of train_bench.py --gpt-step in torch: eager in
    this process (job["mode"] == "eager") or DDP with Gloo over
    job["world"] processes."""
    torch.set_num_threads(job["threads"])
    if job["mode"] == "eager":
        model = _load_gpt(job["weights"])
        times, losses, cpu = _gpt_step_times(model, job)
        out = {"step_s": times, "losses": losses, "cpu_s": cpu,
               "threads": torch.get_num_threads(), "torch_version": torch.__version__}
        if job.get("profile_steps"):
            out["ops"] = _profile_ops(model, dict(job, warmup=0, steps=job["profile_steps"]))
        return out
    with tempfile.TemporaryDirectory() as tmp:
        init_file, out_path = os.path.join(tmp, "init"), os.path.join(tmp, "out.json")
        mp.spawn(_gpt_step_ddp_worker, args=(job["world"], init_file, job, out_path),
                 nprocs=job["world"], join=True)
        with open(out_path) as f:
            out = json.load(f)
    out.update(threads=job["threads"], torch_version=torch.__version__)
    return out


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    if "gpt_step" in spec:
        print(json.dumps(gpt_step(spec["gpt_step"])))
        return
    torch.set_num_threads(spec["threads"])
    result = {"torch_version": torch.__version__, "threads": torch.get_num_threads(),
              "train": {}}
    for kind in spec["models"]:
        cpu = []
        result["train"][kind] = {"eager_1proc_s": eager_train(spec, kind, cpu),
                                 "eager_1proc_cpu_s": cpu[0]}
        if spec.get("ddp", True):
            result["train"][kind]["ddp_gloo_2proc_s"] = ddp_train(spec, kind)
    if spec.get("inference"):
        result["inference"] = inference(spec)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
