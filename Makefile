# bnnzoo: `make demo` runs the end-to-end comparison, `make test` the test suite, `make test-ray`
# the studies on a local Ray (it installs the ray extra first), `make docs` the documentation site
# into site/ (offline, warnings are errors; it installs the docs extra first) and opens its pages in
# headless Chromium (tests/test_site.py; SITE_TEST=optional skips that where no Chromium is
# installed), `make figures` reruns the examples that draw figures and keeps them for the site
# (docs/figures.py; minutes each), `make test-py312`
# the suite on Python 3.12 with ArviZ 1.x (`make test-py313`: Python 3.13).
# Each creates its virtualenv if missing (.venv; .venv312, .venv313) and installs what it needs.
# torch is installed first and pinned, so installing bnnzoo never pulls another build, and so is
# ArviZ: .venv keeps ArviZ 0.2x (ARVIZ), the newer Pythons get ArviZ 1.x (ARVIZ_NEW); bnnzoo
# works with both. TORCH_INDEX, when set, is the only index that torch comes from:
# TORCH_INDEX=https://download.pytorch.org/whl/cpu enforces the CPU wheel.
#
# PyPI's Linux torch wheel is the CUDA build: for Python 3.12 and 3.13 `pip install torch` brings
# the 0.5 GB wheel plus about 2.5 GB of nvidia-* and triton packages (about 3 GB unpacked), which
# torch needs even on CPU (`import torch` loads libcudnn etc.; a --no-deps install fails there).
# From PyPI with an empty pip cache, the whole .venv312 (torch, its CUDA libraries, ArviZ 1.x,
# bnnzoo[dev]) took 274 s to install on a 2-core CI machine (PIP_NO_CACHE_DIR=1).
PYTHON ?= python3
TORCH ?= torch==2.13.0
TORCH_INDEX ?=
ARVIZ ?= arviz>=0.17,<1
ARVIZ_NEW ?= arviz>=1
# a Python 3.12 / 3.13: python3.12 on PATH if it runs, else pyenv's newest 3.12.x
find_python = $(shell python$(1) -c "" >/dev/null 2>&1 && echo python$(1) || \
	{ v=$$(pyenv versions --bare 2>/dev/null | grep -E '^$(subst .,\.,$(1))\.[0-9]+$$' | tail -1); \
	  [ -n "$$v" ] && echo "$$(pyenv root)/versions/$$v/bin/python$(1)"; })
PYTHON312 ?= $(call find_python,3.12)
PYTHON313 ?= $(call find_python,3.13)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RAY_STAMP := $(VENV)/.installed-ray
DOCS_STAMP := $(VENV)/.installed-docs
# worker processes of `make test` (pytest-xdist): the tests run torch on one thread each, so two
# workers on two cores halve the suite's wall time; TEST_WORKERS=0 runs it in this process
TEST_WORKERS ?= 2

# make docs: the built site opened in headless Chromium (tests/test_site.py) must pass (required)
# or may be skipped where Chromium is missing (optional)
SITE_TEST ?= required

.PHONY: demo test test-slow test-ray test-py312 test-py313 docs figures bench install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX),--index-url "$(TORCH_INDEX)") "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]" "$(ARVIZ)"
	touch $(STAMP)

# .venv312 / .venv313: the same install on a newer Python, with ArviZ 1.x
.PRECIOUS: .venv3%/bin/python .venv3%/.installed
.venv3%/bin/python:
	@test -n "$(PYTHON3$*)" || { echo "no Python 3.$* found (set PYTHON3$*=/path/to/python3.$*)"; exit 1; }
	$(PYTHON3$*) -m venv .venv3$*

.venv3%/.installed: .venv3%/bin/python pyproject.toml
	.venv3$*/bin/python -m pip install -q $(if $(TORCH_INDEX),--index-url "$(TORCH_INDEX)") "$(TORCH)"
	.venv3$*/bin/python -m pip install -q -e ".[dev]" "$(ARVIZ_NEW)"
	touch $@

test-py312: .venv312/.installed
	.venv312/bin/python -m pytest -n $(TEST_WORKERS)

test-py313: .venv313/.installed
	.venv313/bin/python -m pytest -n $(TEST_WORKERS)

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
	BNNZOO_SITE_TEST=$(SITE_TEST) $(BIN)/python -m pytest -p no:cacheprovider tests/test_site.py

# the figures the site shows (docs/papers/figures/): each example that draws some, at its default size
figures: $(STAMP)
	$(BIN)/python docs/figures.py --all

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_gradient.py
	$(BIN)/python benchmarks/bench_sampling.py

clean:
	rm -rf $(VENV) .venv312 .venv313 out site .pytest_cache build
