# Set-up and run in one command each; every target creates the virtual environment it needs.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch first: an unpinned torch, pulled in by transformers, brings gigabytes of CUDA.
TORCH ?= torch==2.13.0

.PHONY: demo demo-llamacpp test test-fast lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[engine,report,test]"
	touch $@

## make demo: sweep the embedded engine (Transformers continuous batching) and print the table
demo: $(VENV)/.installed
	$(BIN)/tokenbench sweep

demo-llamacpp: $(VENV)/.installed
	$(BIN)/tokenbench sweep --engine llamacpp

## make test: pyflakes, then every test, the end-to-end ones against both real engines included
test: lint
	$(BIN)/python -m pytest

lint: $(VENV)/.installed
	$(BIN)/python -m pyflakes src tests benchmarks

test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -m "not engine"

## make bench: the client-overhead benchmark (a table; not a test)
bench: $(VENV)/.installed
	$(BIN)/python benchmarks/client_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
