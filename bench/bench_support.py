"""What the benchmark drivers share: running one measurement in a child
process whose last stdout line is JSON."""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(cmd, timeout, env=None, stderr_lines=None):
    """Runs `cmd`; returns the JSON object of its last non-empty stdout line
    with "wall_s" added, or {"error": why} when it timed out, failed or
    printed no JSON. When `stderr_lines` is a list, the child's stderr lines
    are appended to it."""
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if stderr_lines is not None:
        stderr_lines.extend(r.stderr.splitlines())
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    if r.returncode != 0 or not lines:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"failed (exit {r.returncode}): {tail[:300]}"}
    try:
        out = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": f"bad output: {lines[-1][:200]}"}
    if isinstance(out, dict):
        out["wall_s"] = time.perf_counter() - t
    return out


def run_job_file(script, job, timeout=900):
    """Runs `script --job FILE` in a fresh interpreter importing this
    checkout's dtorch with the on-disk program cache off, FILE holding `job`
    as JSON; returns the JSON object of the child's last stdout line. Raises
    RuntimeError with the end of its stderr when it fails."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
        path = f.name
    env = dict(os.environ, DTORCH_CACHE_DIR="",
               PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run([sys.executable, script, "--job", path], capture_output=True,
                              text=True, timeout=timeout, env=env)
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise RuntimeError(f"job failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
