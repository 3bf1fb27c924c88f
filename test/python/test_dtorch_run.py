"""dtorch-run on the sample graphs with 4 ranks in 2 worker processes,
outputs compared with numpy; bad input is an error message and exit code 1."""
import os
import subprocess

import numpy as np
import pytest

from dtorch import _build_info

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(_build_info.BUILD_DIR, "bin", "dtorch-run")
EXAMPLES = os.path.join(ROOT, "docs", "examples")


def run(args, tmp_path, check=True):
    r = subprocess.run([RUN, *args, "--output-dir", str(tmp_path)], capture_output=True,
                       text=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def save(tmp_path, name, array):
    path = os.path.join(tmp_path, name)
    np.save(path, array)
    return path


def gelu(x):
    from math import erf
    return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))


def test_mlp(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w1 = rng.standard_normal((16, 32)).astype(np.float32)
    w2 = rng.standard_normal((32, 16)).astype(np.float32)
    r = run([os.path.join(EXAMPLES, "mlp.mlir"), "--world-size", "4", "--procs", "2",
             "--input", save(tmp_path, "x.npy", x), "--input", save(tmp_path, "w1.npy", w1),
             "--input", save(tmp_path, "w2.npy", w2)], tmp_path)
    out = np.load(os.path.join(tmp_path, "out0.npy"))
    np.testing.assert_allclose(out, gelu(x @ w1) @ w2, rtol=1e-4, atol=1e-4)
    assert "out0" in r.stdout and "[8, 16]" in r.stdout and "run" in r.stdout


def test_reduce2d(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 5))
    b = rng.standard_normal(5)
    run([os.path.join(EXAMPLES, "reduce2d.mlir"), "--world-size", "4", "--procs", "2",
         "--input", save(tmp_path, "x.npy", x), "--input", save(tmp_path, "b.npy", b)], tmp_path)
    e = np.exp(x + b)
    np.testing.assert_allclose(np.load(os.path.join(tmp_path, "out0.npy")), e.mean(0), rtol=1e-12)
    np.testing.assert_allclose(np.load(os.path.join(tmp_path, "out1.npy")), e, rtol=1e-12)


def test_attention_scores_with_random_inputs(tmp_path):
    r = run([os.path.join(EXAMPLES, "attention_scores.mlir"), "--world-size", "4", "--procs",
             "2", "--seed", "3"], tmp_path)
    out = np.load(os.path.join(tmp_path, "out0.npy"))
    assert out.shape == (4, 6)
    # Same seed, different world: same values.
    other = tmp_path / "other"
    other.mkdir()
    run([os.path.join(EXAMPLES, "attention_scores.mlir"), "--world-size", "2", "--procs", "1",
         "--seed", "3", "--backend", "inprocess"], other)
    np.testing.assert_allclose(np.load(os.path.join(other, "out0.npy")), out, rtol=1e-6)


@pytest.mark.parametrize("case", ["malformed", "wrong_shape", "missing_file", "too_few_ranks",
                                  "bad_option", "bad_number", "no_file", "two_files",
                                  "zero_repeat", "unknown_backend"])
def test_bad_input_is_an_error_not_a_crash(tmp_path, case):
    mlp = os.path.join(EXAMPLES, "mlp.mlir")
    if case == "malformed":
        bad = tmp_path / "bad.mlir"
        bad.write_text("func.func @f(%x: !dtensor.tensor<4xf32, #dtensor.mesh<[2]>, [S(3)]>) {}")
        args = [str(bad)]
    elif case == "wrong_shape":
        args = [mlp, "--input", save(tmp_path, "a.npy", np.zeros((3, 3), np.float32)),
                "--input", save(tmp_path, "b.npy", np.zeros((16, 32), np.float32)),
                "--input", save(tmp_path, "c.npy", np.zeros((32, 16), np.float32))]
    elif case == "missing_file":
        args = [str(tmp_path / "nope.mlir")]
    elif case == "too_few_ranks":
        args = [mlp, "--world-size", "2"]
    elif case == "bad_option":
        args = [mlp, "--frobnicate"]
    elif case == "bad_number":
        args = [mlp, "--world-size", "four"]
    elif case == "no_file":
        args = ["--world-size", "2"]
    elif case == "two_files":
        args = [mlp, mlp]
    elif case == "zero_repeat":
        args = [mlp, "--repeat", "0"]
    else:
        args = [mlp, "--backend", "carrier-pigeon"]
    r = run(args, tmp_path, check=False)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "dtorch-run:" in r.stderr


def test_help_lists_every_option():
    r = subprocess.run([RUN, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for option in ["--entry", "--world-size", "--procs", "--backend", "--workers", "--token",
                   "--input", "--seed", "--output-dir", "--repeat", "--print-ir"]:
        assert option + "=" in r.stdout, option
    # Only dtorch-run's own options (and LLVM's generic ones), not every
    # option the LLVM libraries register.
    assert "--debug-counter" not in r.stdout and "--mlir-" not in r.stdout


def test_options_take_llvm_spellings(tmp_path):
    # --opt=value and --opt value both work, as in every LLVM tool.
    r = run([os.path.join(EXAMPLES, "attention_scores.mlir"), "--world-size=2", "--procs", "1",
             "--seed=3", "--backend=inprocess", "--repeat", "2", "--print-ir=rank"], tmp_path)
    assert "rank.kernel" in r.stdout and "(2)" in r.stdout


def test_bytecode_input(tmp_path):
    bc = os.path.join(tmp_path, "mlp.mlirbc")
    subprocess.run([os.path.join(_build_info.BUILD_DIR, "bin", "dtorch-opt"),
                    os.path.join(EXAMPLES, "mlp.mlir"), "--emit-bytecode", "-o", bc], check=True)
    with open(bc, "rb") as f:
        assert f.read(4) == b"ML\xefR"  # MLIR bytecode magic
    text_dir, bc_dir = tmp_path / "text", tmp_path / "bc"
    text_dir.mkdir()
    bc_dir.mkdir()
    run([os.path.join(EXAMPLES, "mlp.mlir"), "--seed", "5", "--backend", "inprocess"], text_dir)
    run([bc, "--seed", "5", "--backend", "inprocess"], bc_dir)
    np.testing.assert_array_equal(np.load(text_dir / "out0.npy"), np.load(bc_dir / "out0.npy"))


def test_save_graph_then_dtorch_run(dt, meshes, tmp_path):
    from dtorch import Replicate, Shard
    x = dt.randn(8, 4, device_mesh=meshes["2x2"], placements=[Shard(0), Replicate()])
    w = dt.randn(4, 6, device_mesh=meshes["2x2"], placements=[Replicate(), Shard(1)])
    path = dt.save_graph(lambda a, b: ((a @ b).relu() + 1.0).sum(0), (x, w),
                         str(tmp_path / "g.mlir"))
    text = open(path).read()
    assert "func.func @main" in text and "dtensor.matmul" in text
    xn, wn = x.numpy(), w.numpy()
    run([path, "--world-size", "4", "--procs", "2", "--input", save(tmp_path, "x.npy", xn),
         "--input", save(tmp_path, "w.npy", wn)], tmp_path)
    want = (np.maximum(xn @ wn, 0) + 1).sum(0)
    np.testing.assert_allclose(np.load(tmp_path / "out0.npy"), want, rtol=1e-5, atol=1e-5)
