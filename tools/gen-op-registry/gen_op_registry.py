#!/usr/bin/env python3
"""Generates DTorch's op registry from the ODS declarations.

Every op is declared once in dialects/dtensor/IR/DTensorOps.td (dialect
ops) or DTensorDecompositions.td (torch operators built from dialect ops).
`llvm-tblgen --dump-json` prints every record; this script reads them and
writes:

  --cpp FILE   the C++ table included by lib/Layout/OpRegistry.cpp (the
               client's rule lookup, the Python surface, the kernel names)
  --docs FILE  docs/ops.md, the operator reference

Usage: gen_op_registry.py --tblgen llvm-tblgen -I DIR... TD_FILE [--cpp F] [--docs F]
"""
import argparse
import json
import subprocess
import sys

ALL_DTYPES = ["f32", "f64", "f16", "bf16", "i32", "i64", "i1"]
DTYPE_NAMES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
               "i32": "int32", "i64": "int64", "i1": "bool"}
REDUCE_OPS = {"sum": "Sum", "avg": "Avg", "max": "Max", "min": "Min"}

# How each family may be sharded, for the docs (the rule builders in
# lib/Layout/OpRules.cpp are the truth; lit tests print every rule).
STRATEGIES = {
    "creation": "any placement (each rank makes its own piece)",
    "unary": "any Shard/Replicate, dim by dim",
    "binary": "any Shard/Replicate, dim by dim (broadcast dims replicated locally)",
    "compare": "any Shard/Replicate, dim by dim; partials reduced first",
    "where": "any Shard/Replicate, dim by dim; partials reduced first",
    "cast": "any Shard/Replicate, dim by dim",
    "reduction": "kept dims stay sharded; a sharded reduced dim gives Partial",
    "argreduce": "kept dims stay sharded; the reduced dim is gathered",
    "topk": "kept dims stay sharded; the searched dim is gathered",
    "matmul": "data parallel (rows), column (N), row (K: Partial(sum)), batch",
    "shape": "dims that map one-to-one keep their shard",
    "slice": "whole dims keep their shard; cut dims are gathered",
    "concat": "dims other than the joined one keep their shard",
    "index": "index dims stay sharded; see the op",
    "triangle": "every dim may stay sharded (global offsets per piece)",
    "layout": "changes placements (lowered to collectives)",
    "layout_step": "one collective step on one mesh axis",
    "decomposition": "follows from the ops it uses",
    "optimizer": "each parameter's tensors keep its placements; partials reduced first",
}


def load(args):
    cmd = [args.tblgen, "--dump-json"] + [f"-I{d}" for d in args.include] + [args.td]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def entries(records):
    ops = []
    for name in sorted(records["!instanceof"].get("Op", [])):
        r = records[name]
        if "family" not in r:
            continue
        args = r["arguments"]["args"]
        tensors, attrs, variadic, names = 0, [], False, []
        for arg, argname in args:
            d = arg["def"]
            if d == "AnyDTensor":
                tensors += 1
                names.append(argname)
            elif d.startswith("anonymous_") and "Variadic" in records.get(d, {}).get(
                    "!superclasses", []):
                variadic = True
                names.append(argname)
            else:
                attrs.append(argname)
        ops.append(dict(name=r["opName"], family=r["family"], kernel=r["kernel"],
                        summary=r["summary"], operands=-1 if variadic else tensors,
                        attrs=attrs, is_op=True, operand_names=names, **common(r)))
    for name in sorted(records["!instanceof"].get("DTorch_Decomposition", []),
                       key=lambda n: records[n]["opName"]):
        r = records[name]
        ops.append(dict(name=r["opName"], family="decomposition", kernel="",
                        summary=r["summary"], operands=0, attrs=[], is_op=False,
                        uses=r["uses"], **common(r)))
    return ops


def common(r):
    return dict(functions=r["torchFunctions"], methods=r["tensorMethods"],
                operators=r["pyOperators"], joint=r["jointPartial"],
                linear=r["linearOperands"], float_only=bool(r["floatOnly"]),
                dtypes=r["dtypes"], reference=r["reference"], test=r["test"],
                gradient=r["gradient"])


def check(ops):
    seen = {}
    errors = []
    for op in ops:
        if op["name"] in seen:
            errors.append(f"op '{op['name']}' is declared twice")
        seen[op["name"]] = op
        for p in op["joint"]:
            if p not in REDUCE_OPS:
                errors.append(f"op '{op['name']}': unknown jointPartial '{p}'")
        for t in op["dtypes"]:
            if t not in ALL_DTYPES:
                errors.append(f"op '{op['name']}': unknown dtype '{t}'")
        if op["family"] not in STRATEGIES:
            errors.append(f"op '{op['name']}': unknown family '{op['family']}'")
        if op["gradient"]:
            want = 1 if op["operands"] == -1 else op["operands"]
            if not op["is_op"]:
                errors.append(f"decomposition '{op['name']}' declares a gradient; its ops have theirs")
            elif len(op["gradient"]) != want:
                errors.append(f"op '{op['name']}': {len(op['gradient'])} gradient formulas for "
                              f"{want} tensor operands")
            for f in op["gradient"]:
                try:
                    compile(f or "0", op["name"], "eval")
                except SyntaxError as e:
                    errors.append(f"op '{op['name']}': gradient formula '{f}' is not a Python "
                                  f"expression: {e}")
    for op in ops:
        for u in op.get("uses", []):
            if u not in seen or not seen[u]["is_op"]:
                errors.append(f"decomposition '{op['name']}' uses '{u}', which is not a dialect op")
    if errors:
        sys.exit("gen_op_registry: " + "\n".join(errors))


def cstr(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def clist(items, fn=cstr):
    return "{" + ", ".join(fn(i) for i in items) + "}"


def write_cpp(ops, path):
    lines = ["// Generated by tools/gen-op-registry/gen_op_registry.py from the ODS",
             "// declarations (dialects/dtensor/IR/DTensorOpRegistry.td). Do not edit.", ""]
    for op in ops:
        lines.append("{" + ", ".join([
            cstr(op["name"]), cstr(op["family"]), cstr(op["kernel"]), cstr(op["summary"]),
            str(op["operands"]), clist(op["attrs"]), clist(op["functions"]),
            clist(op["methods"]), clist(op["operators"]),
            clist(op["joint"], lambda p: "ReduceOp::" + REDUCE_OPS[p]),
            clist(op["linear"], str), "true" if op["float_only"] else "false",
            clist(op["dtypes"]), clist(op.get("uses", [])), cstr(op["reference"]),
            cstr(op["test"]), "true" if op["is_op"] else "false",
            clist(op["gradient"]), clist(op.get("operand_names", []))]) + "},")
    text = "\n".join(lines) + "\n"
    write_if_changed(path, text)


def write_docs(ops, path):
    out = ["# Operators", "",
           "Generated from the op registry (`dialects/dtensor/IR/DTensorOps.td` and",
           "`DTensorDecompositions.td`) by `tools/gen-op-registry/gen_op_registry.py`;",
           "do not edit. Every row is covered by `test/python/test_registry_ops.py`",
           "(dialect ops: each against its numpy reference on meshes (4,) and (2, 2),",
           "through Python and through `dtorch-run`) or `test/python/test_decompositions.py`.",
           "`test/python/test_op_coverage.py` fails when an operator of the API lacks",
           "a registry entry, a kernel or a test.", "",
           "| torch names | dialect op | dtypes | sharding | partial inputs | kernel | tests |",
           "|---|---|---|---|---|---|---|"]
    for op in ops:
        names = sorted(set(op["functions"]) | set("Tensor." + m for m in op["methods"]) |
                       set(op["operators"]))
        if op["is_op"]:
            dop = f"`dtensor.{op['name']}`"
            dt = ", ".join(DTYPE_NAMES[t] for t in op["dtypes"])
        else:
            dop = "decomposition: " + ", ".join(f"`{u}`" for u in op["uses"])
            dt = "as its ops"
        partial = []
        if op["joint"]:
            partial.append("all P(" + "/".join(op["joint"]) + ")")
        if op["linear"]:
            partial.append("P(sum/avg) in operand " + ", ".join(map(str, op["linear"])))
        out.append("| " + " | ".join([
            ", ".join(f"`{n}`" for n in names) or "(internal)", dop, dt,
            STRATEGIES[op["family"]], "; ".join(partial) or "reduced first",
            f"`{op['kernel']}`" if op["kernel"] else "-", tests_of(op)]) + " |")
    out.append("")
    out.append("Summaries:")
    out.append("")
    for op in ops:
        out.append(f"- **{op['name']}**: {op['summary']}")
    out += ["", "Gradient formulas (the `gradient` field; `python/dtorch/autograd.py`",
            "evaluates them at `backward()`, over `g`, `result`, the operand names and",
            "the attributes; `-`: not differentiable in that operand; decompositions",
            "differentiate through their ops; `test/python/test_autograd_registry.py`",
            "checks each against finite differences):", ""]
    for op in ops:
        if not op["gradient"]:
            continue
        parts = [f"`{n}`: " + (f"`{f}`" if f else "-")
                 for n, f in zip(op.get("operand_names", []), op["gradient"])]
        out.append(f"- `{op['name']}`: " + "; ".join(parts))
    write_if_changed(path, "\n".join(out) + "\n")


def tests_of(op):
    tests = []
    if op["is_op"] and op["reference"] and op["family"] != "creation":
        tests += ["test_registry_ops", "test_dtypes"]
    if not op["is_op"]:
        tests.append("test_decompositions")
    if op["test"]:
        tests.append(op["test"].split("/")[-1])
    return ", ".join(f"`{t}`" for t in tests) or "-"


def write_if_changed(path, text):
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tblgen", required=True)
    ap.add_argument("-I", dest="include", action="append", default=[])
    ap.add_argument("td")
    ap.add_argument("--cpp")
    ap.add_argument("--docs")
    args = ap.parse_args()
    ops = entries(load(args))
    check(ops)
    if args.cpp:
        write_cpp(ops, args.cpp)
    if args.docs:
        write_docs(ops, args.docs)


if __name__ == "__main__":
    main()
