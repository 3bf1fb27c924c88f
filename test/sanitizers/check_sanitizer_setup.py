"""Self-check of `make test-asan`'s Python run: that the setup can fail.

Run by the Makefile with the environment the Python tests get (the ASan
runtime preloaded, ASAN_OPTIONS and UBSAN_OPTIONS with a log_path, the ASan
build's package first on PYTHONPATH). It checks that

1. the preloaded ASan runtime is the one the build links (clang's runtime
   directory), and it is mapped once;
2. a clean run reports nothing (the interpreter under the preload is quiet);
3. each deliberate error of SanitizerCanary.cpp (heap overflow, use after
   free, signed overflow, invalid shift, misaligned load, invalid enum
   load), in the interpreter through ctypes and in a child process started
   with the inherited environment as the embedded cluster starts its
   workers, ends that process with a failure and leaves a report with the
   error's text in the log folder;
4. the embedded cluster's workers are the ASan build's dtorch-worker, with
   the ASan runtime mapped and the same sanitizer options (log_path
   included) in their environment.

Usage: check_sanitizer_setup.py BUILD_DIR (build-asan). Exits non-zero with
a message per failed check.
"""
import glob
import os
import subprocess
import sys
import tempfile

EXPECTED_REPORT = {
    "heap-buffer-overflow": "heap-buffer-overflow",
    "heap-use-after-free": "heap-use-after-free",
    "signed-integer-overflow": "signed integer overflow",
    "invalid-shift": "shift exponent 64 is too large",
    "misaligned-load": "misaligned address",
    "invalid-enum-load": "is not a valid value for type",
}

failures = []


def check(condition, message):
    print(("ok    " if condition else "FAIL  ") + message, flush=True)
    if not condition:
        failures.append(message)


def with_log_path(options, log_dir, prefix):
    """OPTIONS (colon separated) with log_path pointing into LOG_DIR."""
    kept = [o for o in options.split(":") if o and not o.startswith("log_path=")]
    return ":".join(kept + [f"log_path={os.path.join(log_dir, prefix)}"])


def run_isolated(argv, log_dir):
    """Runs ARGV with this environment, its reports going to LOG_DIR."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = with_log_path(env.get("ASAN_OPTIONS", ""), log_dir, "report")
    env["UBSAN_OPTIONS"] = with_log_path(env.get("UBSAN_OPTIONS", ""), log_dir, "report")
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    reports = ""
    for path in sorted(glob.glob(os.path.join(log_dir, "*"))):
        with open(path, errors="replace") as f:
            reports += f.read()
    return result, reports


def mapped_asan_runtimes(pid):
    with open(f"/proc/{pid}/maps") as f:
        return {line.split()[-1] for line in f if "libclang_rt.asan" in line}


def child_pids():
    pids = set()
    for children in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        with open(children) as f:
            pids.update(int(p) for p in f.read().split())
    return pids


def main(build_dir):
    build_dir = os.path.abspath(build_dir)
    runtime_dir = subprocess.run(["clang-22", "--print-runtime-dir"], capture_output=True,
                                 text=True, check=True).stdout.strip()
    runtime = os.path.join(runtime_dir, "libclang_rt.asan-x86_64.so")

    # 1. The preloaded runtime is clang-22's, the one the build links.
    check(os.environ.get("LD_PRELOAD", "") == runtime,
          f"LD_PRELOAD is clang-22's ASan runtime ({runtime})")
    check(mapped_asan_runtimes(os.getpid()) == {os.path.realpath(runtime)},
          "this interpreter maps exactly that ASan runtime")
    worker = os.path.join(build_dir, "bin", "dtorch-worker")
    plain_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    ldd = subprocess.run(["ldd", worker], capture_output=True, text=True, env=plain_env).stdout
    linked = [line.split("=>")[1].split()[0] for line in ldd.splitlines()
              if "libclang_rt.asan" in line and "=>" in line]
    check([os.path.realpath(p) for p in linked] == [os.path.realpath(runtime)],
          f"{worker} links the same runtime (ldd: {linked})")

    module = os.path.join(build_dir, "lib", "libsanitizer_canary_module.so")
    canary = os.path.join(build_dir, "bin", "sanitizer_canary")
    in_interpreter = [sys.executable, "-c",
                      "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
                      "sys.exit(lib.dtorch_sanitizer_canary(sys.argv[2].encode()) != 0)",
                      module]

    # 2. A clean run is quiet; 3. every deliberate error fails and is logged.
    for kind in ["none"] + list(EXPECTED_REPORT):
        for where, argv in (("interpreter", in_interpreter + [kind]),
                            ("child process", [canary, kind])):
            with tempfile.TemporaryDirectory() as log_dir:
                result, reports = run_isolated(argv, log_dir)
            if kind == "none":
                check(result.returncode == 0 and not reports,
                      f"{where}: a clean run exits 0 and reports nothing "
                      f"(rc {result.returncode}, {len(reports)} bytes of reports)")
            else:
                check(result.returncode != 0 and EXPECTED_REPORT[kind] in reports,
                      f"{where}: {kind} fails the process (rc {result.returncode}) "
                      f"and its report says '{EXPECTED_REPORT[kind]}'")

    # 4. The embedded cluster's workers carry the sanitizer and its options.
    import dtorch
    before = child_pids()
    mesh = dtorch.init_device_mesh("cpu", (2,))
    value = (dtorch.ones(4, device_mesh=mesh, placements=[dtorch.Shard(0)]) + 1).numpy()
    check(value.tolist() == [2.0] * 4, "a computation on the embedded cluster runs")
    workers = sorted(child_pids() - before)
    check(len(workers) > 0, f"the embedded cluster started worker processes {workers}")
    for pid in workers:
        exe = os.path.realpath(f"/proc/{pid}/exe")
        check(exe == os.path.realpath(worker), f"worker {pid} runs {exe}")
        check(mapped_asan_runtimes(pid) == {os.path.realpath(runtime)},
              f"worker {pid} maps the ASan runtime once")
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = dict(e.decode().split("=", 1) for e in f.read().split(b"\0") if b"=" in e)
        for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            check(environ.get(name) == os.environ.get(name),
                  f"worker {pid} inherits {name} (log_path included)")
    dtorch.shutdown()

    if failures:
        print(f"check_sanitizer_setup: {len(failures)} check(s) failed", flush=True)
        return 1
    print("check_sanitizer_setup: the sanitizer setup reports and fails as it must", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "build-asan"))
