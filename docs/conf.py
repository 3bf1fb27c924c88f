# Sphinx configuration of DTorch's documentation (`make docs`).
# Markdown pages go through MyST; the Python API reference comes from the
# dtorch package's docstrings, so the package must be importable with its
# built extension (make docs runs with PYTHONPATH=python after make build).
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

project = "DTorch"
author = "the DTorch authors"
copyright = "the DTorch authors"
release = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "dtorch_docs",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = [
    "_build",
    "examples",
    "requirements.txt",
    # Included by other pages, not pages of their own:
    "ops.md",
    "generated/DTensorPasses.md",
]

# MyST: `{doc}` roles, ``` fences with directives, anchors for ## headings
# so that links such as api.md#errors resolve.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# The API reference: Google-style docstrings, members in source order, and
# type hints left in the signatures.
autodoc_member_order = "bysource"
# `Name` in a docstring links to that object when Sphinx knows it.
default_role = "py:obj"
napoleon_google_docstring = True
napoleon_numpy_docstring = True
napoleon_use_rtype = False

html_theme = "alabaster"
html_title = "DTorch"
html_static_path = []
# Unlabelled blocks (the assembly formats of docs/generated) stay plain.
highlight_language = "none"
