"""Sphinx glue for DTorch's documentation.

- Registers the MLIR lexer for ```mlir code blocks.
- Replaces the `dtorch:ops-table` marker of guide/operators.md with an
  include of docs/ops.md (generated from the op registry) when that file
  exists, and with a note when it does not, so the build never depends on
  it being there.
- Escapes star-arguments written in plain text in docstrings (`fn(*args)`,
  `f(**kw)`), which reStructuredText would otherwise read as the start of
  emphasis.
- Drops the `[TOC]` lines that mlir-tblgen writes into docs/generated/ (a
  directive of another Markdown tool; Sphinx makes its own contents).
"""
import os
import re

from mlir_lexer import MlirLexer

OPS_MARKER = re.compile(r"<!-- dtorch:ops-table.*?-->", re.DOTALL)
OPS_FILE = "ops.md"  # relative to the docs source folder


def heading_offset(markdown, top_level=2):
    """How far to push the headings of an included file down so that its
    highest heading becomes `top_level` (the page that includes it owns H1)."""
    levels = []
    in_fence = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence:
            m = re.match(r"^(#{1,6})\s", line)
            if m:
                levels.append(len(m.group(1)))
    return max(0, top_level - min(levels)) if levels else 0


def ops_table_text(srcdir):
    path = os.path.join(srcdir, OPS_FILE)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            offset = heading_offset(f.read())
        return ("```{include} ../" + OPS_FILE + "\n:heading-offset: " + str(offset)
                + "\n```\n")
    return ("```{note}\nThe generated operator table (`docs/" + OPS_FILE + "`) is not in "
            "this checkout yet; it appears here once the op registry writes it. Until "
            "then, the operators and their behaviour are those listed in the API "
            "contract.\n```\n")


def on_source_read(app, docname, source):
    text = source[0]
    if OPS_MARKER.search(text):
        # Re-read this page when ops.md appears, changes or goes away.
        app.env.note_dependency(os.path.join(app.srcdir, OPS_FILE))
        text = OPS_MARKER.sub(lambda _: ops_table_text(app.srcdir), text)
    if docname.startswith("generated/") or "{include} ../generated/" in text:
        text = re.sub(r"^\[TOC\]\s*$", "", text, flags=re.MULTILINE)
    source[0] = text


def on_include_read(app, relative_path, parent_docname, content):
    # Sphinx >= 7.2 also passes included files through this event.
    if str(relative_path).startswith("generated/") or "/generated/" in str(relative_path):
        content[0] = re.sub(r"^\[TOC\]\s*$", "", content[0], flags=re.MULTILINE)


STAR_ARGS = re.compile(r"([(,]\s*)(\*{1,2})(?=[A-Za-z_])")
LITERAL_SPAN = re.compile(r"(``.*?``|`[^`]*`)")


def escape_star_args(line):
    """`fn(*args)` -> `fn(\\*args)`, except in code: doctest lines and
    backquoted spans stay as they are."""
    if line.lstrip().startswith((">>>", "...")):
        return line
    parts = LITERAL_SPAN.split(line)
    for i in range(0, len(parts), 2):  # odd indices are the backquoted spans
        parts[i] = STAR_ARGS.sub(lambda m: m.group(1) + "\\*" * len(m.group(2)), parts[i])
    return "".join(parts)


def on_autodoc_docstring(app, what, name, obj, options, lines):
    lines[:] = [escape_star_args(line) for line in lines]


def setup(app):
    app.add_lexer("mlir", MlirLexer)
    app.connect("source-read", on_source_read)
    app.connect("autodoc-process-docstring", on_autodoc_docstring)
    try:
        app.connect("include-read", on_include_read)
    except Exception:  # older Sphinx without the event: [TOC] stays as text
        pass
    app.add_config_value("dtorch_ops_file", OPS_FILE, "env")
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
