"""build/bin/handoff_transport_bench, one round at two gaps (no speed is
checked): every transport answers each message (the binary checks every
answer and fails on a wrong one), the table and the JSON are written with
one cell per transport and gap, and bad arguments exit 2 with a message."""
import json
import os
import subprocess

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
BINARY = os.path.join(ROOT, "build", "bin", "handoff_transport_bench")
TRANSPORTS = ["zmq_tcp", "tcp", "unix", "futex_shm"]

pytestmark = pytest.mark.skipif(not os.path.exists(BINARY),
                                reason="handoff_transport_bench is not built")


def test_one_round_writes_the_table_and_json(tmp_path):
    out = subprocess.run([BINARY, "--rounds", "1", "--gaps-ms", "0,1", "--bytes", "300",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    with open(tmp_path / "results.json") as f:
        results = json.load(f)
    assert results["bytes"] == 300 and results["rounds"] == 1
    assert list(results["transports"]) == TRANSPORTS
    for name in TRANSPORTS:
        cells = results["transports"][name]
        assert cells["0"]["count"] == 2000 and cells["1"]["count"] == 300
        for cell in cells.values():
            assert 0 < cell["median_us"] <= cell["p90_us"]
    table = (tmp_path / "table.md").read_text()
    assert "| after 0 ms idle | ratio | after 1 ms idle | ratio |" in table
    for name in TRANSPORTS:
        assert f"| {name} |" in table
    assert "| zmq_tcp |" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["--transports", "zmq_tcp,carrier_pigeon"], "unknown transport 'carrier_pigeon'"),
    (["--bytes", "0"], "--bytes must be"),
    (["--rounds", "two"], "a number is malformed"),
    (["--gaps-ms", "0,-5"], "a gap is negative"),
    (["--out"], "--out needs a value"),
])
def test_bad_arguments_exit_2_with_a_message(args, message):
    out = subprocess.run([BINARY] + args, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert message in out.stderr
