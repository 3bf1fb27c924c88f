"""The GPT step's reshapes and arena with and without reshape views
(--rank-plan-buffers=views, DTORCH_PLAN_VIEWS): the 1-rank GPT step of
bench/train_bench.py is recorded once, its segment's rank IR (dtorch.last_ir,
the module --rank-plan-buffers plans) goes through dtorch-opt twice, and
each reshape of the planned program is classified:

- view: placed at its source's offset (it copies nothing);
- of storage: its source keeps storage of its own (an argument or a
  returned value): the executor binds it as a view of that source;
- into a result: the reshape's output is returned: a view when its
  source keeps storage of its own (result views, or an argument), else a
  copy out of the arena;
- copies: source and output in different arena slots.

It prints the arena bytes (the rank's peak temporary bytes) of each
function and the counts, both ways:

    python3 bench/plan_views_report.py [--batch 16]

Not run by the tests (bench/results/gpt_step_vs_torch.md quotes it).
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "gpt"))
sys.path.insert(0, HERE)

from bench_support import parse_args_or_run_job, run_json  # noqa: E402
from train_bench import gpt_step_job, gpt_step_session  # noqa: E402

OFFSET = re.compile(r"rank\.arena_offset = (-?\d+) : i64")
KERNEL = re.compile(r"^\s*(%[\w#:]+) = rank\.kernel \"(\w+)\"\(([^)]*)\)")
RESULT = re.compile(r"^\s*(%[\w]+)(?::\d+)? = ")


def dtorch_opt():
    return os.path.join(ROOT, "build", "bin", "dtorch-opt")


def plan(rank_ir, views):
    r = subprocess.run([dtorch_opt(), "-",
                        f"--rank-plan-buffers=report=true views={str(views).lower()} "
                        f"result-views={str(views).lower()}"],
                       input=rank_ir, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-4000:])
    return r.stdout, r.stderr


def analyse(planned):
    """Classifies each reshape after the whole function is read (a result
    is only known to be returned at the end)."""
    funcs = []
    cur = None
    for line in planned.splitlines():
        s = line.strip()
        if s.startswith("func.func"):
            cur = {"offset": {}, "returned": set(), "reshapes": []}
            funcs.append(cur)
            continue
        if cur is None:
            continue
        if s.startswith("return"):
            cur["returned"].update(re.findall(r"%[\w#]+", s))
            continue
        m = RESULT.match(line)
        if m:
            o = OFFSET.search(line)
            cur["offset"][m.group(1)] = int(o.group(1)) if o else None
        k = KERNEL.match(line)
        if k and k.group(2) == "reshape":
            cur["reshapes"].append((k.group(1), k.group(3).strip()))
    rows = []
    for f in funcs:
        counts = {"reshapes": len(f["reshapes"]), "view": 0, "of storage": 0,
                  "into a result (view)": 0, "into a result (copies)": 0, "copies": 0}
        for out, src in f["reshapes"]:
            if out in f["returned"]:
                own = src.startswith("%arg") or f["offset"].get(src) is None
                counts["into a result (view)" if own else "into a result (copies)"] += 1
            elif src.startswith("%arg") or f["offset"].get(src) is None:
                counts["of storage"] += 1
            elif f["offset"].get(src) == f["offset"].get(out):
                counts["view"] += 1
            else:
                counts["copies"] += 1
        rows.append(counts)
    return rows


def job_main(job):
    dtorch, model, opt, next_batch = gpt_step_session(job)
    x, y = next_batch()
    _, loss = model(x, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    loss.item()
    return {"rank_ir": dtorch.last_ir("rank")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=16)
    args = parse_args_or_run_job(ap, argv, job_main)
    if args is None:
        return
    cfg, workdir, job, job_path = gpt_step_job("plan_views_", 1, batch=args.batch)
    out = run_json([sys.executable, os.path.abspath(__file__), "--job", job_path], timeout=600)
    if "error" in out:
        raise SystemExit(out["error"])
    rank_ir = out["rank_ir"]
    for views in (False, True):
        planned, remarks = plan(rank_ir, views)
        arenas = [int(a) for a in re.findall(r"remark: arena (\d+) bytes", remarks)]
        print(f"views={views}: arena bytes per function {arenas}")
        for i, counts in enumerate(analyse(planned)):
            print(f"  function {i}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))


if __name__ == "__main__":
    main()
