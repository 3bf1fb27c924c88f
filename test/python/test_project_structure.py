"""Rules of the project's structure that a refactor must not undo: the Python
extension reaches the runtime only through the client (its errors included),
and no CMake file skips a folder silently."""
import os
import re
import subprocess
import sys
import textwrap

from conftest import subprocess_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


def test_the_extension_includes_only_client_headers():
    includes = re.findall(r'#include\s+"([^"]+)"', read("python", "src", "dtorch_ext.cpp"))
    assert includes, "no project header included"
    # The client's headers, and the MLIR-free op registry it is built on.
    allowed = ("dtorch/Client/", "dtorch/OpRegistry.h")
    assert all(i.startswith(allowed) for i in includes), includes


def test_no_cmake_file_skips_a_folder_silently():
    offenders = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "third_party")]
        if "CMakeLists.txt" in files:
            text = open(os.path.join(folder, "CMakeLists.txt")).read()
            if re.search(r"if\s*\(\s*EXISTS[^)]*\)\s*(#[^\n]*)?\s*add_subdirectory", text):
                offenders.append(os.path.relpath(folder, ROOT))
    assert not offenders
    # Every folder of C++ tests is listed by name.
    listed = read("test", "CMakeLists.txt")
    for name in os.listdir(os.path.join(ROOT, "test", "cpp")):
        if os.path.exists(os.path.join(ROOT, "test", "cpp", name, "CMakeLists.txt")):
            assert f"add_subdirectory(cpp/{name})" in listed, name


def test_the_inprocess_backend_raises_worker_error_naming_the_rank():
    # Its own interpreter: the shared test session may use the other backend.
    script = textwrap.dedent("""
        import numpy as np
        import dtorch
        dtorch.init(world_size=4, backend="inprocess")
        mesh = dtorch.init_device_mesh("cpu", (4,))
        a = dtorch.tensor(np.array([1, 2, 3, 4]), device_mesh=mesh)
        b = dtorch.tensor(np.array([1, -1, 3, 4]), device_mesh=mesh)
        try:
            (a ** b).numpy()
            print("no error")
        except dtorch.WorkerError as e:
            print("WorkerError", type(e).__name__, e.rank, e.host, "|", e)
        print("after", (a + b).numpy().tolist())
        dtorch.shutdown()
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, cwd="/", env=subprocess_env())
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("WorkerError"))
    _, cls, rank, host, _ = line.split(" ", 4)
    assert cls == "WorkerError" and int(rank) in range(4) and host == "in-process", line
    assert "negative exponent" in line and f"rank {rank}" in line
    assert "after [2, 1, 6, 8]" in r.stdout
