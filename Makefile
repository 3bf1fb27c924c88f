# DTorch: `make demo` and `make test` are the two entry points; both install
# what they need, configure, build and run.
BUILD ?= build
PYTHON ?= $(shell command -v python3)
JOBS ?= $(shell nproc)
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_DIR ?= $(HOME)/.cache/dtorch-ccache

CLANG_FORMAT ?= clang-format-22

.PHONY: format format-check setup configure build test test-lit test-cpp test-python demo clean docs docs-setup docs-check pip-check

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD) -G Ninja \
	  -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
	  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
	  -DLLVM_DIR=/usr/lib/llvm-22/lib/cmake/llvm \
	  -DPython_EXECUTABLE=$(PYTHON) -DPython3_EXECUTABLE=$(PYTHON)

configure: setup $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)
	@PYTHON=$(PYTHON) bash scripts/install_python.sh

test-lit: build
	$(PYTHON) -c "from lit.main import main; main()" -sv $(BUILD)/test/lit

test-cpp: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# PYTHONPATH: test this checkout's dtorch even when another checkout was
# installed (editable) since.
test-python: build
	PYTHONPATH=$(CURDIR)/python$${PYTHONPATH:+:$$PYTHONPATH} $(PYTHON) -m pytest -q test/python

# One .clang-format (LLVM style) for every C++ file of the project.
format:
	git ls-files '*.cpp' '*.h' | xargs $(CLANG_FORMAT) -i

format-check: setup
	git ls-files '*.cpp' '*.h' | xargs $(CLANG_FORMAT) --dry-run -Werror

# Every layer runs even when an earlier one fails; the exit code reports all.
test: build
	@rc=0; \
	$(MAKE) --no-print-directory format-check || rc=1; \
	$(MAKE) --no-print-directory test-lit || rc=1; \
	$(MAKE) --no-print-directory test-cpp || rc=1; \
	$(MAKE) --no-print-directory test-python || rc=1; \
	exit $$rc

demo: build
	@bash scripts/demo.sh $(BUILD)

# Documentation: Sphinx + MyST in a virtual environment of their own
# (scripts/setup_docs.sh), the API reference from the package's docstrings
# (hence `build` and PYTHONPATH=python), warnings as errors.
DOCS_VENV ?= $(BUILD)/docs-venv
SPHINX = PYTHONPATH=$(CURDIR)/python $(DOCS_VENV)/bin/python -m sphinx -W --keep-going -q

docs-setup:
	@PYTHON=$(PYTHON) bash scripts/setup_docs.sh $(DOCS_VENV)

# Regenerates the ODS reference into docs/generated, then the HTML.
docs: build docs-setup
	cmake --build $(BUILD) --target dtorch-docs
	$(SPHINX) -b html -d $(BUILD)/docs/doctrees docs $(BUILD)/docs/html
	@echo "docs: open $(BUILD)/docs/html/index.html"

# A clean HTML build with warnings as errors, the link check, and a check
# that the checked-in ODS reference matches the ODS.
docs-check: build docs-setup
	$(PYTHON) scripts/check_doc_links.py
	cmake --build $(BUILD) --target dtorch-docs
	@git diff --quiet -- docs/generated || { git --no-pager diff --stat -- docs/generated; \
	  echo "docs-check: docs/generated is out of date; commit what make docs wrote"; exit 1; }
	rm -rf $(BUILD)/docs/check
	$(SPHINX) -E -b html -d $(BUILD)/docs/check/doctrees docs $(BUILD)/docs/check/html
	@echo "docs-check: HTML builds without warnings"

clean:
	rm -rf $(BUILD)

# `pip install .` into a scratch virtual environment, then a smoke run.
pip-check: setup
	rm -rf $(BUILD)/pip-venv && $(PYTHON) -m venv $(BUILD)/pip-venv
	$(BUILD)/pip-venv/bin/pip install -q .
	cd / && $(CURDIR)/$(BUILD)/pip-venv/bin/python -c "import dtorch, numpy as np; \
	  m = dtorch.init_device_mesh('cpu', (2,)); x = dtorch.ones(4, device_mesh=m); \
	  assert (x + 1).numpy().tolist() == [2.0] * 4; print('pip install . works')"
