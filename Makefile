# Quickstart: `make demo` (set up, run every scenario) and `make test` (set up, run the tests).
# Setup is idempotent: graphviz's dot via apt when missing, a .venv, torch pinned, the package.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH := torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench dot browser clean

setup: dot $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing $(TORCH) and the package into $(VENV) (pinned: an unpinned torch pulls GB of CUDA)"
	$(PY) -m pip install --quiet --disable-pip-version-check "$(TORCH)" -e '.[test]'
	@touch $@

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

test: setup browser
	$(PY) -m pytest -q

bench: setup
	$(PY) -m demos.bench --out outputs/bench.json

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
