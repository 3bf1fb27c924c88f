"""The documentation that ships with the package stays true:

- every example in the docstrings of the documented modules runs and prints
  what it says (doctest, in a fresh interpreter with its own session, since
  some examples stop and start sessions);
- every public function, class and method of those modules has a docstring
  with an example;
- no document of the repository links to a file outside it, and the link
  checker catches one that does;
- the Sphinx glue includes the generated operator table only when it exists.
"""
import importlib
import inspect
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import backend_name

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCUMENTED = ["dtorch.device_mesh", "dtorch.placement_types", "dtorch._creation",
              "dtorch.errors", "dtorch._runtime", "dtorch.autograd", "dtorch.distributed",
              "dtorch.distributed.tensor.parallel.style", "dtorch.distributed.tensor.parallel.api",
              "dtorch.distributed.fsdp._fully_shard",
              "dtorch.distributed.optim.zero_redundancy_optimizer", "dtorch._async",
              "dtorch.profiler", "dtorch.distributed.checkpoint", "dtorch._serialization",
              "dtorch.distributed.pipelining",
              "dtorch.distributed.pipelining.schedules",
              "dtorch.distributed.tensor.experimental", "dtorch.nn.modules.moe",
              "dtorch.distributed.tensor.parallel.expert", "dtorch.distributed._all_to_all_v"]


def fresh_python(code, timeout=180):
    env = dict(os.environ, DTORCH_WORLD_SIZE="4", DTORCH_BACKEND=backend_name(),
               PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    env.pop("DTORCH_WORKERS", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env=env)


@pytest.mark.parametrize("module", DOCUMENTED)
def test_docstring_examples_run(module):
    r = fresh_python(f"""
        import doctest, importlib, sys
        mod = importlib.import_module({module!r})
        result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
        print("doctest", result.attempted, result.failed)
        sys.exit(1 if result.failed else 0)
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    attempted = int(r.stdout.split("doctest")[1].split()[0])
    assert attempted >= 5, f"{module}: only {attempted} example lines ran"


def public_members(module):
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj):
            yield name, obj
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr != "__getitem__":
                    continue
                if inspect.isfunction(member) or isinstance(member, property):
                    yield f"{name}.{attr}", getattr(obj, attr) if not isinstance(
                        member, property) else member


@pytest.mark.parametrize("module", DOCUMENTED)
def test_public_api_has_docstrings_with_examples(module):
    mod = importlib.import_module(module)
    assert (mod.__doc__ or "").strip(), f"{module} has no module docstring"
    missing = []
    count = 0
    for name, obj in public_members(mod):
        count += 1
        doc = inspect.getdoc(obj) or ""
        if ">>>" not in doc:
            missing.append(name)
    assert count > 0
    assert not missing, f"{module}: no docstring example for {missing}"


def run_link_check(root):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "check_doc_links.py"),
                           str(root)], capture_output=True, text=True, timeout=60)


def test_repository_documents_stay_inside_the_repository():
    r = run_link_check(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_link_check_catches_links_outside_and_missing_files(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Page\n")
    (tmp_path / "README.md").write_text(
        "See `../shared/API.md` for the contract.\n"
        "Also [the page](docs/page.md), [gone](docs/gone.md) and "
        "[web](https://example.org/x.md).\n"
        "```sh\ncat ../shared/inside-a-code-block-is-fine.md\n```\n")
    r = run_link_check(tmp_path)
    assert r.returncode == 1, r.stdout
    assert "README.md:1: ../shared/API.md points outside the repository" in r.stdout
    assert "README.md:2: docs/gone.md does not exist" in r.stdout
    assert "docs/page.md does not exist" not in r.stdout
    assert "example.org" not in r.stdout and "inside-a-code-block" not in r.stdout
    (tmp_path / "docs" / "index.md").write_text("Read {doc}`page` and {doc}`missing`.\n")
    r = run_link_check(tmp_path)
    assert "docs/index.md:1: {doc}`missing` names no document" in r.stdout
    assert "`page`" not in r.stdout


def docs_glue():
    pytest.importorskip("pygments")  # the MLIR lexer the glue registers
    sys.path.insert(0, os.path.join(ROOT, "docs", "_ext"))
    try:
        return importlib.import_module("dtorch_docs")
    finally:
        sys.path.pop(0)


def test_operator_table_is_included_only_when_generated(tmp_path):
    glue = docs_glue()
    note = glue.ops_table_text(str(tmp_path))
    assert "{include}" not in note and "not in this checkout" in note
    (tmp_path / "ops.md").write_text("| op | torch |\n|---|---|\n")
    include = glue.ops_table_text(str(tmp_path))
    assert include.startswith("```{include} ../ops.md\n:heading-offset: 0\n")
    (tmp_path / "ops.md").write_text("# Operators\n\n```sh\n# not a heading\n```\n## Unary\n")
    assert ":heading-offset: 1\n" in glue.ops_table_text(str(tmp_path))
    assert glue.heading_offset("### Deep\n#### Deeper\n") == 0
    with open(os.path.join(ROOT, "docs", "guide", "operators.md")) as f:
        assert glue.OPS_MARKER.search(f.read()), "operators.md lost its ops-table marker"


def test_star_arguments_are_escaped_outside_code_only():
    glue = docs_glue()
    assert glue.escape_star_args("Traces fn(*args) and f(a, **kw)") == \
        "Traces fn(\\*args) and f(a, \\*\\*kw)"
    assert glue.escape_star_args(">>> f(*args)") == ">>> f(*args)"
    assert glue.escape_star_args("``f(*a)`` and `g(*b)`") == "``f(*a)`` and `g(*b)`"
    assert glue.escape_star_args("a * b") == "a * b"
