"""The torch side of the GPT parity checks: bench/torch_peer.py's GPT (the
torch twin of examples/gpt/model.py) with given initial weights, trained on
given batches with torch.optim.AdamW under a LambdaLR cosine-with-warmup
schedule, single process.

scripts/setup.sh installs torch where the CUDA toolkit is on the loader
path. `run` uses it in this interpreter when it imports, else runs this file
as a script under the interpreter of $DTORCH_TORCH_PYTHON or build/torch-venv
(bench/setup_torch.sh), passing arrays through .npz files; `unavailable()`
says why neither works.

    TORCH_PYTHON torch_gpt.py SPEC.npz OUT.npz
"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _torch_here():
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def torch_python():
    """An interpreter with torch other than this one, or None."""
    path = os.environ.get("DTORCH_TORCH_PYTHON") or os.path.join(ROOT, "build", "torch-venv",
                                                                 "bin", "python")
    return path if os.path.exists(path) else None


def unavailable():
    """None when `run` can use torch, else the reason it cannot."""
    if _torch_here() or torch_python() is not None:
        return None
    return ("torch is not importable here and there is no build/torch-venv "
            "(bash bench/setup_torch.sh makes it; or set DTORCH_TORCH_PYTHON)")


def _factor(step, warmup, total):
    if step < warmup:
        return step / max(1, warmup)
    progress = min((step - warmup) / max(1, total - warmup), 1.0)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def train_in_torch(init, batches, cfg, hp, dtype="float32"):
    """(losses, final parameters) of the torch run. `cfg` a dict of the GPT
    sizes, `hp` of lr, warmup, betas, weight_decay."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from torch_peer import GPT
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    model = GPT(dict(cfg)).to(dt)
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)).to(dt) for k, v in init.items()})
    opt = torch.optim.AdamW(model.parameters(), lr=hp["lr"], betas=tuple(hp["betas"]),
                            weight_decay=hp["weight_decay"])
    total, warmup = len(batches), hp["warmup"]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _factor(s, warmup, total))
    losses = []
    for idx, targets in batches:
        loss = model(torch.from_numpy(idx), torch.from_numpy(targets))
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    params = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return losses, params


def run(init, batches, cfg, hp, dtypes=("float32",)):
    """{dtype: `train_in_torch`(..., dtype)} for each of `dtypes` (names),
    here or in one run of the torch interpreter."""
    if _torch_here():
        return {d: train_in_torch(init, batches, cfg, hp, d) for d in dtypes}
    python = torch_python()
    if python is None:
        raise RuntimeError(unavailable())
    with tempfile.TemporaryDirectory() as tmp:
        spec, out = os.path.join(tmp, "spec.npz"), os.path.join(tmp, "out.npz")
        arrays = {"init/" + k: v for k, v in init.items()}
        for i, (idx, targets) in enumerate(batches):
            arrays[f"idx/{i}"], arrays[f"targets/{i}"] = idx, targets
        meta = json.dumps({"cfg": dict(cfg), "hp": dict(hp), "dtypes": list(dtypes),
                           "steps": len(batches)})
        np.savez(spec, __meta__=np.array(meta), **arrays)
        subprocess.run([python, os.path.abspath(__file__), spec, out], check=True,
                       timeout=600)
        results = {}
        with np.load(out) as f:
            for d in dtypes:
                losses = [float(x) for x in f[f"{d}/losses"]]
                prefix = f"{d}/param/"
                results[d] = (losses, {k[len(prefix):]: f[k] for k in f.files
                                       if k.startswith(prefix)})
    return results


_parity = {}


def parity_runs():
    """{"float32": (losses, params), "float64": ...}: torch on the problem
    of reference_gpt.PARITY (computed once per process)."""
    if not _parity:
        import dataclasses

        import reference_gpt as ref
        init, batches = ref.parity_problem(np.float64)
        hp = {k: ref.PARITY[k] for k in ("lr", "warmup", "betas", "weight_decay")}
        _parity.update(run(init, batches, dataclasses.asdict(ref.PARITY["cfg"]), hp,
                           ("float32", "float64")))
    return _parity


def main(spec, out):
    with np.load(spec) as f:
        meta = json.loads(str(f["__meta__"]))
        init = {k[len("init/"):]: f[k] for k in f.files if k.startswith("init/")}
        batches = [(f[f"idx/{i}"], f[f"targets/{i}"]) for i in range(meta["steps"])]
    arrays = {}
    for d in meta["dtypes"]:
        losses, params = train_in_torch(init, batches, meta["cfg"], meta["hp"], d)
        arrays[f"{d}/losses"] = np.array(losses)
        arrays.update({f"{d}/param/{k}": v for k, v in params.items()})
    np.savez(out, **arrays)


if __name__ == "__main__":
    main(*sys.argv[1:3])
