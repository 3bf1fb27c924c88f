#!/usr/bin/env python3
"""Writes the seed corpora of test/fuzz/corpus/ (checked in; rerun after the
inputs change): the dtensor/rank modules of the lit tests, one per
`// -----` split and without the FileCheck lines, for fuzz_dtensor_ir; .npy
files of each dtype and a few shapes for fuzz_npy; the envelopes of
make_wire_corpus (built in the fuzz build folder) for fuzz_wire.

    python3 test/fuzz/make_seed_corpora.py [--fuzz-build build-fuzz]
"""
import argparse
import hashlib
import io
import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "test" / "fuzz" / "corpus"
MAX_IR_BYTES = 4096  # fuzz_dtensor_ir skips longer inputs


def write(directory, name, data):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / name).write_bytes(data)


def ir_seeds():
    out = CORPUS / "fuzz_dtensor_ir"
    count = 0
    for path in sorted((ROOT / "test" / "lit").rglob("*.mlir")):
        text = path.read_text()
        for piece in text.split("// -----"):
            lines = [l for l in piece.splitlines()
                     if not re.match(r"\s*//", l) and l.strip()]
            for module in split_module(lines):
                if "func.func" not in module or len(module.encode()) > MAX_IR_BYTES:
                    continue
                digest = hashlib.sha1(module.encode()).hexdigest()[:12]
                write(out, f"{path.stem}-{digest}.mlir", module.encode())
                count += 1
    return count


def split_module(lines):
    """The module, or when it is too long one module per top-level function
    (each with the attribute aliases, `#m = ...`, of the file)."""
    module = "\n".join(lines) + "\n"
    if len(module.encode()) <= MAX_IR_BYTES:
        return [module]
    aliases = [l for l in lines if l.startswith("#")]
    functions, current = [], None
    for line in lines:
        if line.startswith("#"):
            continue
        if line.startswith("func.func") or line.startswith("module"):
            current = [line]
            functions.append(current)
        elif current is not None:
            current.append(line)
    return ["\n".join(aliases + f) + "\n" for f in functions
            if f[0].startswith("func.func")]


def npy_seeds():
    import numpy as np
    out = CORPUS / "fuzz_npy"
    arrays = {
        "f32_2x3": np.arange(6, dtype=np.float32).reshape(2, 3),
        "f64_4": np.linspace(0, 1, 4),
        "i32_scalar": np.array(7, dtype=np.int32),
        "i64_2x0": np.zeros((2, 0), dtype=np.int64),
        "bool_3": np.array([True, False, True]),
        "f32_1x1x2x2": np.ones((1, 1, 2, 2), dtype=np.float32),
        "f32_fortran": np.asfortranarray(np.ones((2, 3), dtype=np.float32)),
        "u8_unsupported": np.arange(3, dtype=np.uint8),
        "f64_bigendian": np.arange(2, dtype=">f8"),
    }
    for name, array in arrays.items():
        buffer = io.BytesIO()
        np.save(buffer, array)
        write(out, name, buffer.getvalue())
    for name, array, version in [("i64_4_v2", np.arange(4, dtype=np.int64), (2, 0)),
                                 ("f32_3_v3", np.arange(3, dtype=np.float32), (3, 0))]:
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, array, version=version)
        write(out, name, buffer.getvalue())
    # Regressions: a shape far larger than the file (allocated before the
    # reader noticed), and a header long enough to overflow the stack of the
    # regex-based reader.
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000, 1000000000), }"
    write(out, "regress_huge_shape_short_file", npy_v1(header) + b"abc")
    header = ("{'descr': '<f4', 'fortran_order': False, 'shape': ("
              + " " * 60000 + "1,), }")
    write(out, "regress_long_header",
          b"\x93NUMPY\x02\x00" + len(header).to_bytes(4, "little")
          + header.encode() + b"\0" * 4)
    return len(arrays) + 4


def npy_v1(header):
    """A version-1 .npy prefix with `header`, padded as numpy pads it."""
    total = 10 + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()


def wire_seeds(fuzz_build):
    out = CORPUS / "fuzz_wire"
    out.mkdir(parents=True, exist_ok=True)
    modules = sorted((CORPUS / "fuzz_dtensor_ir").glob("dtensor-*.mlir"))
    tool = pathlib.Path(fuzz_build) / "bin" / "make_wire_corpus"
    subprocess.run([str(tool), str(out)] + [str(m) for m in modules], check=True)
    return len(list(out.iterdir()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fuzz-build", default=str(ROOT / "build-fuzz"))
    args = parser.parse_args()
    print("fuzz_dtensor_ir:", ir_seeds(), "modules")
    print("fuzz_npy:", npy_seeds(), "files")
    print("fuzz_wire:", wire_seeds(args.fuzz_build), "envelopes")


if __name__ == "__main__":
    main()
