"""Workers that dial in to the controller: the cases of dial_in_cases.py,
run in a pytest process of their own, because each of them shuts the
session down and starts its own (the test session of conftest, which other
files share, must stay untouched)."""
import os
import subprocess
import sys

from conftest import subprocess_env

HERE = os.path.dirname(os.path.abspath(__file__))


def test_dial_in_cases():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        os.path.join(HERE, "dial_in_cases.py")],
                       capture_output=True, text=True, timeout=900, env=subprocess_env(),
                       cwd=HERE)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout, r.stdout[-3000:]
