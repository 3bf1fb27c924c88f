"""Every operator of the API contract has a registry entry (declared once in
ODS), every dialect op a kernel for each dtype it declares, a sharding rule
and a test; the generated docs/ops.md lists them all."""
import os

import dtorch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The operator list of the API contract (docs/api.md, "Operators").
API_OPERATORS = """
add sub mul div pow neg abs exp log sqrt rsqrt sin cos tanh sigmoid relu gelu silu
clamp where maximum minimum eq ne lt le gt ge
sum mean max min amax amin argmax argmin var std logsumexp softmax log_softmax
matmul bmm mm
reshape transpose permute t broadcast_to cat stack split chunk narrow
embedding masked_fill tril triu dropout one_hot gather index_select scatter_add
layer_norm rms_norm cross_entropy mse_loss scaled_dot_product_attention linear
""".split()
API_METHODS = """view unsqueeze squeeze flatten expand to float long __getitem__""".split()
API_OPERATOR_SYMBOLS = """__add__ __sub__ __mul__ __truediv__ __pow__ __neg__ __matmul__
__eq__ __ne__ __lt__ __le__ __gt__ __ge__""".split()



def _names(entry):
    return set(entry["functions"]) | set(entry["methods"]) | set(entry["operators"])


def test_every_api_operator_has_a_registry_entry(dt):
    reg = dtorch.op_registry()
    declared = set().union(*(_names(e) for e in reg))
    missing = [n for n in API_OPERATORS + API_METHODS + API_OPERATOR_SYMBOLS if n not in declared]
    assert not missing, f"API operators without a registry entry: {missing}"
    for n in API_OPERATORS:
        assert hasattr(dtorch, n) or any(n in e["methods"] for e in reg), n


def test_every_dialect_op_has_a_kernel_for_its_dtypes_and_a_test(dt):
    from test_registry_ops import entries_under_test
    tested = {e["name"] for e in entries_under_test()}
    short = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
             "int32": "i32", "int64": "i64", "bool": "i1"}
    problems = []
    for e in dtorch.op_registry():
        if not e["is_dialect_op"] or not e["kernel"]:
            continue
        have = {short[d] for d in dt._C.kernel_dtypes(e["kernel"])}
        if not have:
            problems.append(f"{e['name']}: no kernel '{e['kernel']}'")
        if e["name"] not in tested and not e["test"]:
            problems.append(f"{e['name']}: no test")
    assert not problems, problems


def test_every_decomposition_has_a_test_and_uses_dialect_ops(dt):
    src = open(os.path.join(ROOT, "test", "python", "test_decompositions.py")).read()
    ops = {e["name"] for e in dtorch.op_registry() if e["is_dialect_op"]}
    for e in dtorch.op_registry():
        if e["is_dialect_op"]:
            continue
        assert set(e["uses"]) <= ops, e
        names = e["functions"] + e["methods"] or [e["name"]]
        assert any(n in src for n in names), f"decomposition {e['name']} has no test"


def test_docs_ops_md_lists_every_entry():
    text = open(os.path.join(ROOT, "docs", "ops.md")).read()
    assert "Generated from the op registry" in text
    for e in dtorch.op_registry():
        assert f"**{e['name']}**" in text, e["name"]


def test_every_named_test_exists(dt):
    for e in dtorch.op_registry():
        if not e["test"]:
            continue
        path, _, fn = e["test"].partition("::")
        full = os.path.join(ROOT, path)
        assert os.path.exists(full), f"{e['name']}: {path} does not exist"
        if fn:
            assert f"def {fn}(" in open(full).read(), f"{e['name']}: no {fn} in {path}"


def test_every_op_rule_is_printed_by_a_lit_test(dt):
    """test/lit/.../dtensor-print-sharding-rules.mlir checks the printed rule
    of every dialect op that has one (all but the layout changes)."""
    text = open(os.path.join(ROOT, "test", "lit", "dtensor", "Transforms",
                             "dtensor-print-sharding-rules.mlir")).read()
    lines = text.splitlines()
    checked = set()
    for k, line in enumerate(lines[:-1]):
        if "expected-remark" in line and "sharding rule" in line:
            nxt = lines[k + 1]
            if "dtensor." in nxt:
                checked.add(nxt.split("dtensor.")[1].split()[0])
    missing = [e["name"] for e in dtorch.op_registry()
               if e["is_dialect_op"] and e["family"] not in ("layout", "layout_step")
               and e["name"] not in checked]
    assert not missing, f"ops whose sharding rule no lit test prints: {missing}"
