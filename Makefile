# Quickstart: `make demo` (set up, run every scenario) and `make test` (set up, run the tests).
# Setup is idempotent: graphviz's dot via apt when missing, a venv (with Debian's pythonX.Y-venv
# via apt when venv cannot give it pip), torch 2.13.0, then the package.
#
# Which torch: by default pip takes torch==2.13.0 from its configured index (PyPI). On Linux
# x86_64 PyPI's wheel is the CUDA build and pulls ~2.7 GB of nvidia-*, triton and cuda-* wheels
# with it (~4.9 GB in the venv). Only where pip also finds a 2.13.0+cpu wheel, as on the
# development machine, does that one win. For the CPU-only build:
#   make demo TORCH_INDEX=cpu     (or make setup / make test TORCH_INDEX=cpu)
# takes torch alone from PyTorch's CPU index (~190 MB wheel, no nvidia-*); everything else still
# comes from pip's configured index (~70 MB). A venv keeps the torch 2.13.0 it has whenever
# TORCH_INDEX is left out (make setup, make test after make demo TORCH_INDEX=cpu); naming
# another (TORCH_INDEX=cpu, or TORCH_INDEX=default for pip's configured index) replaces it.

# The Python the venv is made from (3.10 or newer), e.g. PYTHON=python3.12. A venv that
# already has pip is kept: make clean first to change it.
PYTHON ?= python3
# Where the venv goes.
VENV ?= .venv
# Empty: the venv's torch as it is (a new venv: from pip's configured index). default: from
# pip's configured index, replacing another build. cpu (or the name of another of PyTorch's
# wheel indexes): torch alone from $(TORCH_INDEX_URL).
TORCH_INDEX ?=
# The index TORCH_INDEX names; set it too only to use a mirror of PyTorch's index.
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/$(TORCH_INDEX)
# The venv's interpreter.
PY := $(VENV)/bin/python
# The torch release the project is developed and tested with.
TORCH := torch==2.13.0
# pip install, quietly.
PIP_INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check
# A PyTorch index named (not empty, not default).
TORCH_OTHER := $(filter-out default,$(TORCH_INDEX))
# pip's option for TORCH_INDEX: torch alone comes from there (with --no-deps).
TORCH_INDEX_OPT := $(if $(TORCH_OTHER),--index-url $(TORCH_INDEX_URL))
# Where torch comes from; written into the stamp.
TORCH_FROM := $(if $(TORCH_OTHER),$(TORCH_INDEX_URL),default)
# Marks a finished install; it holds $(TORCH_FROM).
STAMP := $(VENV)/.installed
# Removes $(VENV), but only if it is a venv.
RM_VENV := if [ -f $(VENV)/pyvenv.cfg ]; then rm -rf $(VENV); fi

.PHONY: setup demo test test-slow bench bench-diagnosis dot browser clean

# Install again when a TORCH_INDEX given differs from what the stamp records (left out, the
# venv's torch stays whatever it came from).
ifneq ($(TORCH_INDEX),)
ifneq ($(shell cat $(STAMP) 2>/dev/null),$(TORCH_FROM))
.PHONY: $(STAMP)
endif
endif

setup: dot $(STAMP)

# The venv first. `python -m venv` without ensurepip (Debian/Ubuntu lacking python3-venv) fails
# but leaves a venv with no pip behind: that one is removed, pythonX.Y-venv installed with
# apt-get (as root, or with sudo) for a Debian-packaged Python, and the venv made again.
$(STAMP): pyproject.toml Makefile
	@if ! $(PY) -m pip --version >/dev/null 2>&1; then \
	  command -v $(PYTHON) >/dev/null 2>&1 || \
	    { echo "error: no $(PYTHON) here; name a Python 3.10+ with PYTHON=..."; exit 1; }; \
	  $(RM_VENV); \
	  if ! $(PYTHON) -m venv $(VENV) >/dev/null 2>&1 || ! $(PY) -m pip --version >/dev/null 2>&1; then \
	    $(RM_VENV); \
	    pkg=python$$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv; \
	    if [ "$$($(PYTHON) -c 'import sys; print(sys.base_prefix)')" = /usr ] && \
	       command -v apt-get >/dev/null 2>&1 && \
	       { [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null 2>&1; }; then \
	      if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	      $$SUDO apt-get update -qq; \
	      apt-cache show $$pkg >/dev/null 2>&1 || pkg=python3-venv; \
	      echo "installing $$pkg with apt-get: $(PYTHON) -m venv needs it to give the venv pip"; \
	      $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkg >/dev/null; \
	      $(PYTHON) -m venv $(VENV) >/dev/null && $(PY) -m pip --version >/dev/null 2>&1 || \
	        { $(RM_VENV); echo "error: $(PYTHON) -m venv still gives no pip; install $$pkg, or use another PYTHON=..."; exit 1; }; \
	    else \
	      echo "error: $(PYTHON) -m venv cannot make a venv with pip: on Debian/Ubuntu run 'sudo apt-get install $$pkg', elsewhere use a Python with ensurepip (PYTHON=...)"; \
	      exit 1; \
	    fi; \
	  fi; \
	fi
ifeq ($(TORCH_OTHER),)
	@echo "installing $(TORCH) from pip's index (kept where the venv has it), then the package, into $(VENV)"
	@echo "  (on Linux x86_64 PyPI's is the CUDA build, ~2.7 GB of downloads; make ... TORCH_INDEX=cpu for the CPU-only build)"
else
	@echo "installing $(TORCH) alone from $(TORCH_INDEX_URL), then the package, into $(VENV)"
endif
	@prev=$$(cat $@ 2>/dev/null); force=; \
	if [ -n "$(TORCH_INDEX)" ] && [ -n "$$prev" ] && [ "$$prev" != "$(TORCH_FROM)" ]; then \
	  echo "replacing the venv's torch (from $$prev), as TORCH_INDEX=$(TORCH_INDEX) asks; what only the old one needed stays until make clean"; \
	  force=--force-reinstall; \
	fi; \
	if [ -n "$$force" ] || [ -n "$(TORCH_OTHER)" ]; then \
	  echo "$(PIP_INSTALL) --no-deps $$force $(TORCH_INDEX_OPT) $(TORCH)"; \
	  $(PIP_INSTALL) --no-deps $$force $(TORCH_INDEX_OPT) "$(TORCH)"; \
	fi
	$(PIP_INSTALL) "$(TORCH)" -e '.[test]'
	@$(PY) -c 'import torch; print("installed torch", torch.__version__)'
	@prev=$$(cat $@ 2>/dev/null); \
	if [ -z "$(TORCH_INDEX)" ] && [ -n "$$prev" ]; then echo "$$prev"; else echo "$(TORCH_FROM)"; fi > $@.new && mv $@.new $@

dot:
	@if ! command -v dot >/dev/null 2>&1; then \
	  if ! command -v apt-get >/dev/null 2>&1; then \
	    echo "warning: graphviz 'dot' missing and no apt-get; install it (macOS: brew install graphviz)"; \
	  else \
	    if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	    echo "installing graphviz (dot) with apt-get"; \
	    $$SUDO apt-get update -qq && \
	    $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null; \
	  fi; \
	fi

# The report's browser test uses Debian's Chromium and ChromeDriver (the test skips, saying
# why, where they cannot be installed).
browser:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then \
	  if command -v apt-get >/dev/null 2>&1; then \
	    if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	    echo "installing chromium and chromium-driver with apt-get (for the report's browser test)"; \
	    ($$SUDO apt-get update -qq && \
	     $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver \
	       >/dev/null) || echo "warning: could not install chromium; the browser test will skip"; \
	  else \
	    echo "warning: no apt-get: the browser test needs chromium and chromedriver on PATH"; \
	  fi; \
	fi

demo: setup
	$(PY) runner.py --config configs/all.yaml

# ruff (the whole tree) and mypy (the torch-free layers) first: seconds, and they fail fast;
# then every test but the slow tier (tests marked slow: see demos/docs/tests.md)
test: setup browser
	$(PY) -m ruff check --quiet .
	$(PY) -m mypy
	$(PY) -m pytest -q  # the quick tier: pyproject.toml's addopts

# the second tier: other kernel levels, torchrun, every notebook, ensembles,
# signals and browsers (CI runs it after make test)
test-slow: setup browser
	$(PY) -m pytest -q -m slow

bench: setup
	$(PY) -m tests.bench --out outputs/bench.json

# the diagnosis benchmark (demos/docs/checks.md, "How often it is right"): every mutant of the
# benchmark's Functions checked by the lab, about a minute on 2 cores; it rewrites its table in
# checks.md and writes outputs/bench_diagnosis.json
bench-diagnosis: setup
	$(PY) -m tests.bench_diagnosis

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
