# DTorch: `make demo` and `make test` are the two entry points; both install
# what they need, configure, build and run.
BUILD ?= build
PYTHON ?= $(shell command -v python3)
JOBS ?= $(shell nproc)
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_DIR ?= $(HOME)/.cache/dtorch-ccache

CLANG_FORMAT ?= clang-format-22

.PHONY: format format-check setup configure build test test-lit test-cpp test-python demo clean docs docs-setup docs-check pip-check test-asan test-tsan test-fuzz

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

# ---- Sanitizers and fuzzing (docs/guide/fuzzing.md) --------------------------
# Each in a build folder of its own, so the main build is untouched. Every
# sanitizer report aborts its process and fails the run: the C++ tests
# fail directly; the Python tests' processes (the interpreter and the
# workers it starts) write their reports to $(ASAN_BUILD)/sanitizer-logs,
# and any report there fails test-asan.
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
SANITIZER_RUNTIME_DIR = $(shell clang-22 --print-runtime-dir)
SANITIZER_CONFIGURE = -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DCMAKE_C_FLAGS_RELEASE=-O1 \
	  -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
	  -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
	  -DLLVM_DIR=/usr/lib/llvm-22/lib/cmake/llvm \
	  -DPython_EXECUTABLE=$(PYTHON) -DPython3_EXECUTABLE=$(PYTHON)
# The C++ tests under ASan: the runtime, the distributed runtime (real
# worker processes), the client and the layout math. The compiler's tests
# (long exhaustive sweeps) stay in the plain build.
ASAN_CPP_TESTS ?= runtime_tests distributed_tests hostshm_tests client_tests layout_tests
# Left out under ASan: a 4 MB-per-collective throughput test of the host
# shared-memory communicator that runs past its own 60 s limit at ASan's
# speed on 2 cores (the chunked paths it takes are covered by the others).
ASAN_GTEST_FILTER ?= -HostSharedMemoryCollectives.LargeTensorsGoThroughTheBoundedBuffer
# The Python tests under ASan: the embedded cluster with ASan workers.
# Every file that runs there (about 40 minutes on the loaded 2-core
# machine; .ci/run names a subset). Left out: the benches and examples,
# and the files that start a child Python with python/ first on its path
# (test_buffer_planning, test_explain: the child would run the main
# build), or dtorch-run (test_registry_ops, test_dtorch_run).
ASAN_PYTHON_TESTS ?= $(patsubst %,test/python/%.py,test_failure test_ops \
	test_redistribute test_parallel test_inplace test_fetch_async \
	test_memory_stats test_errors test_autograd test_optim test_checkpoint \
	test_fusion test_pipelining test_dtypes test_decompositions \
	test_program_cache test_last_ir test_security test_restart test_faults \
	test_moe test_ring_attention test_fsdp_reshard test_overlap test_async \
	test_fetch_partial test_meshes test_printing test_host_shared_memory \
	test_reinit test_profiler test_nn_modules test_batched_matmul_layout \
	test_broadcast_layout test_fold_transpose_matmul \
	test_property_regressions test_autograd_registry)
ASAN_LOGS = $(CURDIR)/$(ASAN_BUILD)/sanitizer-logs
# The Python run: python3 (not instrumented) preloads the ASan runtime that
# clang-22 links into the extension and the workers (-shared-libasan, one
# runtime per process; the workers inherit the preload of that same file).
# CPython keeps its allocations to the end of the process, so leaks are
# not reported; PYTHONMALLOC=malloc sends Python's objects through ASan's
# allocator, so an overflow of a buffer Python owns is seen too. Every
# process writes its reports to $(ASAN_LOGS) (any report fails the run,
# also one of a worker whose test passed) and stops at the first one
# (halt_on_error, abort_on_error: the interpreter dies, the controller sees
# a worker die). allocator_may_return_null: an allocation too large
# returns null as it would without ASan, so test_errors' out-of-memory
# case still raises OutOfMemoryError (ASan logs a warning, not a report).
# The on-disk program cache is off, so every program is compiled by the
# sanitized compiler.
ASAN_PYTHON_ENV = \
	ASAN_OPTIONS=detect_leaks=0:allow_user_poisoning=0:halt_on_error=1:abort_on_error=1:disable_coredump=1:allocator_may_return_null=1:log_path=$(ASAN_LOGS)/report \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$(ASAN_LOGS)/report \
	ASAN_SYMBOLIZER_PATH=$(shell command -v llvm-symbolizer-22) \
	LD_PRELOAD=$(SANITIZER_RUNTIME_DIR)/libclang_rt.asan-x86_64.so \
	PYTHONMALLOC=malloc DTORCH_CACHE_DIR= \
	PYTHONPATH=$(CURDIR)/$(ASAN_BUILD)/python

$(ASAN_BUILD)/build.ninja:
	cmake -S . -B $(ASAN_BUILD) $(SANITIZER_CONFIGURE) -DDTORCH_SANITIZE=address

# ASAN_PYTHON_TESTS= (empty) runs the C++ tests only, without building the
# extension (the compiler and the dialects). Before the Python tests,
# test/sanitizers/check_sanitizer_setup.py checks that the setup can fail:
# deliberate errors in the interpreter and in a child process are reported
# and fail them, and the workers carry the sanitizer and its options.
test-asan: setup $(ASAN_BUILD)/build.ninja
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target $(ASAN_CPP_TESTS) dtorch-worker \
	  $(if $(strip $(ASAN_PYTHON_TESTS)),_C sanitizer_canary sanitizer_canary_module)
	rm -rf $(ASAN_LOGS) && mkdir -p $(ASAN_LOGS)
	@rc=0; \
	for t in $(ASAN_CPP_TESTS); do \
	  ASAN_OPTIONS=detect_leaks=1:allow_user_poisoning=0 UBSAN_OPTIONS=print_stacktrace=1 \
	    $(ASAN_BUILD)/bin/$$t --gtest_brief=1 --gtest_filter='$(ASAN_GTEST_FILTER)' || rc=1; done; \
	if [ -n "$(strip $(ASAN_PYTHON_TESTS))" ]; then \
	  mkdir -p $(ASAN_BUILD)/python; \
	  tar -C python --exclude='_C*.so' --exclude=_build_info.py --exclude=__pycache__ \
	    -cf - dtorch | tar -C $(ASAN_BUILD)/python -xf -; \
	  $(ASAN_PYTHON_ENV) $(PYTHON) test/sanitizers/check_sanitizer_setup.py $(ASAN_BUILD) || rc=1; \
	  $(ASAN_PYTHON_ENV) $(PYTHON) -m pytest -q -p no:cacheprovider \
	    $(ASAN_PYTHON_TESTS) || rc=1; fi; \
	reports=$$(grep -l -E '(ERROR|SUMMARY): |runtime error:' $(ASAN_LOGS)/* 2>/dev/null); \
	if [ -n "$$reports" ]; then \
	  echo "test-asan: sanitizer reports:"; head -n 60 $$reports; rc=1; \
	elif ls $(ASAN_LOGS)/* >/dev/null 2>&1; then \
	  echo "test-asan: sanitizer warnings, no reports:"; sort $(ASAN_LOGS)/* | uniq -c; fi; \
	exit $$rc

# ThreadSanitizer: the runtime and the distributed runtime (executor
# streams, collectives, worker processes driven by a Cluster) with their
# tests.
TSAN_TESTS ?= runtime_tests distributed_tests
test-tsan: setup
	@test -f $(TSAN_BUILD)/build.ninja || cmake -S . -B $(TSAN_BUILD) $(SANITIZER_CONFIGURE) -DDTORCH_SANITIZE=thread
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target $(TSAN_TESTS) dtorch-worker
	@rc=0; for t in $(TSAN_TESTS); do \
	  TSAN_OPTIONS="halt_on_error=1 die_after_fork=0 second_deadlock_stack=1 suppressions=$(CURDIR)/test/fuzz/tsan.supp" \
	    $(TSAN_BUILD)/bin/$$t --gtest_brief=1 || rc=1; done; exit $$rc

# CI's bounded fuzzing run: 5,000 inputs per target, its seeds first
# (tools/fuzz.sh 1000000r runs the long one).
test-fuzz: setup
	bash tools/fuzz.sh $(FUZZ_LIMIT)
FUZZ_LIMIT ?= 5000r
