"""Training step time and KV-cached generation speed of dtorch next to torch,
in one run.

Training: the GPT of examples/gpt (a small config) and an MLP; the median
time of a step (forward + backward + AdamW step, the loss fetched) after
warm-up, on 1 rank (dtorch mesh (1,)) next to torch eager in one process,
and data parallel on 2 ranks (dtorch mesh (2,), batch Shard(0)) next to
torch DDP with the Gloo backend over 2 processes. Every side uses the same
BLAS/OpenMP thread count (--threads: DTORCH_BLAS_THREADS, OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS, MKL_NUM_THREADS and torch.set_num_threads).

Inference: tokens/s of greedy generation with the KV cache of
examples/gpt/generate.py on 1 rank, TP=2 and TP=4, next to torch eager with
the same cache logic and the same weights (the 1-rank GPT after its timed
training steps and --gen-train-steps more, saved as a model.npz); the
generated tokens must equal torch's.

    python3 bench/train_bench.py [--steps 10] [--threads 1]
    python3 bench/train_bench.py --gpt-step [--rounds 5] [--steps 20]

--gpt-step times only the GPT training step, with the same initial weights
(dtorch.manual_seed(0), saved once and loaded by both sides) and the same
batches on both sides: dtorch on 1 rank next to torch eager in one process,
dtorch DP=2 next to torch DDP (Gloo, 2 processes), each measurement in a
fresh process, all alternating in every round so that a busy host slows
them alike. Each dtorch setting runs twice (--loss-fetch both): with
the loss read by loss.item() at the end of its step, as torch does, and
with the loss asked for by item_async() and read one step later, so that
the client records step k+1 while the workers run step k (every loss is
still fetched and compared with torch's). It reports the ratio of step
times (best round and median of the per-round ratios), the CPU time per
step of every process of each side, the largest difference of their
losses, and the load average
(bench/results/gpt_step/: table.md, results.json, gpt_step.png).

torch runs in its own virtual environment (bench/setup_torch.sh makes it,
build/torch-venv) as a subprocess (bench/torch_peer.py); without it the
dtorch side still runs and the table says why the torch column is missing.
Each dtorch measurement runs in a fresh interpreter of its own (one dtorch
session per process). Writes bench/results/train_bench.json and
train_bench.png. Not run by the tests.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench_support import parse_args_or_run_job, write_table_and_json

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))


def _default_torch_python():
    """build/torch-venv's interpreter when bench/setup_torch.sh made it, else
    this interpreter (scripts/setup.sh installs torch beside dtorch)."""
    venv = os.path.join(ROOT, "build", "torch-venv", "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


DEFAULT_TORCH_PYTHON = _default_torch_python()


def set_threads(threads):
    """The same thread count for dtorch's workers (inherited environment),
    and for torch's processes."""
    for name in ("DTORCH_BLAS_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                 "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)


def start_session(ranks):
    import dtorch
    dtorch.init(world_size=ranks, num_processes=ranks if ranks <= 2 else 2)


def make_dtorch_mlp(cfg, mesh):
    """Linear + ReLU layers, replicated; the torch peer builds the same."""
    import dtorch.nn as nn
    dims = [cfg["d_in"]] + [cfg["hidden"]] * cfg["layers"] + [cfg["classes"]]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1], device_mesh=mesh))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def random_batch(kind, cfg, batch, rng, data=None):
    if kind == "gpt":
        T = cfg["block_size"]
        starts = rng.integers(0, len(data) - T - 1, size=batch)
        return (np.stack([data[s:s + T] for s in starts]),
                np.stack([data[s + 1:s + T + 1] for s in starts]))
    x = rng.standard_normal((batch, cfg["d_in"])).astype(np.float32)
    return x, rng.integers(0, cfg["classes"], size=batch)


def dtorch_train(kind, cfg, ranks, batch, warmup, steps, data=None, lr=1e-3, extra_steps=0):
    """Median seconds of a training step on a (ranks,) "dp" mesh (batch
    Shard(0), parameters replicated), and the model, trained `extra_steps`
    more (untimed) steps after the timed ones."""
    import dtorch
    import dtorch.nn.functional as F
    from dtorch import Shard
    from model import GPT, GPTConfig, parallelize
    start_session(ranks)
    mesh = dtorch.init_device_mesh("cpu", (ranks,), mesh_dim_names=("dp",))
    dtorch.manual_seed(0)
    if kind == "gpt":
        with dtorch.nn.default_device_mesh(mesh):
            model = parallelize(GPT(GPTConfig(**cfg)), mesh)
    else:
        model = make_dtorch_mlp(cfg, mesh)
    opt = dtorch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    rng = np.random.default_rng(0)
    times = []
    for i in range(warmup + steps + extra_steps):
        xb, yb = random_batch(kind, cfg, batch, rng, data)
        t = time.perf_counter()
        x = dtorch.tensor(xb, device_mesh=mesh, placements=[Shard(0)])
        y = dtorch.tensor(yb, device_mesh=mesh, placements=[Shard(0)])
        if kind == "gpt":
            _, loss = model(x, y)
        else:
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        if warmup <= i < warmup + steps:
            times.append(time.perf_counter() - t)
    return statistics.median(times), model


def dtorch_generate(model_path, tp, prompt_ids, tokens, warmup_tokens):
    """(token ids, tokens/s) of greedy KV-cached generation on a (tp,) "tp"
    mesh, timed after a warm-up generation that compiles the programs."""
    import dtorch
    from generate import generate, load_model
    start_session(tp)
    mesh = dtorch.init_device_mesh("cpu", (tp,), mesh_dim_names=("tp",))
    model, _, _ = load_model(model_path, mesh)
    generate(model, prompt_ids, warmup_tokens)
    t = time.perf_counter()
    ids = generate(model, prompt_ids, tokens)
    seconds = time.perf_counter() - t
    return ids, len(ids) / seconds


def _children_cpu_seconds():
    """User + system CPU seconds of this process's live children (the
    embedded cluster's workers), from /proc."""
    me, total = os.getpid(), 0
    tick = os.sysconf("SC_CLK_TCK")
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:      # ppid
            total += (int(fields[11]) + int(fields[12])) / tick   # utime, stime
    return total


def dtorch_gpt_step(job):
    """One --gpt-step measurement of dtorch in this (fresh) process: the GPT
    of job["weights"] on a (ranks,) "dp" mesh (batch Shard(0)), trained on
    the batches that torch_peer.gpt_step draws; wall seconds and loss of
    every step, CPU seconds per timed step of this process and its workers.

    job["loss_fetch"] says how each step's loss is read: "sync" waits for it
    at the end of the step (loss.item()), as torch eager does; "async" asks
    for it with item_async() and reads it one step later, so the client
    records step k+1 while the workers run step k. Every loss is fetched in
    both. A step's time runs from its start to the end of its iteration
    (which, in "async", reads the previous step's loss; the last one also
    waits for its own), so the times sum to the loop's wall time."""
    import dtorch
    from dtorch import Shard
    from generate import load_model
    start_session(job["ranks"])
    mesh = dtorch.init_device_mesh("cpu", (job["ranks"],), mesh_dim_names=("dp",))
    model, _, _ = load_model(job["weights"], mesh)
    model.train()
    opt = dtorch.optim.AdamW(model.parameters(), lr=job["lr"], weight_decay=0.01)
    data = np.load(job["data"])
    rng = np.random.default_rng(job["seed"])
    total = job["warmup"] + job["steps"]
    # Drawn up front (the same sequence as torch_peer draws), out of the timing.
    batches = [random_batch("gpt", job["cfg"], job["batch"], rng, data) for _ in range(total)]
    overlap = job.get("loss_fetch", "sync") == "async"
    times, losses, pending = [], [], None
    cpu = None
    for i, (xb, yb) in enumerate(batches):
        if i == job["warmup"]:
            cpu = time.process_time() + _children_cpu_seconds()
        t = time.perf_counter()
        x = dtorch.tensor(xb, device_mesh=mesh, placements=[Shard(0)])
        y = dtorch.tensor(yb, device_mesh=mesh, placements=[Shard(0)])
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if overlap:
            future = loss.item_async()   # cuts the step's segment; returns at once
            del loss
            if pending is not None:
                losses.append(pending.result())   # the previous step's loss
            pending = future
            if i == total - 1:
                losses.append(pending.result())
        else:
            losses.append(loss.item())
        if i >= job["warmup"]:
            times.append(time.perf_counter() - t)
    cpu = (time.process_time() + _children_cpu_seconds() - cpu) / job["steps"]
    assert len(losses) == total
    return {"step_s": times, "losses": losses, "cpu_s": cpu}


def save_initial_gpt(job):
    """The GPT's initial weights (dtorch.manual_seed(0)) as a model.npz."""
    import dtorch
    from model import GPT, GPTConfig
    from train import CharTokenizer, save_model
    start_session(1)
    mesh = dtorch.init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    dtorch.manual_seed(0)
    with dtorch.nn.default_device_mesh(mesh):
        model = GPT(GPTConfig(**job["cfg"]))
    save_model(job["save"], model, GPTConfig(**job["cfg"]), CharTokenizer(job["chars"]))
    return {"saved": job["save"]}


def run_job(job):
    """One dtorch measurement in this (fresh) process; returns its JSON."""
    set_threads(job["threads"])
    from train import CharTokenizer, load_corpus, save_model
    if job["what"] == "gpt_step":
        return dtorch_gpt_step(job)
    if job["what"] == "init_gpt":
        return save_initial_gpt(job)
    if job["what"] == "train":
        data = np.load(job["data"]) if job["kind"] == "gpt" else None
        seconds, model = dtorch_train(job["kind"], job["cfg"], job["ranks"], job["batch"],
                                      job["warmup"], job["steps"], data, lr=3e-3,
                                      extra_steps=job.get("extra_steps", 0))
        if job.get("save"):
            from model import GPTConfig
            save_model(job["save"], model, GPTConfig(**job["cfg"]),
                       CharTokenizer(job["chars"]))
        return {"seconds": seconds}
    ids, tps = dtorch_generate(job["model"], job["tp"], job["prompt_ids"], job["tokens"],
                               job["warmup_tokens"])
    return {"tokens": ids, "tokens_per_s": tps}


def run_dtorch(job, workdir, attempts=3):
    """Runs `job` in a fresh interpreter: one dtorch session per process,
    because shutting a session down and starting another in one process
    while tensors of the first are alive aborts (a glibc mutex assertion) or
    hangs now and then. A process that dies or runs past 300 s is retried,
    up to `attempts`; the retries are counted in the result."""
    path = os.path.join(workdir, "job.json")
    with open(path, "w") as f:
        json.dump(job, f)
    for attempt in range(attempts):
        try:
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--job", path],
                                  capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            print("  dtorch job ran past 300 s", flush=True)
            continue
        if proc.returncode == 0:
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            result["retries"] = attempt
            return result
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        print(f"  dtorch job failed (exit {proc.returncode}): {last}", flush=True)
    raise RuntimeError(f"dtorch job {job['what']} failed {attempts} times")


def run_torch(python, spec):
    """The torch peer's JSON, or (None, why it is missing)."""
    if not os.path.exists(python):
        return None, (f"no torch environment at {python}; run bench/setup_torch.sh "
                      "(a one-time download of about 3 GB)")
    check = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True)
    if check.returncode != 0:
        last = (check.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"torch does not import in {python}: {last}"
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    why = None
    try:
        # The peer is torch, not what is measured: a run that dies (Gloo's
        # teardown has aborted a DDP process now and then) is run again, as
        # run_dtorch does for its jobs, and the retries are reported.
        for attempt in range(TORCH_PEER_ATTEMPTS):
            proc = subprocess.run([python, os.path.join(HERE, "torch_peer.py"), f.name],
                                  capture_output=True, text=True)
            if proc.returncode == 0:
                out = json.loads(proc.stdout.strip().splitlines()[-1])
                out["retries"] = attempt
                return out, None
            why = f"the torch peer failed (exit {proc.returncode}): {_peer_error(proc.stderr)}"
            print(f"  {why}", flush=True)
    finally:
        os.unlink(f.name)
    return None, why


TORCH_PEER_ATTEMPTS = 3


def _peer_error(stderr):
    """The most telling line of a failed peer's stderr: a C++ exception's
    what() or the last Python error, else its last line."""
    lines = [l.strip() for l in stderr.strip().splitlines() if l.strip()] or ["?"]
    for key in ("what():", "terminate called", "Error:", "Exception:"):
        hits = [l for l in lines if key in l]
        if hits:
            return hits[0] if key in ("what():", "terminate called") else hits[-1]
    return lines[-1]


def ratio(a, b):
    return None if a is None or b is None else a / b


def fmt(x, spec="{:.2f}"):
    return "-" if x is None else spec.format(x)


def plot(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    rows = result["train"]
    labels = [f"{r['model']}\n" + ("1 rank" if r["ranks"] == 1 else f"DP={r['ranks']}")
              for r in rows]
    xs = np.arange(len(rows))
    ax1.bar(xs - 0.2, [r["dtorch_ms"] for r in rows], 0.4, label="dtorch")
    ax1.bar(xs + 0.2, [r["torch_ms"] or 0 for r in rows], 0.4,
            label="torch (eager / DDP gloo)")
    ax1.set_xticks(xs, labels)
    ax1.set_ylabel("training step (ms, median)")
    ax1.set_title("training step time (lower is better)")
    ax1.legend()
    inf = result["inference"]
    names = [r["setting"] for r in inf["dtorch"]] + ["torch eager"]
    values = [r["tokens_per_s"] for r in inf["dtorch"]] + [inf["torch_tokens_per_s"] or 0]
    ax2.bar(np.arange(len(names)), values, color=["C0"] * len(inf["dtorch"]) + ["C1"])
    ax2.set_xticks(np.arange(len(names)), names)
    ax2.set_ylabel("tokens/s")
    ax2.set_title("greedy generation with KV cache (higher is better)")
    if result["torch_missing"]:
        fig.suptitle("torch missing: " + result["torch_missing"][:100], fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- --gpt-step: the GPT training step side by side with torch -------------
# (setting, dtorch ranks, the torch peer's mode)
GPT_STEP_PAIRS = [("1 rank vs torch eager", 1, "eager"),
                  ("DP=2 vs torch DDP (Gloo, 2 processes)", 2, "ddp")]


def _summary(outs):
    """Per setting: each round's median step (ms), the best and the median of
    those, the least CPU ms per step, the losses of the first round."""
    medians = [statistics.median(o["step_s"]) * 1e3 for o in outs]
    return {"round_median_ms": medians, "best_ms": min(medians),
            "median_ms": statistics.median(medians),
            "cpu_ms": min(o["cpu_s"] for o in outs) * 1e3,
            "round_cpu_ms": [o["cpu_s"] * 1e3 for o in outs],
            "losses": outs[0]["losses"], "round_losses": [o["losses"] for o in outs],
            "load": [o["load"] for o in outs]}


def _max_loss_diff(d, t):
    """The largest difference between a loss of any dtorch round and torch's
    loss of the same step; every step's loss must be there on both sides."""
    worst = 0.0
    for losses in d["round_losses"]:
        if len(losses) != len(t["losses"]):
            raise RuntimeError(f"dtorch fetched {len(losses)} losses, torch "
                               f"{len(t['losses'])}")
        worst = max(worst, max(abs(a - b) for a, b in zip(losses, t["losses"])))
    return worst


def gpt_step_table(result):
    """The markdown table of a --gpt-step result."""
    lines = [
        f"GPT training step (forward, backward, AdamW step, loss fetched): "
        f"{result['config']}, batch {result['batch']}, {result['threads']} BLAS/OpenMP "
        f"thread(s) per process; median of {result['steps']} steps after "
        f"{result['warmup']} warm-up per round, {result['rounds']} interleaved rounds; "
        f"ratio = dtorch time / torch time (goal: at most {1 / 1.2:.2f}, i.e. 1.2x faster); "
        f"load average {result['load_min']:.1f}-{result['load_max']:.1f} on "
        f"{os.cpu_count()} CPUs.", "",
        "| setting | dtorch best ms | torch best ms | ratio (best) | ratio (median of "
        "rounds) | dtorch CPU ms | torch CPU ms | CPU ratio | max loss diff |",
        "|---|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        d, t = row["dtorch"], row["torch"]
        lines.append(
            f"| {row['setting']} | {d['best_ms']:.2f} | {fmt(t and t['best_ms'])} | "
            f"{fmt(row['ratio_best'])} | {fmt(row['ratio_round_median'])} | "
            f"{d['cpu_ms']:.2f} | {fmt(t and t['cpu_ms'])} | {fmt(row['cpu_ratio'])} | "
            f"{fmt(row['max_loss_diff'], '{:.1e}')} |")
    if result["torch_missing"]:
        lines += ["", f"torch column missing: {result['torch_missing']}"]
    lines += ["", "CPU ms: all processes of the side per step (dtorch: the client with "
              "its controller thread and the workers; DDP: both processes)."]
    if any(row.get("loss_fetch") == "async" for row in result["rows"]):
        lines += ["", "Rows \"loss read next step\": the loop asks for each step's loss "
                  "with item_async() and reads it after recording the next step, so the "
                  "client records step k+1 while the workers run step k; every loss is "
                  "still fetched and compared with torch's, and a step's time is its share "
                  "of the loop's wall time (the last loss's wait included). Other rows read "
                  "the loss with loss.item() at the end of its step, as torch does."]
    if result["load_max"] > (os.cpu_count() or 1):
        lines += ["", "The load average exceeded the CPU count: wall times then measure "
                  "each side's share of the scheduler as much as its work (dtorch runs a "
                  "client and worker processes, torch eager one process), so the CPU "
                  "ratio is the steadier comparison."]
    return "\n".join(lines) + "\n"


def plot_gpt_step(result, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    rows = result["rows"]
    xs = np.arange(len(rows))
    ax1.bar(xs - 0.2, [r["dtorch"]["best_ms"] for r in rows], 0.4, label="dtorch")
    ax1.bar(xs + 0.2, [r["torch"]["best_ms"] if r["torch"] else 0 for r in rows], 0.4,
            label="torch")
    ax1.set_xticks(xs, [r["setting"].replace(" vs ", "\nvs ") for r in rows], fontsize=8)
    ax1.set_ylabel("step ms (best round median)")
    ax1.set_title("GPT training step (lower is better)")
    ax1.legend()
    for i, r in enumerate(rows):
        if r["round_ratios"]:
            ax2.plot([i] * len(r["round_ratios"]), r["round_ratios"], "o", alpha=0.6)
    ax2.axhline(1.0, color="gray", lw=0.8)
    ax2.axhline(1 / 1.2, color="green", lw=0.8, ls="--", label="goal (1.2x faster)")
    ax2.set_xticks(xs, [r["setting"].split(" vs ")[0] for r in rows])
    ax2.set_ylabel("dtorch / torch step time, per round")
    ax2.set_title(f"ratio per interleaved round (load {result['load_min']:.0f}-"
                  f"{result['load_max']:.0f})")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def prepare_gpt_step(prefix, threads):
    """The GPT step's shared inputs, made once per bench run: the config,
    a temporary folder with the tokenized corpus (data.npy) and one set of
    initial weights (init.npz) that every side loads. Returns
    (cfg, workdir, data_path, weights_path)."""
    from train import CharTokenizer, load_corpus
    text = load_corpus(("json", "textwrap"))
    tok = CharTokenizer.from_text(text)
    cfg = dict(vocab_size=len(tok.chars), block_size=32, n_layer=2, n_head=4, d_model=64)
    workdir = tempfile.mkdtemp(prefix=prefix)
    data_path, weights = os.path.join(workdir, "data.npy"), os.path.join(workdir, "init.npz")
    np.save(data_path, tok.encode(text))
    run_dtorch({"what": "init_gpt", "cfg": cfg, "chars": tok.chars, "save": weights,
                "threads": threads}, workdir)
    return cfg, workdir, data_path, weights


def gpt_step_session(job):
    """The child side of the GPT-step benches: a 1-rank session, the GPT with
    the shared initial weights, AdamW, and a batch source drawing from the
    corpus with seed 0. Returns (dtorch, model, opt, next_batch); next_batch()
    gives a fresh (x, y) pair sharded on the mesh."""
    set_threads(job["threads"])
    import dtorch
    from dtorch import Shard
    from generate import load_model
    dtorch.init(world_size=1, num_processes=1)
    mesh = dtorch.init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
    model, _, _ = load_model(job["weights"], mesh)
    model.train()
    opt = dtorch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    data = np.load(job["data"])
    rng = np.random.default_rng(0)

    def next_batch():
        xb, yb = random_batch("gpt", job["cfg"], job["batch"], rng, data)
        return (dtorch.tensor(xb, device_mesh=mesh, placements=[Shard(0)]),
                dtorch.tensor(yb, device_mesh=mesh, placements=[Shard(0)]))
    return dtorch, model, opt, next_batch


def gpt_train_step(model, opt, next_batch):
    """One step of the GPT-step benches as a function: a fresh batch,
    forward, backward, AdamW step, zero_grad(set_to_none=True); it returns
    the loss read with loss.item()."""
    def step():
        x, y = next_batch()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()
    return step


def write_job(workdir, job):
    """Writes a child job's description to workdir/job.json; returns its path."""
    job_path = os.path.join(workdir, "job.json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    return job_path


def gpt_step_job(prefix, threads, **fields):
    """The driver side of the GPT-step benches: sets this process's threads,
    prepares the step's inputs (prepare_gpt_step) and writes a child job
    naming them, with `fields` and `threads`. Returns (cfg, workdir, job,
    job_path)."""
    set_threads(threads)
    cfg, workdir, data_path, weights = prepare_gpt_step(prefix, threads)
    job = {"cfg": cfg, "data": data_path, "weights": weights, **fields, "threads": threads}
    return cfg, workdir, job, write_job(workdir, job)


def compare_variants(specs):
    """--compare ENV=VALUE[,...] specs as (name, environment) pairs."""
    return [(spec, dict(kv.split("=", 1) for kv in spec.split(","))) for spec in specs]


def gpt_step_bench(args):
    """The same GPT (config, initial weights, batches) trained through dtorch
    and torch in interleaved rounds; writes table.md, results.json and
    gpt_step.png to args.out/gpt_step."""
    cfg, workdir, data_path, weights = prepare_gpt_step("gpt_step_", args.threads)
    base = {"cfg": cfg, "data": data_path, "weights": weights, "seed": 0,
            "batch": args.gpt_batch, "warmup": args.warmup, "steps": args.steps,
            "lr": 3e-3, "threads": args.threads}
    fetches = ("sync", "async") if args.loss_fetch == "both" else (args.loss_fetch,)
    sides = [("dtorch", f) for f in fetches] + [("torch", None)]
    outs = {(side, fetch, ranks): [] for _, ranks, _ in GPT_STEP_PAIRS
            for side, fetch in sides}
    missing, version = None, None
    for r in range(args.rounds):
        for setting, ranks, mode in GPT_STEP_PAIRS:
            for side, fetch in sides:
                if side == "torch" and missing:
                    continue
                print(f"round {r + 1}/{args.rounds}: {side}{f' ({fetch} loss)' if fetch else ''}"
                      f", {setting.split(' vs ')[0]} ...", flush=True)
                load = os.getloadavg()[0]
                if side == "dtorch":
                    out = run_dtorch(dict(base, what="gpt_step", ranks=ranks, loss_fetch=fetch),
                                     workdir)
                else:
                    out, missing = run_torch(args.torch_python, {"gpt_step": dict(
                        base, mode=mode, world=ranks)})
                    if out is None:
                        continue
                    version = out["torch_version"]
                out["load"] = load
                outs[(side, fetch, ranks)].append(out)
    loads = [o["load"] for v in outs.values() for o in v]
    rows = []
    for setting, ranks, fetch in [(s, n, f) for s, n, _ in GPT_STEP_PAIRS for f in fetches]:
        d = _summary(outs[("dtorch", fetch, ranks)])
        t = (_summary(outs[("torch", None, ranks)]) if outs[("torch", None, ranks)]
             else None)
        ratios = ([a / b for a, b in zip(d["round_median_ms"], t["round_median_ms"])]
                  if t else [])
        label = setting if fetch == "sync" else setting.replace(
            " vs ", ", loss read next step (item_async) vs ", 1)
        rows.append({
            "setting": label, "ranks": ranks, "loss_fetch": fetch, "dtorch": d, "torch": t,
            "ratio_best": ratio(d["best_ms"], t and t["best_ms"]),
            "ratio_round_median": statistics.median(ratios) if ratios else None,
            "round_ratios": ratios, "cpu_ratio": ratio(d["cpu_ms"], t and t["cpu_ms"]),
            "max_loss_diff": _max_loss_diff(d, t) if t else None})
    result = {"config": cfg, "batch": args.gpt_batch, "threads": args.threads,
              "steps": args.steps, "warmup": args.warmup, "rounds": args.rounds,
              "torch_version": version, "torch_missing": missing,
              "torch_peer_retries": sum(o.get("retries", 0) for (side, _, _), v in outs.items()
                                        if side == "torch" for o in v),
              "load_min": min(loads), "load_max": max(loads),
              "time": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": rows}
    table = gpt_step_table(result)
    print("\n" + table)
    out_dir = os.path.join(args.out, "gpt_step")
    write_table_and_json(out_dir, table, result)
    plot_gpt_step(result, os.path.join(out_dir, "gpt_step.png"))
    print(f"wrote {out_dir}/table.md, results.json and gpt_step.png")
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10, help="timed steps (median)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP threads per process")
    ap.add_argument("--gpt-batch", type=int, default=16)
    ap.add_argument("--mlp-batch", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=40, help="generated tokens (timed)")
    ap.add_argument("--prompt", default="def ")
    ap.add_argument("--gen-train-steps", type=int, default=200,
                    help="untimed training steps of the 1-rank GPT after its timed ones, "
                    "so that greedy generation is not one repeated character")
    ap.add_argument("--torch-python", default=DEFAULT_TORCH_PYTHON)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--gpt-step", action="store_true",
                    help="only the GPT training step, dtorch next to torch with the same "
                    "weights and batches, in --rounds interleaved rounds (bench/results/"
                    "gpt_step/: table.md, results.json, gpt_step.png)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of --gpt-step")
    ap.add_argument("--loss-fetch", choices=("sync", "async", "both"), default="both",
                    help="--gpt-step: dtorch reads each loss at the end of its step "
                    "(sync, loss.item()), one step later (async, item_async(): the client "
                    "records the next step while the workers run this one), or both, as "
                    "rows of their own next to the same torch runs")
    # --job (internal): one dtorch measurement.
    args = parse_args_or_run_job(ap, argv, run_job)
    if args is None:
        return None
    set_threads(args.threads)
    if args.gpt_step:
        return gpt_step_bench(args)

    from train import CharTokenizer, load_corpus
    text = load_corpus(("json", "textwrap"))
    tok = CharTokenizer.from_text(text)
    data = tok.encode(text)
    cfgs = {"gpt": dict(vocab_size=len(tok.chars), block_size=32, n_layer=2, n_head=4,
                        d_model=64),
            "mlp": dict(d_in=64, hidden=256, layers=2, classes=10)}
    batch = {"gpt": args.gpt_batch, "mlp": args.mlp_batch}
    workdir = tempfile.mkdtemp(prefix="train_bench_")
    model_path = os.path.join(workdir, "model.npz")
    data_path = os.path.join(workdir, "data.npy")
    np.save(data_path, data)

    dt = {}
    retries = 0
    for kind in ("gpt", "mlp"):
        for ranks in (1, 2):
            print(f"dtorch: {kind} on {ranks} rank(s) ...", flush=True)
            job = {"what": "train", "kind": kind, "cfg": cfgs[kind], "ranks": ranks,
                   "batch": batch[kind], "warmup": args.warmup, "steps": args.steps,
                   "threads": args.threads}
            if kind == "gpt":
                job["data"] = data_path
                if ranks == 1:
                    job.update(save=model_path, chars=tok.chars,
                               extra_steps=args.gen_train_steps)
            r = run_dtorch(job, workdir)
            dt[(kind, ranks)] = r["seconds"]
            retries += r["retries"]
    prompt_ids = [int(i) for i in tok.encode(args.prompt)]
    warmup_tokens = 4
    gen = []
    for tp in (1, 2, 4):
        print(f"dtorch: generation on TP={tp} ...", flush=True)
        r = run_dtorch({"what": "generate", "model": model_path, "tp": tp,
                        "prompt_ids": prompt_ids, "tokens": args.tokens,
                        "warmup_tokens": warmup_tokens, "threads": args.threads}, workdir)
        retries += r["retries"]
        gen.append({"setting": "1 rank" if tp == 1 else f"TP={tp}", "tp": tp,
                    "tokens_per_s": r["tokens_per_s"], "tokens": r["tokens"]})

    print("torch: eager, DDP (Gloo) and generation ...", flush=True)
    spec = {"models": ["gpt", "mlp"], "gpt": cfgs["gpt"], "mlp": cfgs["mlp"], "batch": batch,
            "warmup": args.warmup, "steps": args.steps, "threads": args.threads,
            "inference": {"model": model_path, "prompt_ids": prompt_ids,
                          "tokens": args.tokens, "warmup_tokens": warmup_tokens}}
    peer, missing = run_torch(args.torch_python, spec)

    train_rows = []
    for kind in ("gpt", "mlp"):
        for ranks, setting, key in ((1, "1 rank vs eager", "eager_1proc_s"),
                                    (2, "DP=2 vs DDP gloo", "ddp_gloo_2proc_s")):
            t_torch = peer["train"][kind][key] if peer else None
            train_rows.append({"model": kind, "setting": setting, "ranks": ranks,
                               "batch": batch[kind], "dtorch_ms": dt[(kind, ranks)] * 1e3,
                               "torch_ms": None if t_torch is None else t_torch * 1e3,
                               "ratio": ratio(dt[(kind, ranks)], t_torch)})
    torch_tokens = peer["inference"]["tokens"] if peer else None
    torch_tps = peer["inference"]["tokens_per_s"] if peer else None
    for row in gen:
        row["ratio"] = ratio(torch_tps, row["tokens_per_s"])   # dtorch time / torch time
        row["tokens_equal_torch"] = None if torch_tokens is None else row["tokens"] == torch_tokens
    result = {
        "threads": args.threads, "steps": args.steps, "warmup": args.warmup,
        "configs": cfgs, "torch_version": peer["torch_version"] if peer else None,
        "torch_missing": missing, "dtorch_job_retries": retries, "train": train_rows,
        "inference": {"prompt": args.prompt, "tokens": args.tokens,
                      "weights": f"the 1-rank GPT after {args.warmup + args.steps} + "
                                 f"{args.gen_train_steps} AdamW steps on the corpus",
                      "dtorch_text": args.prompt + tok.decode(gen[0]["tokens"]), "dtorch": gen,
                      "torch_tokens_per_s": torch_tps, "torch_tokens": torch_tokens},
    }

    print(f"\ntraining step, median of {args.steps} after {args.warmup} warm-up, "
          f"{args.threads} BLAS thread(s) per process; ratio = dtorch time / torch time")
    print(f"{'model':5} {'setting':18} {'batch':>5} {'dtorch ms':>10} {'torch ms':>10} "
          f"{'ratio':>7}")
    for r in train_rows:
        print(f"{r['model']:5} {r['setting']:18} {r['batch']:5d} {r['dtorch_ms']:10.2f} "
              f"{fmt(r['torch_ms']):>10} {fmt(r['ratio']):>7}")
    print(f"\ngreedy generation, {args.tokens} tokens after the prompt {args.prompt!r}, "
          f"KV cache; torch eager: {fmt(torch_tps, '{:.1f}')} tokens/s")
    print(f"{'dtorch':8} {'tokens/s':>9} {'ratio':>7}  tokens equal torch's")
    for r in gen:
        eq = "-" if r["tokens_equal_torch"] is None else ("yes" if r["tokens_equal_torch"]
                                                          else "NO")
        print(f"{r['setting']:8} {r['tokens_per_s']:9.1f} {fmt(r['ratio']):>7}  {eq}")
    print(f"dtorch 1 rank: {args.prompt + tok.decode(gen[0]['tokens'])!r}")
    if torch_tokens is not None:
        print(f"torch eager:   {args.prompt + tok.decode(torch_tokens)!r}")
    if missing:
        print(f"\nTORCH COLUMN MISSING: {missing}")

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "train_bench.json"), "w") as f:
        json.dump(result, f, indent=1)
    plot(result, os.path.join(args.out, "train_bench.png"))
    print(f"wrote {os.path.join(args.out, 'train_bench.json')} and train_bench.png")
    return result


if __name__ == "__main__":
    main()
