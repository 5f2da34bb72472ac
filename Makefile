# Set-up and run in one command each; every target creates the virtual environment it needs.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch first: an unpinned torch, pulled in by transformers, brings gigabytes of CUDA.
TORCH ?= torch==2.13.0

.PHONY: demo demo-vllm demo-llama-server engines engine-vllm engine-llama-server engine-aiperf test test-no-engine test-fast lint \
	bench clean

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[engine,report,quality,test,ray]"
	touch $@

# llama-cpp-python compiles llama.cpp while it installs (about 6 minutes on 2 cores, then cached by pip).
$(VENV)/.installed-llama-cpp-python: $(VENV)/.installed
	@echo "pip install llama-cpp-python: compiles llama.cpp, about 6 minutes the first time ..."
	$(BIN)/pip install -q -e ".[llama-cpp-python]"
	touch $@

## make demo: sweep the embedded engine (Transformers continuous batching) and print the table
demo: $(VENV)/.installed
	$(BIN)/tokenbench sweep

demo-vllm: $(VENV)/.installed
	$(BIN)/tokenbench sweep --engine vllm

demo-llama-server: $(VENV)/.installed
	$(BIN)/tokenbench sweep --engine llama-server

## make engines: build llama.cpp's tools, vLLM's and AIPerf's environments into the user cache (once; 12-25 minutes on 2 cores)
engines: engine-llama-server engine-vllm engine-aiperf

engine-llama-server: $(VENV)/.installed
	$(BIN)/tokenbench engines build llama-server

engine-vllm: $(VENV)/.installed
	$(BIN)/tokenbench engines build vllm

# AIPerf, the reference tool a trace replay is cross-checked against (tests/test_trace_aiperf.py)
engine-aiperf: $(VENV)/.installed
	$(BIN)/tokenbench engines build aiperf

# The suite runs under what a caller's shell may export: a narrow terminal, colour off and forced on, an ASCII
# locale, a zone 14 hours ahead, tokenbench's own variables pointing nowhere. tests/conftest.py pins its own
# environment; a test that reads the caller's instead fails here, not on a user's machine (tests/test_hermetic.py).
HOSTILE_ENV := COLUMNS=80 LINES=24 TERM=dumb NO_COLOR=1 FORCE_COLOR=1 LANG=C LC_ALL=C PYTHONUTF8=0 TZ=Pacific/Kiritimati \
	TOKENBENCH_DB=/proc/tokenbench/results.db TOKENBENCH_CATALOG=/proc/tokenbench/catalog.toml \
	TOKENBENCH_CACHE=/proc/tokenbench/cache TOKENBENCH_TOOLS=/proc/tokenbench/tools TOKENBENCH_DEBUG=1
# The engines where `make engines` put them, and the built models where the embedded engine keeps them: the suite
# ignores TOKENBENCH_TOOLS, TOKENBENCH_CACHE and the like, and reads them as TOKENBENCH_TEST_TOOLS,
# TOKENBENCH_TEST_CACHE and the like (default: the user cache), so the caller's are passed on under those names.
ENGINES_SEEN := $(foreach v,TOOLS CACHE LLAMA_CPP_BIN VLLM_ENV AIPERF_ENV,\
	TOKENBENCH_TEST_$(v)="$${TOKENBENCH_TEST_$(v):-$${TOKENBENCH_$(v):-}}")
# Python writes its bytecode, and pytest its rewritten test modules, beside the sources in __pycache__ (which git
# ignores) whatever the caller's PYTHONDONTWRITEBYTECODE says: without them every test process, and every tokenbench
# command a test starts, compiles the package and rewrites the tests again.
PYTEST := env $(ENGINES_SEEN) $(HOSTILE_ENV) PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

# The tests that need no engine mostly wait on sockets and timers (one process used a seventh of a core through
# them), so they run in WORKERS processes side by side (pytest-xdist); the engine tests run one at a time after
# them, as their cross-checks time real servers that share the machine's cores, and so do the tests marked alone,
# which read the whole machine (its processes, its CPU load), where the tests beside them would be other work.
WORKERS ?= 4

## make test: pyflakes and mypy, then every test: the real engines and the cross-checks against the reference tools included
# (the generated inputs at CI's full count). Lint runs beside the tests that need no engine (they leave a sixth of
# the cores idle, waiting on sockets and timers); a lint error fails the target once those tests are done.
test: engines $(VENV)/.installed-llama-cpp-python
	$(MAKE) --no-print-directory -j2 lint test-no-engine
	TOKENBENCH_FUZZ=ci $(PYTEST) -m "engine or alone"

# make test's first half: the tests that need no engine, side by side, at CI's count of generated inputs. Collecting
# them once first (beside mypy) rewrites the test modules into __pycache__ for the processes to load, where each
# would rewrite them all.
test-no-engine: $(VENV)/.installed
	$(PYTEST) --collect-only -q | tail -n 1
	TOKENBENCH_FUZZ=ci $(PYTEST) -m "not engine and not alone" -n $(WORKERS)

# mypy's cache outside the checkout, so a fresh clone (as CI makes) checks only what changed: without it mypy takes
# 33 s of a core, with it 1-3 s. mypy checks each file against its entry (size, then a hash of the content where the
# time differs), so what it reuses is what it would find again.
MYPY_CACHE ?= $${XDG_CACHE_HOME:-$$HOME/.cache}/tokenbench/mypy

lint: $(VENV)/.installed
	$(BIN)/python -m pyflakes src tests benchmarks
	$(BIN)/python -m mypy --cache-dir "$(MYPY_CACHE)" src

## make test-fast: every test that needs no engine and is not marked slow, with a twentieth of the generated inputs
test-fast: $(VENV)/.installed
	TOKENBENCH_FUZZ=fast $(PYTEST) -m "not engine and not slow and not alone" -n $(WORKERS)
	TOKENBENCH_FUZZ=fast $(PYTEST) -m "alone and not engine and not slow"

## make bench: the client-overhead benchmark (a table; not a test)
bench: $(VENV)/.installed
	$(BIN)/python benchmarks/client_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
