#!/usr/bin/env python3
"""Checks that the project's documents point only at files inside the
repository: every relative Markdown link and every `path/to/file` quoted in
backticks that starts with ../ must resolve to a file or folder of the
repository. Prints each offence as FILE:LINE: message; exits 1 if any.

Usage: check_doc_links.py [ROOT]  (default: the repository of this script)
"""
import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # [text](target)
QUOTED_PARENT = re.compile(r"(?<!})`(\.\./[^`\s]*)`")  # `../something`
DOC_ROLE = re.compile(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`")  # {doc}`page`, {doc}`text <page>`
SKIP_DIRS = {".git", "build", "node_modules", "_build"}


def markdown_files(root):
    for top in ("README.md", "docs"):
        path = os.path.join(root, top)
        if os.path.isfile(path):
            yield path
        for folder, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            for name in files:
                if name.endswith(".md"):
                    yield os.path.join(folder, name)


def problems_in(path, root):
    root = os.path.realpath(root)
    here = os.path.dirname(path)
    in_fence = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            targets = [m.group(1) for m in LINK.finditer(line)]
            targets += [m.group(1) for m in QUOTED_PARENT.finditer(line)]
            for m in DOC_ROLE.finditer(line):  # a Sphinx document name, no suffix
                name = m.group(1)
                base = os.path.join(root, "docs") if name.startswith("/") else here
                candidates = [os.path.join(base, name.lstrip("/") + s) for s in (".md", ".rst")]
                if not any(os.path.exists(c) for c in candidates):
                    yield number, f"{{doc}}`{name}` names no document"
            for target in targets:
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue  # a URL (http:, mailto:) or an anchor on this page
                file_part = target.split("#", 1)[0]
                if not file_part:
                    continue
                resolved = os.path.realpath(os.path.join(here, file_part))
                if os.path.commonpath([resolved, root]) != root:
                    yield number, f"{target} points outside the repository"
                elif not os.path.exists(resolved):
                    yield number, f"{target} does not exist"


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    count = 0
    for path in sorted(markdown_files(root)):
        for number, message in problems_in(path, root):
            print(f"{os.path.relpath(path, root)}:{number}: {message}")
            count += 1
    if count:
        print(f"check_doc_links: {count} link(s) to fix")
        return 1
    print("check_doc_links: every link stays inside the repository and resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
