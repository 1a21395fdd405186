# bnnzoo: `make demo` runs the end-to-end comparison, `make test` the test suite, `make test-ray`
# the studies on a local Ray (it installs the ray extra first), `make docs` the documentation site
# into site/ (offline, warnings are errors; it installs the docs extra first).
# Each creates .venv if missing and installs what it needs. torch is installed
# first and pinned, so installing bnnzoo never pulls another build. TORCH_INDEX,
# when set, is the only index that torch comes from: TORCH_INDEX=https://download.pytorch.org/whl/cpu
# enforces the CPU wheel (PyPI's Linux wheel brings the CUDA libraries).
PYTHON ?= python3
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RAY_STAMP := $(VENV)/.installed-ray
DOCS_STAMP := $(VENV)/.installed-docs
# worker processes of `make test` (pytest-xdist): the tests run torch on one thread each, so two
# workers on two cores halve the suite's wall time; TEST_WORKERS=0 runs it in this process
TEST_WORKERS ?= 2

.PHONY: demo test test-slow test-ray docs bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX),--index-url "$(TORCH_INDEX)") "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

$(RAY_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[dev,ray]"
	touch $(RAY_STAMP)

$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[dev,docs]"
	touch $(DOCS_STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/bnnzoo demo --out out

test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

test-ray: $(RAY_STAMP)
	$(BIN)/python -m pytest -m ray

# the site's generated pages (docs/hooks.py) read the engine registry, the CLI's parser,
# docs/algorithms.md, examples/ and benchmarks/results/ as they are now
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_gradient.py
	$(BIN)/python benchmarks/bench_sampling.py

clean:
	rm -rf $(VENV) out site .pytest_cache
