"""What the benchmark drivers share: running one measurement in a child
process whose last stdout line is JSON, the peers' interpreter, the date,
commit and load of a run, and writing its table and JSON."""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The interpreter with torch and jax (bench/setup_torch.sh).
DEFAULT_PEER_PYTHON = os.path.join(ROOT, "build", "torch-venv", "bin", "python")


def add_peer_python_argument(parser, default=DEFAULT_PEER_PYTHON):
    """--peer-python: the interpreter that runs the torch and jax peers
    (DTORCH_PEER_PYTHON, else `default`)."""
    parser.add_argument("--peer-python", default=os.environ.get("DTORCH_PEER_PYTHON", default))


def utc_date():
    """Now, as "2026-01-31 12:00 UTC"."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def load_averages():
    """The 1-, 5- and 15-minute load averages, as "0.4 0.6 0.9"."""
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


def git_rev(unknown="unknown", mark_modified=False):
    """The checkout's short commit (`unknown` when git cannot tell), with
    " (modified)" after it when `mark_modified` and the tree has changes."""
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip() or unknown
        if mark_modified and subprocess.run(["git", "-C", ROOT, "status", "--porcelain"],
                                            capture_output=True, text=True).stdout.strip():
            rev += " (modified)"
        return rev
    except OSError:
        return unknown


def write_table_and_json(out_dir, text, results, indent=1):
    """Writes `text` to OUT_DIR/table.md and `results` to OUT_DIR/results.json
    (making the folder)."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "table.md"), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=indent)


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


def parse_args_or_run_job(parser, argv, job_main):
    """Adds the hidden --job FILE to `parser` and parses `argv`. With --job
    (the child side of run_job_file and of a driver's own children), prints
    the JSON of `job_main(the job in FILE)` and returns None; else returns
    the arguments."""
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.job:
        with open(args.job) as f:
            print(json.dumps(job_main(json.load(f))))
        return None
    return args


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


class LockStepChild:
    """A long-lived measurement child driven one call at a time: `cmd` sets
    up, prints one JSON line when ready, then answers each line written to
    its stdin with one JSON line (what that call measured); "end" makes it
    clean up and answer with its final JSON. Two of these called in turn
    measure two systems side by side call by call, so that a host whose
    speed drifts over seconds slows both alike. Its stderr goes to a
    temporary file (`stderr_lines()` reads it). Use as a context manager:
    the child is always ended, and killed if it does not end. `cpus`, when
    given, is the set of CPUs the child and everything it starts may run on."""

    def __init__(self, cmd, env=None, timeout=300.0, cpus=None):
        self.timeout = timeout
        self._err = tempfile.TemporaryFile("w+")
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._err, text=True, bufsize=1, env=env,
                                      preexec_fn=pin)
        self.ready = self._answer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _answer(self):
        import select
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._proc.stdout], [], [], left)[0]:
                raise RuntimeError(f"no answer within {self.timeout:.0f} s: "
                                   f"{self._stderr_tail()}")
            line = self._proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the child ended (exit {self._proc.poll()}): "
                                   f"{self._stderr_tail()}")
            if line.strip():
                try:
                    return json.loads(line)
                except json.JSONDecodeError:
                    continue  # a library's own print: not an answer

    def _stderr_tail(self):
        lines = self.stderr_lines()
        return (lines or ["no stderr"])[-1][:300]

    def call(self, command="run"):
        """Writes one command line; returns the child's JSON answer."""
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        return self._answer()

    def stderr_lines(self):
        self._err.flush()
        self._err.seek(0)
        return self._err.read().splitlines()

    def close(self):
        """Ends the child ("end", then a kill after `timeout`); returns its
        final JSON answer, or None when it gave none."""
        if self._proc.poll() is not None:
            return None
        final = None
        try:
            final = self.call("end")
        except (RuntimeError, BrokenPipeError, OSError):
            pass
        try:
            self._proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        return final


def serve_lock_step(setup):
    """The child side of LockStepChild: `setup()` returns (call, end), two
    functions returning JSON-able objects; answers "ready", then one line
    per command until "end" or the end of stdin."""
    call, end = setup()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "end":
            break
        print(json.dumps(call(command)), flush=True)
    print(json.dumps(end()), flush=True)
